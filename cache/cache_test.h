/*
 * cache_test.h - what the unit tests of the block cache share (blocks_test.c,
 * readahead_test.c): a posix store in a scratch directory, files of known
 * bytes in it, a cache over it with small blocks, and the store's counters.
 * Include it once, from the test's own .c file, after mcfs_test.h.
 *
 * The cache runs as in the daemon (fetch threads, the posix store reading
 * the files with pread) but RAM-only (no cache_dir), so every miss is a
 * store read that cache_get_stats() counts.
 */
#ifndef MCFS_CACHE_TEST_H
#define MCFS_CACHE_TEST_H

#include "cache.h"
#include "cache_metadata.h"
#include "cache_stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* 1 MiB, the smallest block_size the config allows: 256 pages of 4 KiB. */
#define T_BS (1u << 20)

struct t_env {
	char dir[64]; /* scratch directory; the store is its "store" subdirectory */
	char store[96];
	struct cfg cfg;
	struct cache *cache;
};

/* Byte @i of the test file made with @seed: differs between offsets, and
 * between seeds at almost every offset. */
static inline unsigned char t_byte(uint64_t i, unsigned seed)
{
	return (unsigned char)(((i + seed * 0x9E3779B9ull) * 0x9E3779B97F4A7C15ull) >> 56);
}

static inline void t_fill(unsigned char *buf, uint64_t off, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = t_byte(off + i, seed);
}

/* Do @len bytes at @p equal the file of @seed at @off? */
static inline bool t_same(const char *p, uint64_t off, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if ((unsigned char)p[i] != t_byte(off + i, seed))
			return false;
	return true;
}

/*
 * Writes store file @name (@size bytes of @seed), replacing any file of that
 * name by rename, so that a rewrite is a new version (another inode). Returns
 * 0 or -errno.
 */
static inline int t_write_file(struct t_env *e, const char *name, uint64_t size, unsigned seed)
{
	char path[256], tmp[256];
	unsigned char *buf = malloc(T_BS);
	uint64_t off;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", e->store, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", e->store, name);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	for (off = 0; off < size && rc == 0; off += T_BS) {
		size_t n = (size_t)(size - off < T_BS ? size - off : T_BS);

		t_fill(buf, off, n, seed);
		if (write(fd, buf, n) != (ssize_t)n)
			rc = -EIO;
	}
	if (close(fd) < 0 || rc < 0 || rename(tmp, path) < 0)
		rc = -EIO;
	free(buf);
	return rc;
}

/*
 * The identity of store file @name as it is now: a new reference, drop with
 * cache_file_put(). Returns 0 or a negative errno.
 */
static inline int t_open_file(struct t_env *e, const char *name, struct cache_attr *attr,
			      struct cache_file **out)
{
	uint64_t expires;
	int rc = cache_stat(e->cache, name, attr, &expires);

	return rc < 0 ? rc : cache_file_get(e->cache, name, attr, out);
}

/*
 * Makes the scratch store and a cfg for it: RAM only, @slots blocks of T_BS,
 * @connections fetch threads, no O_DIRECT (reads ask for exactly the bytes
 * missing, so byte counts are exact). The caller may change cfg before
 * t_start(). Returns 0, or -1 if there is no scratch space (skip).
 */
static inline int t_setup(struct t_env *e, const char *name, unsigned slots, unsigned connections)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/%s.XXXXXX", name);
	if (!mkdtemp(e->dir))
		return -1;
	snprintf(e->store, sizeof(e->store), "%s/store", e->dir);
	if (mkdir(e->store, 0755) < 0)
		return -1;
	cfg_init(&e->cfg);
	cfg_set_source(&e->cfg, e->store);
	e->cfg.block_size = T_BS;
	e->cfg.ram_cache = (uint64_t)slots * T_BS;
	e->cfg.ram_prefault = false;
	e->cfg.connections = connections;
	e->cfg.odirect = false;
	e->cfg.cache_dir[0] = '\0';
	return 0;
}

/* Opens the cache, which opens the store. Returns 0 or a negative errno. */
static inline int t_start(struct t_env *e)
{
	return cache_new(&e->cfg, &e->cache);
}

/* Frees the cache and the store, and removes the scratch directory. */
static inline void t_teardown(struct t_env *e)
{
	char cmd[128];

	cache_free(e->cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", e->dir);
}

static inline struct cache_stats t_stats(struct t_env *e)
{
	struct cache_stats st;

	cache_get_stats(e->cache, &st);
	return st;
}

/*
 * Waits (polling every millisecond) until @cond(e) is true; false if it is
 * not within 60 s. A guard against a hang, not a measurement: a correct
 * cache meets every condition at once or within a few milliseconds.
 */
static inline bool t_wait_for(struct t_env *e, bool (*cond)(struct t_env *e))
{
	struct timespec ms = {0, 1000000};
	int i;

	for (i = 0; i < 60000; i++) {
		if (cond(e))
			return true;
		nanosleep(&ms, NULL);
	}
	return cond(e);
}

#endif
