/*
 * prefetch.c - `mcfs prefetch [-q] PATH...`: warm files or whole directory
 * trees of a mount into its cache, so a scheduler can load a model before the
 * pod that needs it starts.
 *
 * The bytes never come to this process: for each file it sends
 * MCFS_IOC_PREFETCH with a cursor, and the daemon starts warm-up fetches
 * (cache_warm) from the cursor until its queue is full, answering where to
 * continue. Progress is the file's `user.mcfs.cached` xattr; a file is done
 * when the cursor is at its end and its bytes are cached, or, for a file
 * larger than the cache, when the daemon has no fetch in flight any more.
 * A program can do the same with the ioctl alone (include/mcfs/mcfs_ioctl.h).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "mcfs.h"
#include "mcfs/mcfs_ioctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

struct job {
	char **paths; /* regular files to warm, caller frees with free_job() */
	uint64_t *sizes;
	size_t n, cap;
	uint64_t total; /* bytes */
};

static struct job *walking; /* nftw has no user pointer: the walk in progress */

static int add_file(struct job *j, const char *path, uint64_t size)
{
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 64;
		char **p = realloc(j->paths, cap * sizeof(*p));
		uint64_t *s;

		if (!p)
			return -ENOMEM;
		j->paths = p;
		s = realloc(j->sizes, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		j->sizes = s;
		j->cap = cap;
	}
	j->paths[j->n] = strdup(path);
	if (!j->paths[j->n])
		return -ENOMEM;
	j->sizes[j->n++] = size;
	j->total += size;
	return 0;
}

static int on_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		return add_file(walking, path, (uint64_t)st->st_size) < 0 ? -1 : 0;
	return 0;
}

static void free_job(struct job *j)
{
	size_t i;

	for (i = 0; i < j->n; i++)
		free(j->paths[i]);
	free(j->paths);
	free(j->sizes);
}

/* The root of the mount holding @path: the topmost directory on its device. */
static void mount_root(const char *path, char *out, size_t len)
{
	char cur[PATH_MAX], up[PATH_MAX + 4];
	struct stat a, b;

	if (!realpath(path, cur) || stat(cur, &a) < 0) {
		snprintf(out, len, "%s", path);
		return;
	}
	if (!S_ISDIR(a.st_mode))
		*strrchr(cur, '/') = '\0';
	for (;;) {
		snprintf(up, sizeof(up), "%s/..", cur);
		if (cur[0] == '\0' || stat(up, &b) < 0 || b.st_dev != a.st_dev)
			break;
		*strrchr(cur, '/') = '\0';
	}
	snprintf(out, len, "%s", cur[0] ? cur : "/");
}

static uint64_t xattr_u64(const char *path, const char *name, const char *key)
{
	char buf[4096], *p;
	ssize_t n = getxattr(path, name, buf, sizeof(buf) - 1);
	size_t kl;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (!key)
		return strtoull(buf, NULL, 10);
	kl = strlen(key);
	for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
			return strtoull(p + kl + 1, NULL, 10);
	return 0;
}

static double now_s(void)
{
	return (double)mcfs_now_ns() / 1e9;
}

static void draw(bool quiet, uint64_t done, uint64_t total, double t0)
{
	char a[32], b[32], r[32];
	double el = now_s() - t0, frac = total ? (double)done / (double)total : 1.0;
	int i, w = 30;

	if (quiet || !isatty(STDERR_FILENO))
		return;
	fprintf(stderr, "\r[");
	for (i = 0; i < w; i++)
		fputc(i < (int)(frac * w) ? '#' : ' ', stderr);
	fprintf(stderr, "] %s / %s  %s ", mcfs_fmt_bytes(done, a, sizeof(a)),
		mcfs_fmt_bytes(total, b, sizeof(b)),
		mcfs_fmt_rate(el > 0 ? (double)done / el : 0.0, r, sizeof(r)));
}

/* Warms one file. Returns 0 or a negative errno after printing why. */
static int warm_file(const char *path, uint64_t size, const char *root, uint64_t base,
		     uint64_t total, double t0, bool quiet)
{
	struct mcfs_prefetch_req req;
	struct timespec nap = {0, 20 * 1000 * 1000};
	uint64_t cursor = 0, cached = 0, last = UINT64_MAX;
	int fd, idle = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no whole fetch at open */
	if (fd < 0) {
		int e = errno;

		MCFS_ERR("prefetch: %s: %s", path, strerror(e));
		return -e;
	}
	while (size > 0) {
		if (cursor < size) {
			memset(&req, 0, sizeof(req));
			req.abi_version = MCFS_IOCTL_ABI;
			req.offset = cursor;
			if (ioctl(fd, MCFS_IOC_PREFETCH, &req) < 0) {
				int e = errno;

				if (!quiet && isatty(STDERR_FILENO))
					fputc('\n', stderr); /* end the progress bar's line */
				MCFS_ERR("prefetch: %s: %s", path,
					 e == ENOTTY || e == EINVAL ? "not a file of an mcfs mount"
								    : strerror(e));
				close(fd);
				return -e;
			}
			cursor = req.next_offset;
		}
		cached = xattr_u64(path, "user.mcfs.cached", NULL);
		draw(quiet, base + MCFS_MIN(cached, size), total, t0);
		if (cursor >= size && cached >= size)
			break;
		/* larger than the cache: done once nothing is in flight and nothing moves */
		if (cursor >= size) {
			idle = cached == last && xattr_u64(root, "user.mcfs.stats", "inflight") == 0
				   ? idle + 1
				   : 0;
			if (idle >= 3)
				break;
		}
		last = cached;
		nanosleep(&nap, NULL);
	}
	close(fd);
	return 0;
}

int fs_cmd_prefetch(int argc, char **argv)
{
	static const struct option longopts[] = {{"quiet", no_argument, NULL, 'q'},
						 {"help", no_argument, NULL, 'h'},
						 {NULL, 0, NULL, 0}};
	struct job j = {0};
	char root[PATH_MAX], a[32], r[32];
	bool quiet = false;
	struct stat st;
	uint64_t base = 0;
	double t0, el;
	int c, i, rc = 0;
	size_t k;

	optind = 1;
	opterr = 0;
	for (;;) {
		c = getopt_long(argc, argv, ":qh", longopts, NULL);
		if (c == -1)
			break;
		if (c == 'q')
			quiet = true;
		else if (c == 'h') /* main() answers a lone -h first; this is -qh */
			return fs_cli_help("prefetch");
		else
			return fs_cli_bad_option("prefetch", c, argv);
	}
	if (optind >= argc) {
		MCFS_ERR("prefetch needs at least one PATH");
		return fs_cli_usage("prefetch");
	}
	for (i = optind; i < argc && rc == 0; i++) {
		if (stat(argv[i], &st) < 0) {
			rc = -errno;
			MCFS_ERR("prefetch: %s: %s", argv[i], strerror(-rc));
		} else if (S_ISDIR(st.st_mode)) {
			walking = &j;
			if (nftw(argv[i], on_entry, 16, FTW_PHYS) != 0) {
				MCFS_ERR("prefetch: cannot walk %s: %s", argv[i], strerror(errno));
				rc = -EIO;
			}
		} else {
			rc = add_file(&j, argv[i], (uint64_t)st.st_size);
		}
	}
	t0 = now_s();
	for (k = 0; rc == 0 && k < j.n; k++) {
		mount_root(j.paths[k], root, sizeof(root));
		rc = warm_file(j.paths[k], j.sizes[k], root, base, j.total, t0, quiet);
		base += j.sizes[k];
	}
	el = now_s() - t0;
	if (!quiet && isatty(STDERR_FILENO))
		fputc('\n', stderr);
	if (rc == 0)
		printf("prefetched %zu file(s), %s in %.2f s (%s)\n", j.n,
		       mcfs_fmt_bytes(j.total, a, sizeof(a)), el,
		       mcfs_fmt_rate(el > 0 ? (double)j.total / el : 0.0, r, sizeof(r)));
	free_job(&j);
	return rc == 0 ? 0 : 1;
}
