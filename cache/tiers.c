/*
 * tiers.c - the glue between the RAM tier (blocks.c) and the disk tier and
 * metadata store (disk.c, meta.c): set-up under cfg->cache_dir, the disk
 * read that fills a RAM slot, the write-behind of a block fresh from the
 * store, and the counters.
 *
 * Kept apart from blocks.c so that the RAM tier's logic reads without the
 * disk's, and so the hooks there are one line each.
 *
 * Set-up never fails a mount: a cache_dir that can't be created, is locked
 * by another daemon or has no room leaves the cache RAM-only, with a warning.
 * The flock on CACHE_DIR/lock is what keeps two daemons from sharing slots.
 */
#define _GNU_SOURCE
#include "cache_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write-behind queue: each job pins a RAM slot, so at most a quarter of them. */
#define WB_QUEUE_MAX 32

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *dir)
{
	char p[CFG_STR_MAX];
	char *s;

	snprintf(p, sizeof(p), "%s", dir);
	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST)
		return -errno;
	return access(p, R_OK | W_OK | X_OK) < 0 ? -errno : 0;
}

static int take_lock(struct cache *c, const char *dir)
{
	char p[CFG_STR_MAX + 16];

	snprintf(p, sizeof(p), "%s/lock", dir);
	c->lockfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lockfd < 0)
		return -errno;
	if (flock(c->lockfd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return 0;
}

void cache_tiers_open(struct cache *c)
{
	const char *dir = c->cfg->cache_dir;
	char p[CFG_STR_MAX + 16];
	uint64_t limit = 0;
	unsigned qmax;
	int rc;

	c->lockfd = -1;
	if (!dir[0])
		return;
	rc = make_dirs(dir);
	if (rc == 0)
		rc = take_lock(c, dir);
	if (rc < 0) {
		MCFS_WARN("cache_dir %s: %s; running without a disk tier (RAM only)", dir,
			  rc == -EBUSY ? "in use by another mcfs daemon" : strerror(-rc));
		return;
	}
	snprintf(p, sizeof(p), "%s/meta", dir);
	if (cache_meta_open(p, &c->meta) < 0) {
		MCFS_WARN("cache_dir %s: no metadata store; running RAM only", dir);
		return;
	}
	rc = cache_disk_limit(dir, c->cfg->disk_cache, &limit);
	qmax = (unsigned)MCFS_MAX(1, MCFS_MIN(WB_QUEUE_MAX, c->nslots / 4));
	if (rc == 0)
		rc =
		    cache_disk_open(dir, limit, c->bs, c->meta, qmax, cache_disk_done, c, &c->disk);
	if (rc < 0)
		MCFS_WARN("cache_dir %s: no disk tier (disk_cache=%s: %llu bytes): %s; "
			  "metadata is still kept there",
			  dir, c->cfg->disk_cache, (unsigned long long)limit, strerror(-rc));
}

void cache_tiers_close(struct cache *c)
{
	cache_disk_close(c->disk); /* drains write-behind: calls cache_disk_done() */
	c->disk = NULL;
	cache_meta_close(c->meta);
	c->meta = NULL;
	if (c->lockfd >= 0)
		close(c->lockfd);
	c->lockfd = -1;
}

struct cache_meta *cache_get_meta(struct cache *c)
{
	return c->meta;
}

static uint32_t whole_len(const struct cache *c, const struct cache_block *b)
{
	return (uint32_t)MCFS_MIN(c->bs, b->file->size - (b->index << c->bs_shift));
}

bool cache_tier_fill(struct cache *c, struct cache_block *b, uint32_t *len)
{
	struct cache_meta_key key;
	uint32_t n;

	if (!c->disk)
		return false;
	cache_meta_block_key(b->file->path, b->file->version, b->index, &key);
	/* A miss, a bad checksum (dropped there, logged) or a length that is not
	 * this version's all go to the store. */
	if (cache_disk_read(c->disk, &key, b->data, c->bs, &n) < 0 || n != whole_len(c, b))
		return false;
	*len = n;
	return true;
}

bool cache_tier_wants(const struct cache *c, const struct cache_block *b)
{
	return c->disk && cache_block_full(b);
}

void cache_tier_behind(struct cache *c, struct cache_block *b)
{
	struct cache_meta_key key;

	cache_meta_block_key(b->file->path, b->file->version, b->index, &key);
	if (cache_disk_write(c->disk, &key, b->data, b->len, b) != 0)
		cache_block_put(c, b); /* not queued: no callback will come */
}

void cache_disk_done(void *ctx, void *arg)
{
	cache_block_put(ctx, arg);
}

uint64_t cache_tier_file_bytes(struct cache *c, struct cache_file *f, const bool *in_ram)
{
	struct cache_meta_key key;
	uint64_t i, bytes = 0;

	for (i = 0; c->disk && in_ram && i < f->nblocks; i++) {
		if (in_ram[i])
			continue;
		cache_meta_block_key(f->path, f->version, i, &key);
		bytes += cache_disk_held(c->disk, &key);
	}
	return bytes;
}

void cache_tier_stats(struct cache *c, struct cache_stats *out)
{
	struct cache_disk_stats ds;

	if (!c->disk)
		return;
	cache_disk_get_stats(c->disk, &ds);
	out->disk_state = ds.full ? 2 : 1;
	out->disk_slots = ds.slots;
	out->disk_slots_used = ds.slots_used;
	out->disk_bytes_limit = ds.bytes_limit;
	out->disk_bytes_used = ds.bytes_used;
	out->disk_hits = ds.hits;
	out->disk_misses = ds.misses;
	out->disk_read_bytes = ds.read_bytes;
	out->disk_writes = ds.writes;
	out->disk_written_bytes = ds.written_bytes;
	out->disk_write_drops = ds.write_drops;
	out->disk_csum_errors = ds.csum_errors;
	out->disk_io_errors = ds.io_errors;
	out->disk_evictions = ds.evictions;
	out->disk_queued = ds.queued;
}
