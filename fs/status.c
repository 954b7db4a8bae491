/*
 * status.c - `mcfs status MOUNTPOINT` and `mcfs evict PATH...`.
 *
 * Both talk to the daemon through the mount's extended attributes, so they
 * need no socket and work for whoever can read the mount:
 *   status: reads the root's user.mcfs.stats ("key value" lines, parsed by
 *           fs_stats_parse(): a key it lacks is an error, never a 0) and
 *           prints the RAM tier, the disk tier (or why there is none), the
 *           shared tier (when shared_cache is set), the store, the opens
 *           (confirmed, or served offline unconfirmed) and what is in flight;
 *   evict:  reads user.mcfs.evict of each file (directories: every file
 *           below), which drops the file's blocks from both tiers and
 *           answers the bytes dropped from each (see ops.c for why a read);
 *   refresh: reads user.mcfs.refresh of each path (file or directory), which
 *           makes the daemon ask the store again about it and everything
 *           below, and answers how many paths it had kept;
 *   log-level: reads the root's user.mcfs.log_level (the daemon's level),
 *           or user.mcfs.log_level.LEVEL, which sets it first.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "mcfs.h"
#include "stats.h"
#include "cache_disk.h"
#include "cache_ram.h"
#include "cache_stats.h"

#define STATUS_MAX 8192

static double pct(unsigned long long part, unsigned long long whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* "off (why[: errno text])": the reason the daemon had for running RAM only. */
static void print_disk_off(const struct cache_stats *cs)
{
	printf("  disk tier:  off (%s", cache_disk_off_text((int)cs->disk_off_reason));
	if (cs->disk_off_errno)
		printf(": %s", strerror((int)cs->disk_off_errno));
	printf(")\n");
}

/* The shared tier's two lines (issue 15); nothing when shared_cache is not set. */
static void print_shared(const struct cache_stats *cs)
{
	/* shared_state, as cache/counters.h words it */
	static const char *const states[] = {"off", "up", "DOWN: reads go to the store",
					     "up but REFUSING WRITES: blocks are read, not added"};
	unsigned long long gets = cs->shared_hits + cs->shared_misses;
	char a[32], b[32];

	if (cs->shared_state == 0)
		return;
	printf("  shared tier: %s; hit ratio %.1f%% (%llu hits, %llu misses), %s read; "
	       "%llu waited for another node's fetch, %llu gave up waiting\n",
	       states[cs->shared_state < 4 ? cs->shared_state : 1], pct(cs->shared_hits, gets),
	       (unsigned long long)cs->shared_hits, (unsigned long long)cs->shared_misses,
	       mcfs_fmt_bytes(cs->shared_read_bytes, a, sizeof(a)),
	       (unsigned long long)cs->shared_waits, (unsigned long long)cs->shared_wait_timeouts);
	printf("              written %s (%llu blocks), %llu found there already, %llu dropped, "
	       "%llu queued; %llu errors, %llu corrupt and %llu unauthentic objects refused\n",
	       mcfs_fmt_bytes(cs->shared_put_bytes, b, sizeof(b)),
	       (unsigned long long)cs->shared_puts, (unsigned long long)cs->shared_put_skips,
	       (unsigned long long)cs->shared_put_drops, (unsigned long long)cs->shared_queued,
	       (unsigned long long)cs->shared_errors, (unsigned long long)cs->shared_corrupt,
	       (unsigned long long)cs->shared_unauthentic);
	printf("              %llu runs leased (fetched here for the cluster), %llu of their "
	       "writes waited for room in the queue; %llu taken over from a node that made "
	       "no progress\n",
	       (unsigned long long)cs->shared_leases, (unsigned long long)cs->shared_put_waits,
	       (unsigned long long)cs->shared_wait_timeouts);
}

static void print_status(const char *mnt, const struct fs_stats *st)
{
	static const char *const states[] = {"off", "on", "FULL (ENOSPC): RAM only"};
	const struct cache_stats *cs = &st->cache;
	const struct cache_disk_stats *ds = &cs->disk;
	unsigned long long ram_gets = cs->hits + cs->misses + cs->waits;
	char a[32], b[32], c[32];

	printf("mcfs on %s (pid %llu)\n", mnt, (unsigned long long)st->pid);
	printf("  RAM tier:   %llu of %llu slots used (%s of %s), hit ratio %.1f%% "
	       "(%llu hits, %llu misses, %llu joined)\n",
	       (unsigned long long)cs->slots_used, (unsigned long long)cs->slots,
	       mcfs_fmt_bytes(cs->slots_used * cs->block_size, a, sizeof(a)),
	       mcfs_fmt_bytes(cs->slots * cs->block_size, b, sizeof(b)), pct(cs->hits, ram_gets),
	       (unsigned long long)cs->hits, (unsigned long long)cs->misses,
	       (unsigned long long)cs->waits);
	if (cs->disk_state == 0) {
		print_disk_off(cs);
	} else {
		printf("  disk tier:  %s; %llu of %llu blocks, %s of %s used; hit ratio %.1f%% "
		       "(%llu hits, %llu misses)\n",
		       states[cs->disk_state < 3 ? cs->disk_state : 1],
		       (unsigned long long)ds->slots_used, (unsigned long long)ds->slots,
		       mcfs_fmt_bytes(ds->bytes_used, a, sizeof(a)),
		       mcfs_fmt_bytes(ds->bytes_limit, b, sizeof(b)),
		       pct(ds->hits, ds->hits + ds->misses), (unsigned long long)ds->hits,
		       (unsigned long long)ds->misses);
		printf("              read %s, written %s (%llu blocks), %llu dropped writes, "
		       "%llu checksum errors, %llu evictions\n",
		       mcfs_fmt_bytes(ds->read_bytes, a, sizeof(a)),
		       mcfs_fmt_bytes(ds->written_bytes, b, sizeof(b)),
		       (unsigned long long)ds->writes, (unsigned long long)ds->write_drops,
		       (unsigned long long)ds->csum_errors, (unsigned long long)ds->evictions);
	}
	print_shared(cs);
	printf(
	    "  store:      %s fetched in %llu blocks; %llu requests, %llu errors, %llu retries\n",
	    mcfs_fmt_bytes(cs->fetched_bytes, c, sizeof(c)), (unsigned long long)cs->fetches,
	    (unsigned long long)cs->store_requests, (unsigned long long)cs->store_errors,
	    (unsigned long long)cs->store_retries);
	/* close-to-open (issue 16): an open the store did not answer is said here */
	printf("  opens:      %llu confirmed with the store", (unsigned long long)cs->open_checks);
	if (cs->offline_opens)
		printf("; %llu OFFLINE: served the version recorded in the cache directory, "
		       "unconfirmed",
		       (unsigned long long)cs->offline_opens);
	printf("\n");
	printf("  in flight:  %llu fetches, %llu disk writes queued\n",
	       (unsigned long long)cs->inflight, (unsigned long long)ds->queued);
	if (st->gpu_devices)
		printf(
		    "  GPUs:       %llu, %llu ready (context made, RAM tier mapped); %s of the RAM "
		    "tier pinned\n",
		    (unsigned long long)st->gpu_devices, (unsigned long long)st->gpu_ready,
		    mcfs_fmt_bytes(st->gpu_pinned_bytes, a, sizeof(a)));
	if (st->fuse_max_request)
		printf("  FUSE:       requests up to %s, io_uring %s\n",
		       mcfs_fmt_bytes(st->fuse_max_request, a, sizeof(a)),
		       st->fuse_io_uring ? "on" : "off");
	printf("  passthrough: %s; %llu opens, %llu fell back to the cache; %llu backing files "
	       "(%s), %llu verified",
	       st->passthrough ? "on" : "off", (unsigned long long)st->passthrough_opens,
	       (unsigned long long)st->passthrough_fallbacks, (unsigned long long)cs->backing_files,
	       mcfs_fmt_bytes(cs->backing_bytes, a, sizeof(a)),
	       (unsigned long long)cs->backing_builds);
	if (cs->backing_build_errors)
		printf(", %llu FAILED verification (see the daemon's log)",
		       (unsigned long long)cs->backing_build_errors);
	printf("\n");
	printf("  tables:     %llu inodes, %llu file versions in use\n",
	       (unsigned long long)st->inodes_live, (unsigned long long)cs->file_identities);
	if (cs->meta_map_bytes)
		printf("  metadata:   %s of the %s map used; older attributes and listings dropped "
		       "%llu times for room\n",
		       mcfs_fmt_bytes(cs->meta_used_bytes, a, sizeof(a)),
		       mcfs_fmt_bytes(cs->meta_map_bytes, b, sizeof(b)),
		       (unsigned long long)cs->meta_prunes);
	if (st->inode_renumbers || st->inodes_retired)
		printf("  renumbered: %llu files replaced in the store while open with passthrough "
		       "(new inode numbers); %llu old inodes still held by their opens\n",
		       (unsigned long long)st->inode_renumbers,
		       (unsigned long long)st->inodes_retired);
}

int fs_cmd_status(int argc, char **argv)
{
	struct fs_stats st;
	const char *key;
	char *text;
	ssize_t len;
	int rc;

	if (argc != 2 || argv[1][0] == '-') {
		if (argc < 2)
			MCFS_ERR("status needs one MOUNTPOINT");
		else
			MCFS_ERR("status: unexpected '%s'", argv[argc == 2 ? 1 : 2]);
		return fs_cli_usage("status");
	}
	text = malloc(STATUS_MAX);
	if (!text)
		return 1;
	len = getxattr(argv[1], "user.mcfs.stats", text, STATUS_MAX - 1);
	if (len < 0) {
		MCFS_ERR("status: %s: %s", argv[1],
			 errno == ENODATA || errno == ENOTSUP ? "not an mcfs mount point"
							      : strerror(errno));
		free(text);
		return 1;
	}
	text[len] = '\0';
	rc = fs_stats_parse(text, &st, &key);
	free(text);
	if (rc < 0) {
		MCFS_ERR("status: %s: the daemon's counters %s '%s': a daemon of another mcfs "
			 "version? (remount to run this one)",
			 argv[1], rc == -ENOENT ? "lack" : "have no number for", key);
		return 1;
	}
	print_status(argv[1], &st);
	return 0;
}

/* What a failed getxattr of one of the admin's names means, for @cmd ("evict"). */
static const char *admin_xattr_error(const char *cmd, int err, char *buf, size_t len)
{
	if (err == ENODATA || err == ENOTSUP)
		return "not on an mcfs mount";
	if (err != EPERM)
		return strerror(err);
	snprintf(buf, len,
		 "not permitted: only the node's admin may %s (CAP_SYS_ADMIN in the daemon's "
		 "user namespace, or the daemon's own user when it is not root)",
		 cmd);
	return buf;
}

/* ---- evict -------------------------------------------------------------- */

/* nftw gives no user argument: the walk's totals live here for its duration. */
struct evict_totals {
	unsigned long long ram, disk; /* bytes dropped from each tier */
	unsigned long long held; /* versions open through passthrough: dropped at their close */
	unsigned files, errors;
};
static struct evict_totals *walk_totals;

static int evict_one(const char *path, struct evict_totals *t)
{
	struct cache_evicted ev;
	char buf[FS_EVICT_TEXT_MAX + 1];
	ssize_t len = getxattr(path, "user.mcfs.evict", buf, sizeof(buf) - 1);
	char why[256];

	if (len < 0) {
		MCFS_ERR("evict: %s: %s", path,
			 errno == ENODATA || errno == ENOTSUP
			     ? "not a file on an mcfs mount"
			     : admin_xattr_error("evict", errno, why, sizeof(why)));
		t->errors++;
		return -1;
	}
	buf[len] = '\0';
	if (fs_evict_parse(buf, &ev) < 0) {
		/* dropped, but by how much is unknown: an older daemon's answer */
		MCFS_ERR("evict: %s: the daemon answered '%.20s', not bytes per tier (is it a "
			 "daemon of another mcfs version?)",
			 path, buf);
		t->errors++;
		return -1;
	}
	t->ram += ev.ram_bytes;
	t->disk += ev.disk_bytes;
	t->held += ev.held_open;
	t->files++;
	return 0;
}

static int walk_fn(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		evict_one(path, walk_totals);
	return 0;
}

int fs_cmd_evict(int argc, char **argv)
{
	struct evict_totals t = {0, 0, 0, 0, 0};
	struct stat st;
	char r[32], d[32];
	int i;

	if (argc < 2 || argv[1][0] == '-') {
		if (argc < 2)
			MCFS_ERR("evict needs at least one PATH");
		else
			MCFS_ERR("evict: unknown option '%s'", argv[1]);
		return fs_cli_usage("evict");
	}
	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) < 0) {
			MCFS_ERR("evict: %s: %s", argv[i], strerror(errno));
			t.errors++;
		} else if (S_ISDIR(st.st_mode)) {
			walk_totals = &t;
			nftw(argv[i], walk_fn, 16, FTW_PHYS);
			walk_totals = NULL;
		} else {
			evict_one(argv[i], &t);
		}
	}
	/* Per tier: a block held by both is dropped twice, and a sum would say
	 * twice the file's size. Nothing to sum when every path failed: the
	 * error lines said why. */
	if (t.files == 0 && t.errors)
		return 1;
	printf("evicted %u file%s: %s dropped from RAM, %s from disk\n", t.files,
	       t.files == 1 ? "" : "s", mcfs_fmt_bytes(t.ram, r, sizeof(r)),
	       mcfs_fmt_bytes(t.disk, d, sizeof(d)));
	if (t.held)
		printf("%llu file version%s open through passthrough keep%s %s disk blocks until "
		       "the last close, then they are dropped\n",
		       t.held, t.held == 1 ? "" : "s", t.held == 1 ? "s" : "",
		       t.held == 1 ? "its" : "their");
	return t.errors ? 1 : 0;
}

/* ---- refresh ------------------------------------------------------------ */

int fs_cmd_refresh(int argc, char **argv)
{
	char buf[FS_EVICT_TEXT_MAX + 1], why[256];
	int i, errors = 0;
	ssize_t len;

	if (argc < 2 || argv[1][0] == '-') {
		if (argc < 2)
			MCFS_ERR("refresh needs at least one PATH");
		else
			MCFS_ERR("refresh: unknown option '%s'", argv[1]);
		return fs_cli_usage("refresh");
	}
	for (i = 1; i < argc; i++) {
		len = getxattr(argv[i], "user.mcfs.refresh", buf, sizeof(buf) - 1);
		if (len < 0) {
			MCFS_ERR("refresh: %s: %s", argv[i],
				 admin_xattr_error("refresh", errno, why, sizeof(why)));
			errors++;
			continue;
		}
		buf[len] = '\0';
		printf("refreshed %s: %s known path%s below will be asked of the store again\n",
		       argv[i], buf, strcmp(buf, "1") == 0 ? "" : "s");
	}
	return errors ? 1 : 0;
}

/* ---- log-level ---------------------------------------------------------- */

int fs_cmd_log_level(int argc, char **argv)
{
	const char *names[MCFS_LOG_DEBUG + 1], *near;
	char name[64], buf[32], why[256];
	ssize_t len;
	int i;

	if (argc < 2 || argc > 3 || argv[1][0] == '-') {
		if (argc < 2)
			MCFS_ERR("log-level needs a MOUNTPOINT");
		else if (argc > 3)
			MCFS_ERR("log-level takes MOUNTPOINT and LEVEL: '%s' is one word too many",
				 argv[3]);
		else
			MCFS_ERR("log-level: unknown option '%s'", argv[1]);
		return fs_cli_usage("log-level");
	}
	snprintf(name, sizeof(name), "user.mcfs.log_level");
	if (argc == 3) {
		i = mcfs_log_level_of(argv[2]);
		if (i < 0) {
			for (i = 0; i <= MCFS_LOG_DEBUG; i++)
				names[i] = mcfs_log_level_name(i);
			near = mcfs_nearest(argv[2], names, MCFS_ARRAY_SIZE(names));
			MCFS_ERR("log-level: '%s' is no level: error, warning, info or debug%s%s%s",
				 argv[2], near ? " (did you mean '" : "", near ? near : "",
				 near ? "'?)" : "");
			return FS_EXIT_USAGE;
		}
		snprintf(name, sizeof(name), "user.mcfs.log_level.%s", argv[2]);
	}
	len = getxattr(argv[1], name, buf, sizeof(buf) - 1);
	if (len < 0) {
		MCFS_ERR("log-level: %s: %s", argv[1],
			 errno == ENODATA
			     ? "not the root of an mcfs mount (or its daemon is older)"
			     : admin_xattr_error("set the log level", errno, why, sizeof(why)));
		return 1;
	}
	buf[len] = '\0';
	printf("%s: log level %s\n", argv[1], buf);
	return 0;
}
