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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One version handed to the kernel. All fields guarded by bk->lock. */
struct bfile {
	struct bfile *next;
	char *path;			 /* store path */
	char version[CACHE_VERSION_MAX]; /* the version it holds */
	uint64_t size;			 /* its size */
	unsigned pins;			 /* hand-outs not yet put back */
	bool doomed;			 /* evicted while pinned: dropped at the last put */
	/* A copy in memory (whole_mem.c), sealed: handed out instead of the
	 * version file while the entry lives, and closed at its last put. */
	bool mem;
	int memfd;
};

struct cache_backing {
	pthread_mutex_t lock;
	struct bfile *files; /* guarded by lock: versions pinned now */
	uint64_t mem_bytes;  /* guarded by lock: the copies' bytes, claimed */
	uint64_t mem_limit;  /* whole_mem: 0 = no copies */
	int mem_mnt;	     /* guarded by lock: the copies' tmpfs, -1 none, -2 not tried */
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
	if (e->mem) {
		close(e->memfd);
		bk->mem_bytes -= e->size;
	}
	free(e->path);
	free(e);
}

/* @f's copy in memory, if it has one: a new descriptor of it in *fd, pinned.
 * 0, -ENOENT (none) or -errno. */
static int mem_get(struct cache_backing *bk, const struct cache_file *f, int *fd)
{
	struct bfile *e;
	int rc = -ENOENT;

	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (e && e->mem) {
		*fd = fcntl(e->memfd, F_DUPFD_CLOEXEC, 0);
		rc = *fd < 0 ? -errno : 0;
		if (rc == 0)
			e->pins++;
	}
	pthread_mutex_unlock(&bk->lock);
	return rc;
}

int cache_backing_mem_mount(struct cache *c)
{
	struct cache_backing *bk = c->backing;
	int mnt;

	pthread_mutex_lock(&bk->lock);
	if (bk->mem_mnt == -2) {
		mnt = cache_whole_mem_mount(bk->mem_limit);
		if (mnt < 0)
			MCFS_INFO("whole_mem: no tmpfs of our own with huge pages (%s): copies "
				  "in memfds",
				  strerror(-mnt));
		bk->mem_mnt = mnt < 0 ? -1 : mnt;
	}
	mnt = bk->mem_mnt;
	pthread_mutex_unlock(&bk->lock);
	return mnt;
}

bool cache_backing_mem_claim(struct cache *c, uint64_t bytes)
{
	struct cache_backing *bk = c->backing;
	bool ok;

	if (!bk)
		return false;
	pthread_mutex_lock(&bk->lock);
	ok = bytes <= bk->mem_limit && bk->mem_bytes <= bk->mem_limit - bytes;
	if (ok)
		bk->mem_bytes += bytes;
	pthread_mutex_unlock(&bk->lock);
	return ok;
}

void cache_backing_mem_release(struct cache *c, uint64_t bytes)
{
	struct cache_backing *bk = c->backing;

	pthread_mutex_lock(&bk->lock);
	bk->mem_bytes -= bytes;
	pthread_mutex_unlock(&bk->lock);
}

int cache_backing_mem_add(struct cache *c, struct cache_file *f, int fd)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e = calloc(1, sizeof(*e));
	bool taken;

	if (e && !(e->path = strdup(f->path))) {
		free(e);
		e = NULL;
	}
	pthread_mutex_lock(&bk->lock);
	taken = find(bk, f) != NULL; /* handed out already (its version file) */
	if (e && !taken) {
		snprintf(e->version, sizeof(e->version), "%s", f->version);
		e->size = f->size;
		e->mem = true;
		e->memfd = fd;
		e->next = bk->files;
		bk->files = e;
	}
	pthread_mutex_unlock(&bk->lock);
	if (e && !taken)
		return 0;
	if (e)
		free(e->path);
	free(e);
	close(fd);
	cache_backing_mem_release(c, f->size);
	return e ? -EEXIST : -ENOMEM;
}

void cache_backing_mem_unused(struct cache *c, const struct cache_file *f)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e;

	if (!bk)
		return;
	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (e && e->mem && e->pins == 0)
		remove_entry(bk, e);
	pthread_mutex_unlock(&bk->lock);
}

int cache_backing_get(struct cache *c, struct cache_file *f, int *fd)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e, *n = NULL;
	int rc;

	if (!bk || !c->disk || f->size == 0)
		return -ENOENT;
	rc = mem_get(bk, f, fd); /* a copy in memory while there is one */
	if (rc != -ENOENT)
		return rc;
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
	if (e && e->mem) { /* a copy came meanwhile: that is what the kernel gets */
		pthread_mutex_unlock(&bk->lock);
		close(*fd);
		cache_disk_unpin_file(c->disk, f->path, f->version, f->size);
		return mem_get(bk, f, fd);
	}
	if (!e) {
		n = calloc(1, sizeof(*n));
		if (n && !(n->path = strdup(f->path))) {
			free(n);
			n = NULL;
		}
		if (n) {
			snprintf(n->version, sizeof(n->version), "%s", f->version);
			n->size = f->size;
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
		found = !e->mem; /* a copy pins nothing on disk */
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
	pthread_mutex_lock(&c->backing->lock);
	out->whole_mem_bytes = c->backing->mem_bytes;
	pthread_mutex_unlock(&c->backing->lock);
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
	bk->mem_limit = c->cfg->whole_mem;
	bk->mem_mnt = -2;
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
		if (e->mem)
			close(e->memfd);
		free(e->path);
		free(e);
	}
	if (bk->mem_mnt >= 0)
		close(bk->mem_mnt);
	pthread_mutex_destroy(&bk->lock);
	free(bk);
	c->backing = NULL;
}
