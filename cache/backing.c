/*
 * backing.c - backing files for FUSE passthrough: a complete file version's
 * own file in the disk tier (cache/disk.h, one sparse file per version, each
 * block at its own offset), handed to the kernel as it is.
 *
 * There is no copy: the disk tier already holds a version held whole at the
 * file's offsets, so the backing file is that file, opened read-only. It
 * holds each byte once on disk, inside disk_cache, and no open waits on a
 * copy (docs/architecture.md, Passthrough).
 *
 * Rules that make the kernel's direct reads safe:
 *  - Only a version whose every block the disk tier holds whole; if some
 *    are still in RAM only, the open waits for the write-behind queue (short:
 *    it pushes back on fetches), and reads through the cache if that did not
 *    put them on disk (full, or dropped).
 *  - Verified before the first hand-out in this mount: cache_disk_pin_file()
 *    reads every block and checks its XXH3 against the index (and again
 *    after any of its blocks changed), unless this mount wrote every block
 *    of it (each hashed as it was written). A block that fails is dropped and
 *    fetched again by the next read through the cache; that version gets no
 *    passthrough until it is whole and verified.
 *  - A version handed out is pinned in the disk tier: none of its blocks is
 *    evicted (punched) while the kernel may read it. `mcfs evict` of a path
 *    with a pinned version drops it at the last put; so does a newer
 *    version's hand-out (the store changed: the old one is superseded; the
 *    disk tier marks it, cache_disk_unpin_file()).
 *  - A version is never written into a file named after another version, so
 *    a file never mixes versions.
 *
 * Lock: bk->lock (leaf) guards the list, the entries and the counters; it is
 * never held across I/O or a call into the rest of the cache.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_disk.h"
#include "cache_ram.h"
#include "cache_stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One version handed to the kernel. All fields guarded by bk->lock. */
struct bfile {
	struct bfile *next;
	char *path;			 /* store path */
	char version[CACHE_VERSION_MAX]; /* the version it holds */
	unsigned pins;			 /* hand-outs not yet put back */
	bool doomed;			 /* evicted while pinned: dropped at the last put */
};

struct cache_backing {
	pthread_mutex_t lock;
	struct bfile *files; /* guarded by lock: versions pinned now */
};

static struct bfile *find(struct cache_backing *bk, const struct cache_file *f)
{
	struct bfile *e;

	MCFS_ASSERT_HELD(&bk->lock);
	for (e = bk->files; e; e = e->next)
		if (strcmp(e->path, f->path) == 0 && strcmp(e->version, f->version) == 0)
			return e;
	return NULL;
}

/* Takes @e off the list and frees it. Lock held. */
static void remove_entry(struct cache_backing *bk, struct bfile *e)
{
	struct bfile **pp = &bk->files;

	MCFS_ASSERT_HELD(&bk->lock);
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	free(e->path);
	free(e);
}

int cache_backing_get(struct cache *c, struct cache_file *f, int *fd)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e, *n = NULL;
	int rc;

	if (!bk || !c->disk || f->size == 0)
		return -ENOENT;
	/* Only a version the disk tier holds whole: never a fetch at open. */
	rc = cache_disk_pin_file(c->disk, f->path, f->version, f->size, fd);
	if (rc == -ENOENT && cache_file_complete(c, f)) {
		/* Whole in the tiers, some blocks still on their way to disk:
		 * the queue is short, and this file's owed blocks (tiers.c) are
		 * at most the RAM tier's share of it: wait for them rather than
		 * read this open through the cache. */
		cache_tier_pay_owed(c, f);
		cache_disk_flush(c->disk);
		rc = cache_disk_pin_file(c->disk, f->path, f->version, f->size, fd);
	}
	if (rc < 0)
		return rc; /* logged there, but for -ENOENT (not whole) */
	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (!e) {
		n = calloc(1, sizeof(*n));
		if (n && !(n->path = strdup(f->path))) {
			free(n);
			n = NULL;
		}
		if (n) {
			snprintf(n->version, sizeof(n->version), "%s", f->version);
			n->next = bk->files;
			bk->files = e = n;
		}
	}
	if (e)
		e->pins++;
	pthread_mutex_unlock(&bk->lock);
	if (!e) {
		close(*fd);
		*fd = -1;
		cache_disk_unpin_file(c->disk, f->path, f->version, f->size);
		return -ENOMEM;
	}
	/* The page cache of the version file holds the bytes (verified through
	 * it, or read by the kernel): the RAM tier's copies are a second one. */
	cache_ram_drop_file(c, f);
	return 0;
}

bool cache_backing_enabled(const struct cache *c)
{
	return c->backing != NULL;
}

void cache_backing_put(struct cache *c, struct cache_file *f)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e;
	bool drop = false, found = false;

	if (!bk)
		return;
	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (e && e->pins > 0) {
		found = true;
		if (--e->pins == 0) {
			drop = e->doomed;
			remove_entry(bk, e);
		}
	}
	pthread_mutex_unlock(&bk->lock);
	if (found)
		cache_disk_unpin_file(c->disk, f->path, f->version, f->size);
	if (drop)
		(void)cache_disk_evict_path(c->disk, f->path);
}

unsigned cache_backing_evict_path(struct cache *c, const char *path)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e;
	unsigned held = 0;

	if (!bk)
		return 0;
	pthread_mutex_lock(&bk->lock);
	for (e = bk->files; e; e = e->next)
		if (strcmp(e->path, path) == 0) {
			e->doomed = true; /* its blocks go at the last put */
			held++;
		}
	pthread_mutex_unlock(&bk->lock);
	return held;
}

void cache_backing_stats(struct cache *c, struct cache_stats *out)
{
	struct cache_disk_verified v;

	if (!c->backing || !c->disk)
		return;
	cache_disk_verify_stats(c->disk, &v);
	out->backing_files = v.files;
	out->backing_bytes = v.bytes;
	out->backing_builds = v.verifies;
	out->backing_build_errors = v.errors;
}

int cache_backing_open(struct cache *c)
{
	struct cache_backing *bk = calloc(1, sizeof(*bk));

	if (!bk)
		return -ENOMEM;
	pthread_mutex_init(&bk->lock, NULL);
	c->backing = bk;
	return 0;
}

void cache_backing_close(struct cache *c)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e, *next;

	if (!bk)
		return;
	for (e = bk->files; e; e = next) {
		next = e->next;
		free(e->path);
		free(e);
	}
	pthread_mutex_destroy(&bk->lock);
	free(bk);
	c->backing = NULL;
}
