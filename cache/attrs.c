/*
 * attrs.c - what the store says about paths: attributes, listings, symlink
 * targets and capacity, with the metadata policy around them (cache_metadata.h
 * has the contract).
 *
 * Design. Two levels keep store answers: fs/'s inode table in memory, and
 * LMDB (cache/meta) under cache_dir, which survives restarts. This file owns
 * the rules for both: how long an answer is fresh (attr_ttl, negative_ttl),
 * that "no such path" is an answer too, and what offline serves when the
 * store fails. fs/ keeps only inode numbers and the answers with the
 * expiry time handed out here; it does no ttl arithmetic of its own.
 *
 * Write-through: every definite store answer is recorded with its wall-clock
 * time (LMDB commits here are NOSYNC pwrites: microseconds, see meta.h).
 * Read-back happens only when the inode table has nothing fresh, which after
 * a restart is once per path: a stat that misses memory costs one LMDB read
 * transaction instead of a store request. A recorded answer's age is
 * measured on the wall clock (the monotonic one restarts with the machine)
 * and turned into a monotonic expiry for the caller.
 *
 * Opens are the exception to attr_ttl (cache_confirm()): close-to-open
 * consistency, as NFS gives. An open asks the store for the file's version
 * every time (posix: a stat; http, s3: one HEAD, no body), whatever LMDB or
 * fs/ hold, so that a file rewritten in the store under the same name and
 * size, while mcfs ran or while it was down, is never served from the old
 * blocks in either tier: they are keyed by the old version. That costs one
 * round trip per open; opens are not batched into one confirmation, since one
 * that began before an open arrived can't vouch for a change made after.
 * open_check=ttl turns it off (opens trust attr_ttl, as stats do). Offline, an
 * open the store does not answer gets LMDB's version, logged and counted.
 *
 * Failures to record are logged once by cache/meta and otherwise ignored:
 * the store's answer is served either way. Symlink targets and capacity are
 * not recorded: they go to the store every time.
 *
 * Threads: any; no lock of ours is taken here (LMDB has its own, and none is
 * held across the store request).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_metadata.h"
#ifdef MCFS_HAVE_NET
#include "manifest.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Store answers that say something about the path (worth recording). */
static bool definite(int rc)
{
	return rc == 0 || rc == -ENOENT || rc == -ENOTDIR;
}

/* Age in ns of a record fetched at wall time @fetched; -1 if it is from the future. */
static int64_t age_of(int64_t fetched)
{
	int64_t age = cache_meta_now() - fetched;

	return age < 0 ? -1 : age;
}

/* True if a record @age ns old (age_of()) is younger than @ttl seconds. */
static bool young(int64_t age, double ttl)
{
	return age >= 0 && (double)age < ttl * 1e9;
}

/* True if a record fetched at wall time @fetched may be served for @ttl
 * seconds: young, and not older than the last cache_distrust(). */
static bool trusted(const struct cache *c, int64_t fetched, double ttl)
{
	int64_t before = atomic_load_explicit(&c->distrust_before, memory_order_relaxed);

	return fetched >= before && young(age_of(fetched), ttl);
}

/* The monotonic time @age ns ago (clamped at 1: 0 means "never"). */
static uint64_t mono_ago(int64_t age)
{
	uint64_t now = mcfs_now_ns();

	return (uint64_t)age < now ? now - (uint64_t)age : 1;
}

/*
 * When an answer learned at monotonic time @learned stops being fresh after
 * @ttl seconds: fresh while now - learned < ttl, that is now < the result
 * (rounded up, so that a fractional ns ttl keeps the same last fresh ns).
 * A ttl of 0 gives @learned, never fresh again.
 */
static uint64_t expiry(uint64_t learned, double ttl)
{
	double ns = ttl * 1e9;
	uint64_t whole;

	if (ns >= (double)(UINT64_MAX - learned))
		return UINT64_MAX;
	whole = (uint64_t)ns;
	if ((double)whole < ns)
		whole++;
	return learned + whole;
}

bool cache_attr_fresh(uint64_t expires)
{
	return mcfs_now_ns() < expires;
}

/* The ttl that applies to an answer: attributes, or "no such path". */
static double ttl_of(const struct cache *c, bool exists)
{
	return exists ? c->cfg->attr_ttl : c->cfg->negative_ttl;
}

/* Records a definite store answer about @path (write-through to LMDB). */
static void record(struct cache *c, const char *path, int rc, const struct cache_attr *a)
{
	int put;

	if (!c->meta)
		return;
	put = cache_meta_put_attr(c->meta, path, rc == 0 ? a : NULL, cache_meta_now());
	if (put < 0) /* warned about once by cache/meta */
		MCFS_DEBUG("%s: attributes not recorded: %s", path, strerror(-put));
}

int cache_stat(struct cache *c, const char *path, struct cache_attr *a, uint64_t *expires)
{
	struct cache_meta *m = c->meta;
	struct cache_attr old;
	bool exists = false, have_old = false;
	int64_t fetched, age;
	int rc;

	if (m && cache_meta_get_attr(m, path, &old, &exists, &fetched) == 0) {
		have_old = true;
		age = age_of(fetched);
		if (trusted(c, fetched, ttl_of(c, exists))) {
			*a = old;
			*expires = expiry(mono_ago(age), ttl_of(c, exists));
			return exists ? 0 : -ENOENT;
		}
	}
	rc = remote_stat(c->remote, path, a);
	if (definite(rc)) {
		*expires = expiry(mcfs_now_ns(), ttl_of(c, rc == 0));
		record(c, path, rc, a);
		return rc;
	}
	if (c->cfg->offline && have_old) {
		MCFS_DEBUG("offline: %s from the metadata cache (store: %s)", path, strerror(-rc));
		*a = old;
		*expires = expiry(mcfs_now_ns(), ttl_of(c, exists));
		return exists ? 0 : -ENOENT;
	}
	return rc;
}

bool cache_open_confirms(const struct cache *c)
{
	return strcmp(c->cfg->open_check, "ttl") != 0;
}

/*
 * Offline, the store did not answer an open's confirmation (@err): the
 * version LMDB recorded, whatever its age. Logged once per outage (a
 * confirmation the store answers ends it), not at every open: a model load
 * opens hundreds of files; `mcfs status` counts them all. Returns as
 * cache_confirm(), or @err when LMDB has no record.
 */
static int confirm_offline(struct cache *c, const char *path, int err, struct cache_attr *a,
			   uint64_t *expires)
{
	struct cache_attr old;
	bool exists = false;
	int64_t fetched;

	if (!c->meta || cache_meta_get_attr(c->meta, path, &old, &exists, &fetched) < 0)
		return err;
	atomic_fetch_add_explicit(&c->offline_opens, 1, memory_order_relaxed);
	if (!atomic_exchange(&c->offline_said, true))
		MCFS_WARN("offline: the store did not answer the open of %s (%s): serving the "
			  "version recorded %.0f s ago in %s, unconfirmed, and so for every open "
			  "until the store answers again (`mcfs status` counts them)",
			  path, strerror(-err), (double)MCFS_MAX(age_of(fetched), 0) / 1e9,
			  c->cfg->cache_dir);
	else
		MCFS_DEBUG("offline: %s opened unconfirmed (store: %s)", path, strerror(-err));
	*a = old;
	*expires = expiry(mcfs_now_ns(), ttl_of(c, exists));
	return exists ? 0 : -ENOENT;
}

int cache_confirm(struct cache *c, const char *path, struct cache_attr *a, uint64_t *expires)
{
	int rc;

	rc = remote_stat_file(c->remote, path, a);
	if (definite(rc)) {
		atomic_fetch_add_explicit(&c->open_checks, 1, memory_order_relaxed);
		if (atomic_load_explicit(&c->offline_said, memory_order_relaxed))
			atomic_store(&c->offline_said, false); /* the outage is over */
		*expires = expiry(mcfs_now_ns(), ttl_of(c, rc == 0));
		record(c, path, rc, a);
		return rc;
	}
	return c->cfg->offline ? confirm_offline(c, path, rc, a, expires) : rc;
}

/* cache_list() and cache_relist(): @recorded, LMDB's record may answer if fresh. */
static int list(struct cache *c, const char *path, bool recorded, struct cache_dirent **ents,
		size_t *n, uint64_t *expires)
{
	struct cache_meta *m = c->meta;
	struct cache_dirent *old = NULL;
	size_t nold = 0;
	int64_t fetched, age;
	int rc;

	if (m && cache_meta_get_list(m, path, &old, &nold, &fetched) == 0) {
		age = age_of(fetched);
		if (recorded && trusted(c, fetched, c->cfg->attr_ttl)) {
			*ents = old;
			*n = nold;
			*expires = expiry(mono_ago(age), c->cfg->attr_ttl);
			return 0;
		}
	}
	rc = remote_list(c->remote, path, ents, n);
	if (rc == 0) {
		*expires = expiry(mcfs_now_ns(), c->cfg->attr_ttl);
		if (m) {
			int put = cache_meta_put_list(m, path, *ents, *n, cache_meta_now());

			if (put < 0) /* warned about once by cache/meta */
				MCFS_DEBUG("listing of '%s' not recorded: %s", path,
					   strerror(-put));
		}
		free(old);
		return 0;
	}
	if (c->cfg->offline && old && rc != -ENOENT && rc != -ENOTDIR) {
		MCFS_DEBUG("offline: listing of '%s' from the metadata cache (store: %s)", path,
			   strerror(-rc));
		*ents = old;
		*n = nold;
		*expires = expiry(mcfs_now_ns(), c->cfg->attr_ttl);
		return 0;
	}
	free(old);
	return rc;
}

int cache_list(struct cache *c, const char *path, struct cache_dirent **ents, size_t *n,
	       uint64_t *expires)
{
	return list(c, path, true, ents, n, expires);
}

int cache_relist(struct cache *c, const char *path, struct cache_dirent **ents, size_t *n,
		 uint64_t *expires)
{
	return list(c, path, false, ents, n, expires);
}

uint64_t cache_list_miss_expiry(const struct cache *c, uint64_t list_expires)
{
	double ttl = c->cfg->attr_ttl, neg = c->cfg->negative_ttl;
	uint64_t ns;

	if (neg >= ttl || list_expires == UINT64_MAX)
		return list_expires; /* a miss is trusted as long as the listing */
	ns = (uint64_t)((ttl - neg) * 1e9);
	return list_expires > ns ? list_expires - ns : 0;
}

void cache_distrust(struct cache *c)
{
	atomic_store_explicit(&c->distrust_before, cache_meta_now(), memory_order_relaxed);
}

void cache_forget_attr(struct cache *c, const char *path)
{
	int rc;

	if (!c->meta)
		return;
	rc = cache_meta_del_attr(c->meta, path);
	if (rc < 0) /* warned about once by cache/meta */
		MCFS_DEBUG("%s: recorded attributes not forgotten: %s", path, strerror(-rc));
}

int cache_readlink(struct cache *c, const char *path, char *buf, size_t len)
{
	return remote_readlink(c->remote, path, buf, len);
}

void cache_statfs(struct cache *c, uint64_t *total_bytes, uint64_t *free_bytes)
{
	if (remote_statfs(c->remote, total_bytes, free_bytes) < 0)
		*total_bytes = *free_bytes = 0; /* object stores have no capacity to report */
}

int cache_write_manifest(const char *dir, FILE *out)
{
#ifdef MCFS_HAVE_NET
	return remote_manifest_write(dir, out);
#else
	(void)out;
	fprintf(stderr, "mcfs: manifest %s: this mcfs is built without the http store\n", dir);
	return -ENOTSUP;
#endif
}
