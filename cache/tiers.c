/*
 * tiers.c - the glue between the RAM tier (blocks.c) and the disk tier and
 * metadata store (disk.c, meta.c): set-up under cfg->cache_dir, the disk
 * read that fills a RAM slot, the write-behind of a block fresh from the
 * store, and the counters.
 *
 * Kept apart from blocks.c so that the RAM tier's logic reads without the
 * disk's, and so the hooks there are one line each.
 *
 * The shared tier (shared.c, -o shared_cache) sits after the disk: a whole
 * block the disk lacks is asked there before the store, and a block that
 * came from the store is written behind to both (a block from the shared
 * tier to the disk only). Each write holds its own reference of the block.
 *
 * Each store gets its own directory under cache_dir, named after the store
 * (cache_store_dir_name()): LMDB keys and block keys are paths inside the store,
 * so two stores sharing one directory would serve each other's attributes,
 * listings and blocks. Remounting the same store finds its directory again.
 *
 * Set-up never fails a mount: a cache_dir that can't be created, is locked
 * by another daemon or has no room leaves the cache RAM-only, with a warning.
 * The flock on STORE_DIR/lock is what keeps two daemons of one store from
 * sharing slots.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_disk.h"
#include "cache_stats.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* Longest readable part of a store's directory name; the hash tells stores apart. */
#define SLUG_MAX 48
/* CACHE_DIR/KIND-SLUG-HASH: room for cache_dir and the name */
#define STORE_DIR_MAX (CFG_STR_MAX + 128)

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
	char p[STORE_DIR_MAX + 16];

	snprintf(p, sizeof(p), "%s/lock", dir);
	c->lockfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lockfd < 0)
		return -errno;
	if (flock(c->lockfd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return 0;
}

/* Copies s without its trailing '/'s (a lone "/" stays) into out (CFG_STR_MAX). */
static void trim_slashes(const char *s, char *out)
{
	size_t n = strlen(s);

	while (n > 1 && s[n - 1] == '/')
		n--;
	snprintf(out, CFG_STR_MAX, "%.*s", (int)n, s);
}

int cache_store_dir_name(const struct cfg *cfg, const char *kind, char *out, size_t outlen)
{
	char src[CFG_STR_MAX], ep[CFG_STR_MAX], slug[SLUG_MAX + 1];
	char id[sizeof(src) + sizeof(ep) + sizeof(cfg->region) + 2];
	const char *s = cfg->source_shown, *sep; /* credentials are no part of a store's identity */
	size_t n = 0;
	int len;

	if (strncmp(s, "file://", 7) == 0)
		s += 7;
	trim_slashes(s, src);
	/* The identity: the source, and for S3 the service too (bucket names repeat). */
	if (strncmp(src, "s3://", 5) == 0) {
		trim_slashes(cfg->endpoint, ep);
		snprintf(id, sizeof(id), "%s\n%s\n%s", src, ep, cfg->region);
	} else {
		snprintf(id, sizeof(id), "%s", src);
	}
	/* The readable part: no scheme (the kind says it), no leading '/', and of a
	 * long source its end, which tells models apart better than its start. */
	sep = strstr(src, "://");
	s = sep ? sep + 3 : src;
	while (*s == '/')
		s++;
	if (strlen(s) > SLUG_MAX)
		s += strlen(s) - SLUG_MAX;
	for (; *s; s++, n++) {
		bool keep = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			    (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' || *s == '_';

		slug[n] = keep ? *s : '_';
	}
	slug[n] = '\0';
	len = snprintf(out, outlen, "%s-%s-%016llx", kind, n ? slug : "root",
		       (unsigned long long)XXH3_64bits(id, strlen(id)));
	return len < 0 || (size_t)len >= outlen ? -ENAMETOOLONG : 0;
}

/*
 * mcfs before per-store directories kept one store's tier in CACHE_DIR itself:
 * it is not used any more (whose store it held is unknown), so say so once.
 */
static void note_old_layout(const char *dir)
{
	char p[CFG_STR_MAX + 16];
	struct stat st;

	snprintf(p, sizeof(p), "%s/blocks", dir);
	if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
		MCFS_WARN("cache_dir %s: blocks/ and meta/ there are an older mcfs's disk tier, "
			  "not used any more (each store now has its own subdirectory); remove "
			  "them to free the space",
			  dir);
}

/* CACHE_DIR/NAME for this store, made (0700) with CACHE_DIR if need be. */
static int make_store_dir(struct cache *c, char *out, size_t outlen)
{
	const char *dir = c->cfg->cache_dir;
	char name[128];
	int rc, len;

	rc = cache_store_dir_name(c->cfg, remote_kind(c->remote), name, sizeof(name));
	if (rc < 0)
		return rc;
	len = snprintf(out, outlen, "%s/%s", dir, name);
	if (len < 0 || (size_t)len >= outlen)
		return -ENAMETOOLONG;
	rc = make_dirs(dir);
	if (rc == 0 && mkdir(out, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (rc == 0 && access(out, R_OK | W_OK | X_OK) < 0)
		rc = -errno;
	return rc;
}

/* Leaves the cache without a disk tier, remembering why for the stats. */
static void set_off(struct cache *c, enum cache_disk_off reason, int rc)
{
	c->disk_off = reason;
	c->disk_off_errno = -rc;
}

/*
 * The metadata store's map for a disk tier of @limit bytes: meta_map_size, or
 * more if the tier's block index could take over a quarter of it. The index
 * is never dropped for room (meta.h), so it must fit with the attributes and
 * listings beside it. An entry is 66 bytes in a leaf page; pages at least half
 * full and a commit that rewrites every entry (the use times) make that 264
 * bytes at worst: 1 KiB per block leaves the index a quarter of the map.
 */
static uint64_t meta_map_size(const struct cache *c, uint64_t limit)
{
	uint64_t need = (limit / c->bs) * 1024;

	if (need <= c->cfg->meta_map_size)
		return c->cfg->meta_map_size;
	MCFS_INFO("cache metadata: a map of %llu MiB for the index of %llu disk blocks "
		  "(meta_map_size is %llu MiB)",
		  (unsigned long long)(need >> 20), (unsigned long long)(limit / c->bs),
		  (unsigned long long)(c->cfg->meta_map_size >> 20));
	return need;
}

/* disk_writers, or half the CPUs, 2 to 8. */
static unsigned disk_writers(const struct cfg *cfg)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (cfg->disk_writers)
		return cfg->disk_writers;
	return (unsigned)MCFS_MAX(2, MCFS_MIN(8, n / 2));
}

void cache_tiers_open(struct cache *c)
{
	char dir[STORE_DIR_MAX], p[STORE_DIR_MAX + 16];
	uint64_t limit = 0;
	unsigned qmax;
	int rc, lrc;

	c->lockfd = -1;
	if (!c->cfg->cache_dir[0]) {
		set_off(c, CACHE_DISK_OFF_NO_DIR, 0);
		return;
	}
	rc = make_store_dir(c, dir, sizeof(dir));
	if (rc < 0) {
		set_off(c, CACHE_DISK_OFF_DIR, rc);
		MCFS_WARN("cache_dir %s: %s; running without a disk tier (RAM only; set cache_dir "
			  "to a writable directory, or cache_dir= to not use one)",
			  c->cfg->cache_dir, strerror(-rc));
		return;
	}
	note_old_layout(c->cfg->cache_dir);
	rc = take_lock(c, dir);
	if (rc < 0) {
		if (rc == -EBUSY)
			set_off(c, CACHE_DISK_OFF_LOCKED, 0);
		else
			set_off(c, CACHE_DISK_OFF_DIR, rc);
		MCFS_WARN("cache_dir %s: %s; running without a disk tier (RAM only)", dir,
			  rc == -EBUSY ? "in use by another mcfs daemon of this store"
				       : strerror(-rc));
		return;
	}
	snprintf(p, sizeof(p), "%s/meta", dir);
	lrc = cache_disk_limit(dir, c->cfg->disk_cache, &limit);
	rc = cache_meta_open(p, meta_map_size(c, lrc == 0 ? limit : 0), &c->meta);
	if (rc < 0) {
		set_off(c, CACHE_DISK_OFF_META, rc);
		MCFS_WARN("cache_dir %s: no metadata store; running RAM only", dir);
		return;
	}
	rc = lrc;
	qmax = (unsigned)MCFS_MAX(1, MCFS_MIN(WB_QUEUE_MAX, c->nslots / 4));
	if (rc == 0)
		rc = cache_disk_open(dir, limit, c->bs, c->meta, qmax, c->cfg->disk_direct,
				     disk_writers(c->cfg), cache_disk_done, c, &c->disk);
	/* A complete version's file in the disk tier is its backing file
	 * (docs/architecture.md, Passthrough). Without a disk tier, no passthrough. */
	if (rc == 0 && cache_backing_open(c) < 0)
		MCFS_WARN("cache_dir %s: out of memory for passthrough: no FUSE passthrough", dir);
	if (rc == 0 && cache_whole_open(c) < 0)
		MCFS_WARN("cache_dir %s: out of memory: cold_whole off", dir);
	if (rc < 0) {
		set_off(c, CACHE_DISK_OFF_DISK, rc);
		MCFS_WARN("cache_dir %s: no disk tier (disk_cache=%s: %llu bytes): %s; "
			  "metadata is still kept there",
			  dir, c->cfg->disk_cache, (unsigned long long)limit, strerror(-rc));
	}
}

void cache_tiers_close(struct cache *c)
{
#ifdef MCFS_HAVE_NET
	cache_shared_close(c->shared); /* writes (or drops) its queue: calls cache_disk_done() */
#endif
	c->shared = NULL;
	cache_whole_close(c);
	cache_backing_close(c);
	cache_tier_pay_owed(c, NULL); /* every block still owed reaches the disk */
	cache_disk_close(c->disk);    /* drains write-behind: calls cache_disk_done() */
	c->disk = NULL;
	cache_meta_close(c->meta);
	c->meta = NULL;
	if (c->lockfd >= 0)
		close(c->lockfd);
	c->lockfd = -1;
}

#ifdef MCFS_HAVE_NET
/* The shared tier hands back a job it parked (shared.h: wake). */
static void shared_wake(void *ctx, void *park, int resume, uint64_t wait_until)
{
	cache_block_resume(ctx, park, resume, wait_until);
}
#endif

int cache_tier_shared_open(struct cache *c)
{
	char store[128];
	unsigned qmax;
	int rc;

	if (!c->cfg->shared_cache[0])
		return 0;
#ifdef MCFS_HAVE_NET
	rc = cache_store_dir_name(c->cfg, remote_kind(c->remote), store, sizeof(store));
	if (rc < 0) {
		MCFS_ERR("shared_cache: the store's name is too long to name its blocks");
		return rc;
	}
	/* Each queued write pins a RAM slot: at most a quarter of them, as the disk's. */
	qmax = (unsigned)MCFS_MAX(1, MCFS_MIN(c->cfg->shared_queue, c->nslots / 4));
	return cache_shared_open(c->cfg, store, c->bs, qmax, cache_disk_done, shared_wake, c,
				 &c->shared);
#else
	(void)store;
	(void)qmax;
	(void)rc;
	MCFS_ERR("shared_cache %s: this mcfs is built without the network stores (MCFS_NO_NET)",
		 c->cfg->shared_cache);
	return -EPROTONOSUPPORT;
#endif
}

void cache_tier_shared_stop(struct cache *c)
{
#ifdef MCFS_HAVE_NET
	cache_shared_stop(c->shared);
#else
	(void)c;
#endif
}

/* What the shared tier calls block b. */
static void describe(const struct cache *c, const struct cache_block *b,
		     struct cache_shared_block *out)
{
	out->path = b->file->path;
	out->version = b->file->version;
	out->size = b->file->size;
	out->index = b->index;
	out->len = cache_file_block_len(c, b->file, b->index);
}

/* Asks the shared tier for b's whole block; sets b->fill. A wait for
 * another node parks the job (the fetch thread goes on with others). */
static enum cache_tier_got shared_fill(struct cache *c, struct cache_block *b, uint32_t *len)
{
#ifdef MCFS_HAVE_NET
	struct cache_shared_block blk;

	describe(c, b, &blk);
	blk.park = b;
	blk.resume = b->shared_resume;
	blk.wait_until = b->shared_wait_until;
	switch (cache_shared_get(c->shared, &blk, b->data)) {
	case CACHE_SHARED_PARKED:
		return CACHE_TIER_PARKED;
	case CACHE_SHARED_HIT:
		b->fill = CACHE_FILL_SHARED;
		*len = blk.len;
		return CACHE_TIER_FILLED;
	case CACHE_SHARED_MISS:
		b->fill = CACHE_FILL_STORE_MISS;
		break;
	case CACHE_SHARED_OWNED:
		b->fill = CACHE_FILL_STORE_OWNED;
		break;
	case CACHE_SHARED_BAD:
		b->fill = CACHE_FILL_STORE_BAD;
		break;
	case CACHE_SHARED_FAILED: /* written if the tier is still up (a HEAD first) */
		b->fill = CACHE_FILL_STORE_MISS;
		break;
	case CACHE_SHARED_SKIP:
		break;
	}
#else
	(void)c;
	(void)b;
	(void)len;
#endif
	return CACHE_TIER_NONE;
}

enum cache_tier_got cache_tier_fill(struct cache *c, struct cache_block *b, uint32_t *len)
{
	uint32_t whole = cache_file_block_len(c, b->file, b->index);
	struct cache_meta_key key;
	uint32_t n;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	b->fill = CACHE_FILL_STORE;
	if (c->disk) {
		cache_meta_block_key(b->file->path, b->file->version, b->index, &key);
		/* A miss, a bad checksum (dropped there, logged) or a length that is
		 * not this version's all go on to the next tier. */
		if (cache_disk_read(c->disk, &key, b->data, c->bs, &n) == 0 && n == whole) {
			b->fill = CACHE_FILL_DISK;
			*len = n;
			return CACHE_TIER_FILLED;
		}
	}
	/* Whole blocks only: a random reader's few pages are not worth a block's
	 * GET, and only whole blocks are written there. */
	if (c->shared && b->vlo == 0 && b->vhi == whole)
		return shared_fill(c, b, len);
	return CACHE_TIER_NONE;
}

/* Does the shared tier lack b, which came from the store after asking it? */
static bool shared_lacks(const struct cache *c, const struct cache_block *b)
{
	return c->shared && (b->fill == CACHE_FILL_STORE_MISS ||
			     b->fill == CACHE_FILL_STORE_OWNED || b->fill == CACHE_FILL_STORE_BAD);
}

bool cache_tier_wants(const struct cache *c, const struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	return cache_block_full(b) &&
	       ((c->disk && b->fill != CACHE_FILL_DISK) || shared_lacks(c, b));
}

/* Queues b's write to the shared tier; takes over one reference of b. */
static void shared_behind(struct cache *c, struct cache_block *b)
{
#ifdef MCFS_HAVE_NET
	struct cache_shared_block blk;
	enum cache_shared_got got = b->fill == CACHE_FILL_STORE_OWNED ? CACHE_SHARED_OWNED
				    : b->fill == CACHE_FILL_STORE_BAD ? CACHE_SHARED_BAD
								      : CACHE_SHARED_MISS;

	describe(c, b, &blk);
	if (cache_shared_put(c->shared, &blk, b->data, got, b) == 0)
		return;
#endif
	cache_block_put_behind(c, b); /* dropped (counted there): no callback will come */
}

/* ---- blocks owed to the disk tier ------------------------------------------
 *
 * A fetch never waits for the cache disk: when the write-behind queue is
 * full, the block stays in the RAM tier, marked owed, on c->owed (oldest
 * first), and holds nothing there (it is evicted as any block, which drops
 * the debt: disk_owed_dropped). Each job the writer finishes makes room for
 * one: cache_disk_done() queues owed blocks while there is room. So a cold
 * read runs at the store's speed; a RAM tier as large as what was read puts
 * every block on disk, a little later; a smaller one puts what it still holds,
 * and the rest is fetched again, and written, at its next read.
 */

#define OWED_LINK(b, off) ((struct cache_owed_link *)(void *)((char *)(b) + (off)))

static void owed_link(struct cache_owed_list *l, struct cache_block *b, size_t off, bool front)
{
	struct cache_owed_link *k = OWED_LINK(b, off);

	if (front) {
		k->prev = NULL;
		k->next = l->first;
		if (l->first)
			OWED_LINK(l->first, off)->prev = b;
		else
			l->last = b;
		l->first = b;
	} else {
		k->next = NULL;
		k->prev = l->last;
		if (l->last)
			OWED_LINK(l->last, off)->next = b;
		else
			l->first = b;
		l->last = b;
	}
}

static void owed_unlink(struct cache_owed_list *l, struct cache_block *b, size_t off)
{
	struct cache_owed_link *k = OWED_LINK(b, off);

	if (k->prev)
		OWED_LINK(k->prev, off)->next = k->next;
	else
		l->first = k->next;
	if (k->next)
		OWED_LINK(k->next, off)->prev = k->prev;
	else
		l->last = k->prev;
	k->prev = k->next = NULL;
}

/* On the cache's list and on its file's, in the same order. */
static void owed_add(struct cache *c, struct cache_block *b, bool front)
{
	MCFS_ASSERT_HELD(&c->lock);
	b->owed = true;
	owed_link(&c->owed, b, offsetof(struct cache_block, oall), front);
	owed_link(&b->file->owed, b, offsetof(struct cache_block, ofile), front);
	c->nowed++;
}

static void owed_del(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	owed_unlink(&c->owed, b, offsetof(struct cache_block, oall));
	owed_unlink(&b->file->owed, b, offsetof(struct cache_block, ofile));
	b->owed = false;
	c->nowed--;
}

void cache_owed_forget(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	if (!b->owed)
		return;
	owed_del(c, b);
	c->st.disk_owed_dropped++;
}

/*
 * Queues owed blocks (of @f only, if not NULL), oldest first, until none is
 * left or (without @wait) the queue is full. Each queued block holds a
 * reference and a CACHE_CLAIM_BEHIND until cache_disk_done(). No lock held.
 */
static void pay_owed(struct cache *c, const struct cache_file *f, bool wait)
{
	struct cache_meta_key key;
	struct cache_block *b;
	int rc;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	for (;;) {
		pthread_mutex_lock(&c->lock);
		b = !c->disk ? NULL : f ? f->owed.first : c->owed.first;
		if (!b) {
			pthread_mutex_unlock(&c->lock);
			return;
		}
		owed_del(c, b);
		cache_block_hold(c, b); /* its bytes stay put until done() */
		(void)cache_budget_take(&c->budget, CACHE_CLAIM_BEHIND); /* never refused */
		cache_meta_block_key(b->file->path, b->file->version, b->index, &key);
		pthread_mutex_unlock(&c->lock);
		rc = cache_disk_write(c->disk, &key, b->data, b->len, b, wait);
		if (rc == 0)
			continue;
		if (rc == -EAGAIN) { /* no room after all: first in line again */
			pthread_mutex_lock(&c->lock);
			owed_add(c, b, true);
			pthread_mutex_unlock(&c->lock);
		}
		cache_block_put_behind(c, b); /* not queued: no callback will come */
		if (rc == -EAGAIN)
			return;
	}
}

void cache_tier_pay_owed(struct cache *c, const struct cache_file *f)
{
	pay_owed(c, f, true);
}

void cache_tier_behind(struct cache *c, struct cache_block *b)
{
	bool disk = c->disk && b->fill != CACHE_FILL_DISK, shared = shared_lacks(c, b);
	struct cache_meta_key key;
	int rc;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	if (disk && shared) { /* a reference for each writer */
		pthread_mutex_lock(&c->lock);
		b->refs++;
		(void)cache_budget_take(&c->budget, CACHE_CLAIM_BEHIND); /* never refused */
		pthread_mutex_unlock(&c->lock);
	}
	if (shared)
		shared_behind(c, b);
	if (!disk)
		return;
	cache_meta_block_key(b->file->path, b->file->version, b->index, &key);
	rc = cache_disk_write(c->disk, &key, b->data, b->len, b, false);
	if (rc == 0)
		return;
	if (rc == -EAGAIN) { /* the writer is behind: owed, and this fetch goes on */
		pthread_mutex_lock(&c->lock);
		if (!b->owed) { /* still hashed: our reference kept it */
			owed_add(c, b, false);
			c->st.disk_deferred++;
		}
		pthread_mutex_unlock(&c->lock);
	}
	cache_block_put_behind(c, b); /* not queued: no callback will come */
	/* The writer may have emptied the queue since it refused this block,
	 * with no job left whose done() would queue it: try once now. */
	if (rc == -EAGAIN)
		pay_owed(c, NULL, false);
}

void cache_disk_done(void *ctx, void *arg)
{
	struct cache *c = ctx;

	cache_block_put_behind(c, arg);
	pay_owed(c, NULL, false);
}

uint64_t cache_tier_file_bytes(struct cache *c, struct cache_file *f, const bool *in_ram)
{
	struct cache_meta_key key;
	uint64_t i, bytes = 0;

	MCFS_ASSERT_NOT_HELD(&c->lock);
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
	MCFS_ASSERT_NOT_HELD(&c->lock);
#ifdef MCFS_HAVE_NET
	cache_shared_get_stats(c->shared, out);
#endif
	if (c->meta)
		cache_meta_usage(c->meta, &out->meta_map_bytes, &out->meta_used_bytes,
				 &out->meta_prunes);
	if (!c->disk) {
		out->disk_state = 0;
		out->disk_off_reason = (uint64_t)c->disk_off;
		out->disk_off_errno = (uint64_t)c->disk_off_errno;
		return;
	}
	cache_disk_get_stats(c->disk, &out->disk);
	out->disk_state = out->disk.full ? 2 : 1;
}

const char *cache_disk_off_text(int reason)
{
	switch (reason) {
	case CACHE_DISK_OFF_NONE:
		return "on";
	case CACHE_DISK_OFF_NO_DIR:
		return "no cache_dir set";
	case CACHE_DISK_OFF_DIR:
		return "cache_dir (or the store's directory in it) could not be made or used";
	case CACHE_DISK_OFF_LOCKED:
		return "cache_dir in use by another mcfs daemon of this store";
	case CACHE_DISK_OFF_META:
		return "its metadata store (LMDB) would not open";
	case CACHE_DISK_OFF_DISK:
		return "its block file would not open (metadata is still kept)";
	}
	return "for a reason this mcfs does not know";
}
