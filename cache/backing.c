/*
 * backing.c - backing files for FUSE passthrough: one plain file per
 * complete file version, STORE_DIR/files/<xxh128(path)><xxh64(version)>,
 * holding the version's bytes at their own offsets.
 *
 * Why a copy beside the slot file rather than the slot file itself: the
 * kernel reads a backing file at the file's offsets, and the disk tier keeps
 * blocks in slots of one file in any order. A relayout of the disk tier (one
 * sparse file per version) would hold each byte once; this variant keeps the
 * disk tier as it is and pays a second copy on disk of each complete file
 * that is opened, bounded by disk_cache (docs/architecture.md, Passthrough).
 *
 * Rules that make the kernel's direct reads safe:
 *  - Built only from a version the tiers hold whole (cache_file_cached_bytes
 *    == size), block by block through cache_block_get(), which hands out
 *    only verified bytes (the disk tier's XXH3, or the store's answer for
 *    this version: -ESTALE if it changed). A version is never written into
 *    a file named after another version, so files never mix versions.
 *  - Written under a temporary name and renamed when every byte is there:
 *    a file that exists under its final name is complete. No hole, ever.
 *  - Removed at start-up, all of them: they are not checksummed on disk, so
 *    a file from before a crash is not trusted; it is rebuilt from the
 *    verified tiers at its next open.
 *  - A file handed out (pinned) is never evicted; an evicted file is
 *    unlinked, and a kernel reference still open on it keeps its inode.
 *  - A build that fails is logged and counted once: the version keeps a
 *    FAILED entry (no bytes), so its later opens read through the cache at
 *    once, without another copy that would fail the same way, until `mcfs
 *    evict` of the path, a new version of it, or a restart. At most
 *    BACKING_FAILED_MAX versions are remembered, the oldest forgotten first.
 *
 * Lock: bk->lock (leaf) guards the list, the entries and the counters; it is
 * never held across I/O or a call into the rest of the cache. The built
 * condition (bk->lock) wakes opens that wait for a build in flight.
 */
#define _GNU_SOURCE
#include "cache_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum bstate {
	B_BUILDING, /* being written under its temporary name */
	B_READY,    /* complete under its final name */
	B_FAILED,   /* its build failed (err): no file, no bytes counted */
};

/* Failed versions remembered: each logs once; about 300 bytes each. */
#define BACKING_FAILED_MAX 1024

/* One version's backing file. All fields guarded by bk->lock. */
struct bfile {
	struct bfile *next;
	char *path;			 /* store path */
	char version[CACHE_VERSION_MAX]; /* the version it holds */
	char name[72];			 /* file name under files/ */
	uint64_t size;			 /* bytes; counted in bk->used */
	uint64_t last_use;		 /* mcfs_now_ns() of the last hand-out */
	unsigned pins;			 /* hand-outs not yet put back */
	int err;			 /* B_FAILED: the build's negative errno */
	bool doomed;			 /* evicted while pinned: unlink at the last put */
	enum bstate state;
};

struct cache_backing {
	pthread_mutex_t lock;
	pthread_cond_t built; /* a build ended (ready or failed) */
	char dir[CFG_STR_MAX + 160];
	uint64_t limit;	       /* bytes all backing files may hold */
	uint64_t used;	       /* guarded by lock: bytes of entries (building and ready) */
	struct bfile *files;   /* guarded by lock */
	uint64_t builds;       /* guarded by lock: files built */
	uint64_t build_errors; /* guarded by lock: builds that failed */
	unsigned nfailed;      /* guarded by lock: B_FAILED entries */
	uint64_t nready;       /* guarded by lock: READY entries */
	uint64_t ready_bytes;
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

static void unlink_name(struct cache_backing *bk, const char *name)
{
	char p[sizeof(bk->dir) + 80];

	snprintf(p, sizeof(p), "%s/%s", bk->dir, name);
	if (unlink(p) < 0 && errno != ENOENT)
		MCFS_WARN("backing file %s: unlink: %s", p, strerror(errno));
}

/* Takes @e off the list and frees it; the caller unlinks its file. Lock held. */
static void remove_entry(struct cache_backing *bk, struct bfile *e)
{
	struct bfile **pp = &bk->files;

	MCFS_ASSERT_HELD(&bk->lock);
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	bk->used -= e->size;
	if (e->state == B_FAILED)
		bk->nfailed--;
	if (e->state == B_READY) {
		bk->nready--;
		bk->ready_bytes -= e->size;
	}
}

/*
 * Makes room for @need bytes: drops unpinned ready files, those of @path's
 * other versions first (superseded), then the least recently used while
 * over the limit, as many as that takes (or all there are). Returns the
 * entries dropped, linked through next, for the caller to unlink with
 * free_entries(). Lock held.
 */
static struct bfile *make_room(struct cache_backing *bk, const char *path, uint64_t need)
{
	struct bfile *e, *victim, *gone = NULL;

	MCFS_ASSERT_HELD(&bk->lock);
	for (;;) {
		victim = NULL;
		for (e = bk->files; e; e = e->next) {
			if (e->state == B_BUILDING || e->pins)
				continue;
			if (strcmp(e->path, path) == 0) {
				victim = e;
				break;
			}
			if (e->state == B_READY && bk->used + need > bk->limit &&
			    (!victim || e->last_use < victim->last_use))
				victim = e;
		}
		if (!victim)
			break;
		remove_entry(bk, victim);
		victim->next = gone;
		gone = victim;
	}
	return gone;
}

/* Unlinks and frees entries taken off the list, linked through next. No lock held. */
static void free_entries(struct cache_backing *bk, struct bfile *gone)
{
	struct bfile *next;

	for (; gone; gone = next) {
		next = gone->next;
		if (gone->state != B_FAILED)
			unlink_name(bk, gone->name);
		free(gone->path);
		free(gone);
	}
}

/* Writes every block of @f into @fd at its offset. No lock held. */
static int write_blocks(struct cache *c, struct cache_file *f, int fd)
{
	struct cache_block *b;
	uint64_t i, off;
	size_t done;
	ssize_t n;
	int rc = 0;

	for (i = 0; rc == 0 && i < f->nblocks; i++) {
		rc = cache_block_get(c, f, i, &b);
		if (rc < 0)
			break;
		off = i << c->bs_shift;
		for (done = 0; rc == 0 && done < b->len; done += (size_t)n) {
			n = pwrite(fd, b->data + done, b->len - done, (off_t)(off + done));
			if (n < 0 && errno != EINTR)
				rc = -errno;
			else if (n < 0)
				n = 0;
		}
		cache_block_put(c, b);
	}
	return rc;
}

/* Builds @e's file from the tiers. No lock held. Returns 0 or a negative errno. */
static int build(struct cache *c, struct cache_backing *bk, struct cache_file *f,
		 const struct bfile *e)
{
	char tmp[sizeof(bk->dir) + 80], fin[sizeof(bk->dir) + 80];
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", bk->dir, e->name);
	snprintf(fin, sizeof(fin), "%s/%s", bk->dir, e->name);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Room first, so that a full filesystem fails here, not half way. */
	rc = fallocate(fd, 0, 0, (off_t)f->size) < 0 && errno != EOPNOTSUPP ? -errno : 0;
	if (rc == 0)
		rc = write_blocks(c, f, fd);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, fin) < 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}

/*
 * Turns @e, whose build failed with @rc, into a FAILED entry, and forgets the
 * oldest failure when more than BACKING_FAILED_MAX are remembered. Returns
 * the entry forgotten (for free_entries()), or NULL. Lock held.
 */
static struct bfile *failed(struct cache_backing *bk, struct bfile *e, int rc)
{
	struct bfile *old = NULL, *x;

	MCFS_ASSERT_HELD(&bk->lock);
	bk->used -= e->size;
	e->size = 0;
	e->state = B_FAILED;
	e->err = rc;
	e->pins = 0;
	e->last_use = mcfs_now_ns();
	bk->build_errors++;
	if (++bk->nfailed <= BACKING_FAILED_MAX)
		return NULL;
	for (x = bk->files; x; x = x->next)
		if (x->state == B_FAILED && (!old || x->last_use < old->last_use))
			old = x;
	remove_entry(bk, old);
	old->next = NULL;
	return old;
}

/* Opens @e's file read-only into *fd. No lock held. */
static int open_ready(struct cache_backing *bk, const char *name, int *fd)
{
	char p[sizeof(bk->dir) + 80];

	snprintf(p, sizeof(p), "%s/%s", bk->dir, name);
	*fd = open(p, O_RDONLY | O_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

/* An entry being built for @f, if room can be made; NULL with *rc set if not. Lock held. */
static struct bfile *new_entry(struct cache *c, struct cache_backing *bk, struct cache_file *f,
			       struct bfile **gone, int *rc)
{
	struct cache_meta_key k;
	struct bfile *e;
	int i;

	MCFS_ASSERT_HELD(&bk->lock);
	*gone = make_room(bk, f->path, f->size);
	if (bk->used + f->size > bk->limit) {
		*rc = -ENOSPC; /* the rest is pinned, or the file is larger than the limit */
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e || !(e->path = strdup(f->path))) {
		free(e);
		*rc = -ENOMEM;
		return NULL;
	}
	(void)c;
	snprintf(e->version, sizeof(e->version), "%s", f->version);
	/* The block key's path and version hashes: 24 bytes, 48 hex digits. */
	cache_meta_block_key(f->path, f->version, 0, &k);
	for (i = 0; i < 24; i++)
		snprintf(e->name + 2 * i, 3, "%02x", k.b[i]);
	e->size = f->size;
	e->state = B_BUILDING;
	e->pins = 1; /* the builder's, handed to the caller when ready */
	e->next = bk->files;
	bk->files = e;
	bk->used += e->size;
	return e;
}

int cache_backing_get(struct cache *c, struct cache_file *f, int *fd)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e, *gone = NULL, *forgot = NULL;
	char name[sizeof(e->name)];
	int rc = 0;

	if (!bk || f->size == 0)
		return -ENOENT;
	pthread_mutex_lock(&bk->lock);
	/* Sleeps on bk->built (bk->lock) while another open builds this version. */
	while ((e = find(bk, f)) != NULL && e->state == B_BUILDING)
		pthread_cond_wait(&bk->built, &bk->lock);
	if (e && e->state == B_FAILED) { /* logged when it failed */
		rc = e->err;
		pthread_mutex_unlock(&bk->lock);
		return rc;
	}
	if (e) { /* doomed too: unlinked at its last put, but whole until then */
		e->pins++;
		e->last_use = mcfs_now_ns();
		snprintf(name, sizeof(name), "%s", e->name);
		pthread_mutex_unlock(&bk->lock);
		rc = open_ready(bk, name, fd);
		if (rc < 0)
			cache_backing_put(c, f);
		return rc;
	}
	pthread_mutex_unlock(&bk->lock);

	/* Only a version the tiers hold whole: never a fetch from the store at open. */
	if (!cache_file_complete(c, f))
		return -ENOENT;
	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (e) { /* another open started it, or failed it, meanwhile: take its result */
		pthread_mutex_unlock(&bk->lock);
		return cache_backing_get(c, f, fd);
	}
	e = new_entry(c, bk, f, &gone, &rc);
	pthread_mutex_unlock(&bk->lock);
	free_entries(bk, gone);
	if (!e)
		return rc;

	rc = build(c, bk, f, e);
	pthread_mutex_lock(&bk->lock);
	if (rc == 0) {
		e->state = B_READY;
		e->last_use = mcfs_now_ns();
		bk->builds++;
		bk->nready++;
		bk->ready_bytes += e->size;
		snprintf(name, sizeof(name), "%s", e->name);
	} else {
		forgot = failed(bk, e, rc);
	}
	pthread_cond_broadcast(&bk->built);
	pthread_mutex_unlock(&bk->lock);
	if (rc < 0) {
		MCFS_WARN("backing file for %s (%s): %s; its opens read through the cache (not "
			  "built again for this version until `mcfs evict` of the path)",
			  f->path, f->version, strerror(-rc));
		free_entries(bk, forgot);
		return rc;
	}
	/* The page cache of the backing file holds the bytes now (buffered
	 * writes): the RAM tier's copies of this version are a second one. */
	cache_ram_drop_file(c, f);
	rc = open_ready(bk, name, fd);
	if (rc < 0)
		cache_backing_put(c, f);
	return rc;
}

bool cache_backing_enabled(const struct cache *c)
{
	return c->backing != NULL;
}

void cache_backing_put(struct cache *c, struct cache_file *f)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e;
	bool drop = false;

	if (!bk)
		return;
	pthread_mutex_lock(&bk->lock);
	e = find(bk, f);
	if (e && e->pins > 0 && --e->pins == 0 && e->doomed) {
		remove_entry(bk, e);
		e->next = NULL;
		drop = true;
	}
	pthread_mutex_unlock(&bk->lock);
	if (drop)
		free_entries(bk, e);
}

uint64_t cache_backing_evict_path(struct cache *c, const char *path)
{
	struct cache_backing *bk = c->backing;
	struct bfile *e, *next, *gone = NULL;
	uint64_t bytes = 0;

	if (!bk)
		return 0;
	pthread_mutex_lock(&bk->lock);
	for (e = bk->files; e; e = next) {
		next = e->next;
		if (strcmp(e->path, path) != 0 || e->state == B_BUILDING)
			continue;
		bytes += e->size; /* 0 for a failure forgotten: the next open builds again */
		if (e->pins) {
			e->doomed = true; /* unlinked at the last put */
			continue;
		}
		remove_entry(bk, e);
		e->next = gone;
		gone = e;
	}
	pthread_mutex_unlock(&bk->lock);
	free_entries(bk, gone);
	return bytes;
}

void cache_backing_stats(struct cache *c, struct cache_stats *out)
{
	struct cache_backing *bk = c->backing;

	if (!bk)
		return;
	pthread_mutex_lock(&bk->lock);
	out->backing_files = bk->nready;
	out->backing_bytes = bk->ready_bytes;
	out->backing_builds = bk->builds;
	out->backing_build_errors = bk->build_errors;
	pthread_mutex_unlock(&bk->lock);
}

/* Removes every file in @dir (a crash's leftovers, or the last run's). */
static void empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		MCFS_INFO("backing files in %s: removed %u from before (rebuilt from the verified "
			  "tiers at their next open)",
			  dir, n);
}

int cache_backing_open(struct cache *c, const char *store_dir, uint64_t limit)
{
	struct cache_backing *bk = calloc(1, sizeof(*bk));

	if (!bk)
		return -ENOMEM;
	snprintf(bk->dir, sizeof(bk->dir), "%s/files", store_dir);
	if (mkdir(bk->dir, 0700) < 0 && errno != EEXIST) {
		int rc = -errno;

		free(bk);
		return rc;
	}
	empty_dir(bk->dir);
	pthread_mutex_init(&bk->lock, NULL);
	pthread_cond_init(&bk->built, NULL);
	bk->limit = limit;
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
	pthread_cond_destroy(&bk->built);
	free(bk);
	c->backing = NULL;
}
