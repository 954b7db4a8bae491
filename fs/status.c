/*
 * status.c - `mcfs status MOUNTPOINT` and `mcfs evict PATH...`.
 *
 * Both talk to the daemon through the mount's extended attributes, so they
 * need no socket and work for whoever can read the mount:
 *   status: reads the root's user.mcfs.stats ("key value" lines) and prints
 *           the RAM tier, the disk tier, the store and what is in flight;
 *   evict:  reads user.mcfs.evict of each file (directories: every file
 *           below), which drops the file's blocks from both tiers and
 *           answers the bytes dropped (see ops.c for why a read).
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

#define STATUS_MAX 8192

struct kv {
	char key[64];
	unsigned long long val;
};

/* Value of @key in the parsed stats, 0 if absent (an older daemon). */
static unsigned long long get(const struct kv *kv, size_t n, const char *key)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(kv[i].key, key) == 0)
			return kv[i].val;
	return 0;
}

static double pct(unsigned long long part, unsigned long long whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static size_t parse(char *text, struct kv *kv, size_t cap)
{
	char *save = NULL, *line;
	size_t n = 0;

	for (line = strtok_r(text, "\n", &save); line && n < cap;
	     line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "%63s %llu", kv[n].key, &kv[n].val) == 2)
			n++;
	}
	return n;
}

static void print_status(const char *mnt, const struct kv *kv, size_t n)
{
	unsigned long long bs = get(kv, n, "block_size"), hits = get(kv, n, "hits");
	unsigned long long ram_gets = hits + get(kv, n, "misses") + get(kv, n, "waits");
	unsigned long long dh = get(kv, n, "disk_hits"), dm = get(kv, n, "disk_misses");
	static const char *const states[] = {"off", "on", "FULL (ENOSPC): RAM only"};
	unsigned long long st = get(kv, n, "disk_state");
	char a[32], b[32], c[32];

	printf("mcfs on %s (pid %llu)\n", mnt, get(kv, n, "pid"));
	printf("  RAM tier:   %llu of %llu slots used (%s of %s), hit ratio %.1f%% "
	       "(%llu hits, %llu misses, %llu joined)\n",
	       get(kv, n, "slots_used"), get(kv, n, "slots"),
	       mcfs_fmt_bytes(get(kv, n, "slots_used") * bs, a, sizeof(a)),
	       mcfs_fmt_bytes(get(kv, n, "slots") * bs, b, sizeof(b)), pct(hits, ram_gets), hits,
	       get(kv, n, "misses"), get(kv, n, "waits"));
	if (st == 0) {
		printf("  disk tier:  off (no cache_dir, or it could not be used)\n");
	} else {
		printf("  disk tier:  %s; %llu of %llu blocks, %s of %s used; hit ratio %.1f%% "
		       "(%llu hits, %llu misses)\n",
		       states[st < 3 ? st : 1], get(kv, n, "disk_slots_used"),
		       get(kv, n, "disk_slots"),
		       mcfs_fmt_bytes(get(kv, n, "disk_bytes_used"), a, sizeof(a)),
		       mcfs_fmt_bytes(get(kv, n, "disk_bytes_limit"), b, sizeof(b)),
		       pct(dh, dh + dm), dh, dm);
		printf("              read %s, written %s (%llu blocks), %llu dropped writes, "
		       "%llu checksum errors, %llu evictions\n",
		       mcfs_fmt_bytes(get(kv, n, "disk_read_bytes"), a, sizeof(a)),
		       mcfs_fmt_bytes(get(kv, n, "disk_written_bytes"), b, sizeof(b)),
		       get(kv, n, "disk_writes"), get(kv, n, "disk_write_drops"),
		       get(kv, n, "disk_csum_errors"), get(kv, n, "disk_evictions"));
	}
	printf(
	    "  store:      %s fetched in %llu blocks; %llu requests, %llu errors, %llu retries\n",
	    mcfs_fmt_bytes(get(kv, n, "fetched_bytes"), c, sizeof(c)), get(kv, n, "fetches"),
	    get(kv, n, "store_requests"), get(kv, n, "store_errors"), get(kv, n, "store_retries"));
	printf("  in flight:  %llu fetches, %llu disk writes queued\n", get(kv, n, "inflight"),
	       get(kv, n, "disk_queued"));
	if (get(kv, n, "fuse_max_request")) /* absent from an older daemon */
		printf("  FUSE:       requests up to %s, io_uring %s\n",
		       mcfs_fmt_bytes(get(kv, n, "fuse_max_request"), a, sizeof(a)),
		       get(kv, n, "fuse_io_uring") ? "on" : "off");
}

int fs_cmd_status(int argc, char **argv)
{
	struct kv kv[128];
	char *text;
	ssize_t len;
	size_t n;

	if (argc != 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: mcfs status MOUNTPOINT\n");
		return argc == 2 && strcmp(argv[1], "-h") == 0 ? 0 : 2;
	}
	text = malloc(STATUS_MAX);
	if (!text)
		return 1;
	len = getxattr(argv[1], "user.mcfs.stats", text, STATUS_MAX - 1);
	if (len < 0) {
		fprintf(stderr, "mcfs status: %s: %s\n", argv[1],
			errno == ENODATA || errno == ENOTSUP ? "not an mcfs mount point"
							     : strerror(errno));
		free(text);
		return 1;
	}
	text[len] = '\0';
	n = parse(text, kv, MCFS_ARRAY_SIZE(kv));
	print_status(argv[1], kv, n);
	free(text);
	return 0;
}

/* ---- evict -------------------------------------------------------------- */

/* nftw gives no user argument: the walk's totals live here for its duration. */
struct evict_totals {
	unsigned long long bytes;
	unsigned files, errors;
};
static struct evict_totals *walk_totals;

static int evict_one(const char *path, struct evict_totals *t)
{
	char buf[64];
	ssize_t len = getxattr(path, "user.mcfs.evict", buf, sizeof(buf) - 1);

	if (len < 0) {
		fprintf(stderr, "mcfs evict: %s: %s\n", path,
			errno == ENODATA || errno == ENOTSUP ? "not a file on an mcfs mount"
							     : strerror(errno));
		t->errors++;
		return -1;
	}
	buf[len] = '\0';
	t->bytes += strtoull(buf, NULL, 10);
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
	struct evict_totals t = {0, 0, 0};
	struct stat st;
	char b[32];
	int i;

	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr,
			"usage: mcfs evict PATH...   (files, or trees, on an mcfs mount)\n");
		return argc == 2 && strcmp(argv[1], "-h") == 0 ? 0 : 2;
	}
	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "mcfs evict: %s: %s\n", argv[i], strerror(errno));
			t.errors++;
		} else if (S_ISDIR(st.st_mode)) {
			walk_totals = &t;
			nftw(argv[i], walk_fn, 16, FTW_PHYS);
			walk_totals = NULL;
		} else {
			evict_one(argv[i], &t);
		}
	}
	printf("evicted %u file%s, %s dropped\n", t.files, t.files == 1 ? "" : "s",
	       mcfs_fmt_bytes(t.bytes, b, sizeof(b)));
	return t.errors ? 1 : 0;
}
