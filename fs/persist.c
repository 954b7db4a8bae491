/*
 * persist.c - attributes and listings through LMDB (see persist.h).
 *
 * Write-through: every store answer is recorded with its wall-clock time
 * (LMDB commits here are NOSYNC pwrites: microseconds, see cache/meta.h).
 * Read-back happens only when the in-memory table (inode.c) has nothing
 * fresh, which after a restart is once per path: a stat that misses memory
 * costs one LMDB read transaction instead of a store request.
 *
 * Failures to record are logged once by cache/meta and otherwise ignored:
 * the store's answer is served either way.
 */
#define _GNU_SOURCE
#include "persist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"

/* Store answers that say something about the path (cacheable). */
static bool definite(int rc)
{
	return rc == 0 || rc == -ENOENT || rc == -ENOTDIR;
}

/* Age of a record fetched at wall time @fetched; -1 if it is from the future. */
static int64_t age_of(int64_t fetched)
{
	int64_t age = cache_meta_now() - fetched;

	return age < 0 ? -1 : age;
}

/* The monotonic time @age ns ago (clamped at 1: 0 means "never"). */
static uint64_t mono_ago(int64_t age)
{
	uint64_t now = mcfs_now_ns();

	return (uint64_t)age < now ? now - (uint64_t)age : 1;
}

int fs_persist_stat(struct fs_session *s, const char *path, struct remote_attr *a,
		    uint64_t *learned)
{
	struct cache_meta *m = cache_get_meta(s->cache);
	struct remote_attr old;
	bool exists = false, have_old = false;
	int64_t fetched, age;
	double ttl;
	int rc;

	if (m && cache_meta_get_attr(m, path, &old, &exists, &fetched) == 0) {
		have_old = true;
		age = age_of(fetched);
		ttl = exists ? s->cfg.attr_ttl : s->cfg.negative_ttl;
		if (age >= 0 && (double)age < ttl * 1e9) {
			*a = old;
			*learned = mono_ago(age);
			return exists ? 0 : -ENOENT;
		}
	}
	rc = remote_stat(s->remote, path, a);
	*learned = mcfs_now_ns();
	if (definite(rc)) {
		if (m && cache_meta_put_attr(m, path, rc == 0 ? a : NULL, cache_meta_now()) < 0) {
			/* logged once by cache/meta */
		}
		return rc;
	}
	if (s->cfg.offline && have_old) {
		MCFS_DEBUG("offline: %s from the metadata cache (store: %s)", path, strerror(-rc));
		*a = old;
		return exists ? 0 : -ENOENT;
	}
	return rc;
}

int fs_persist_list(struct fs_session *s, const char *path, struct remote_dirent **ents, size_t *n,
		    uint64_t *learned)
{
	struct cache_meta *m = cache_get_meta(s->cache);
	struct remote_dirent *old = NULL;
	size_t nold = 0;
	int64_t fetched, age;
	int rc;

	if (m && cache_meta_get_list(m, path, &old, &nold, &fetched) == 0) {
		age = age_of(fetched);
		if (age >= 0 && (double)age < s->cfg.attr_ttl * 1e9) {
			*ents = old;
			*n = nold;
			*learned = mono_ago(age);
			return 0;
		}
	}
	rc = remote_list(s->remote, path, ents, n);
	*learned = mcfs_now_ns();
	if (rc == 0) {
		if (m && cache_meta_put_list(m, path, *ents, *n, cache_meta_now()) < 0) {
			/* logged once by cache/meta */
		}
		free(old);
		return 0;
	}
	if (s->cfg.offline && old && rc != -ENOENT && rc != -ENOTDIR) {
		MCFS_DEBUG("offline: listing of '%s' from the metadata cache (store: %s)", path,
			   strerror(-rc));
		*ents = old;
		*n = nold;
		return 0;
	}
	free(old);
	return rc;
}

void fs_persist_forget(struct fs_session *s, const char *path)
{
	struct cache_meta *m = cache_get_meta(s->cache);

	if (m && cache_meta_del_attr(m, path) < 0) {
		/* logged once by cache/meta */
	}
}
