/*
 * disk.c - the disk tier's slot file, in-memory index and read path.
 *
 * Layout: CACHE_DIR/blocks/slots is one file of nslots block-size slots,
 * sized with ftruncate (sparse) and allocated slot by slot by the writer
 * (fallocate), so a full filesystem shows up as ENOSPC on one slot, not as a
 * failed mount. One file rather than a file per block: no directory to scan
 * at start-up, no inode churn, and O_DIRECT offsets are simple multiples.
 *
 * Start-up: the LMDB block index is scanned once into memory (slot ->
 * key, checksum, length, last use); the LRU is rebuilt in last-use order and
 * every slot no entry claims is free. Entries that point past the slot file
 * or at a slot already claimed are deleted. Nothing else needs repair after
 * a crash: data is written before its entry is committed, and every read is
 * verified against the committed checksum.
 *
 * Reads: a RAM-tier miss calls cache_disk_read(): look the key up, pin the
 * slot (readers++, so the writer does not reuse it), read it through a
 * pooled io_uring in 1 MiB pieces submitted together (8 in flight per 8 MiB
 * block, times the fetch threads reading at once: enough queue depth for the
 * disk's bandwidth), verify XXH3-64, unpin. The bytes land straight in the
 * caller's buffer, which is the RAM-tier slot: no bounce copy.
 *
 * Writes are in disk_writer.c.
 */
#define _GNU_SOURCE
#include "disk_int.h"
#include "cfg.h" /* cfg_parse_size: disk_cache sizes */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#define PIECE (1u << 20) /* bytes per SQE: big enough for the disk, 8 per 8 MiB block */
#define RING_DEPTH 64	 /* per read ring: a 64 MiB block in one submission */

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- index (lock held) ------------------------------------------------------ */

static uint32_t hash_of(const struct cache_disk *d, const struct cache_meta_key *k)
{
	return (uint32_t)(XXH3_64bits(k->b, sizeof(k->b)) & (d->nbuckets - 1));
}

uint32_t cache_disk_find(struct cache_disk *d, const struct cache_meta_key *k)
{
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	for (i = d->buckets[hash_of(d, k)]; i != DNIL; i = d->slots[i].hnext)
		if (memcmp(&d->slots[i].key, k, sizeof(*k)) == 0)
			return i;
	return DNIL;
}

void cache_disk_hash_insert(struct cache_disk *d, uint32_t i)
{
	uint32_t h = hash_of(d, &d->slots[i].key);

	MCFS_ASSERT_HELD(&d->lock);
	d->slots[i].hnext = d->buckets[h];
	d->buckets[h] = i;
}

void cache_disk_hash_remove(struct cache_disk *d, uint32_t i)
{
	uint32_t *pp = &d->buckets[hash_of(d, &d->slots[i].key)];

	MCFS_ASSERT_HELD(&d->lock);
	while (*pp != i)
		pp = &d->slots[*pp].hnext;
	*pp = d->slots[i].hnext;
	d->slots[i].hnext = DNIL;
}

void cache_disk_lru_del(struct cache_disk *d, uint32_t i)
{
	struct dslot *s = &d->slots[i];

	MCFS_ASSERT_HELD(&d->lock);
	if (!s->on_lru)
		return;
	d->slots[s->prev].next = s->next;
	d->slots[s->next].prev = s->prev;
	s->on_lru = false;
}

/* Appends at the most recently used end. */
void cache_disk_lru_push(struct cache_disk *d, uint32_t i)
{
	struct dslot *s = &d->slots[i], *head = &d->slots[d->nslots];

	MCFS_ASSERT_HELD(&d->lock);
	s->prev = head->prev;
	s->next = d->nslots;
	d->slots[head->prev].next = i;
	head->prev = i;
	s->on_lru = true;
}

/* ---- I/O ------------------------------------------------------------------------ */

int cache_disk_rw(struct cache_disk *d, struct io_uring *ring, bool write, uint32_t slot, char *buf,
		  uint32_t len)
{
	uint64_t base = (uint64_t)slot * d->bs, total = round_up(len, CACHE_DISK_ALIGN);
	unsigned n = (unsigned)((total + PIECE - 1) / PIECE), sent = 0, done = 0, i;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int rc = 0, r;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	while (done < n) {
		/* Fill the ring with the pieces not yet sent, then reap one. */
		while (sent < n && (sqe = io_uring_get_sqe(ring)) != NULL) {
			uint64_t off = (uint64_t)sent * PIECE;
			unsigned plen = (unsigned)MCFS_MIN((uint64_t)PIECE, total - off);

			if (write)
				io_uring_prep_write(sqe, d->fd, buf + off, plen, base + off);
			else
				io_uring_prep_read(sqe, d->fd, buf + off, plen, base + off);
			io_uring_sqe_set_data64(sqe, plen);
			sent++;
		}
		r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR) {
			rc = r;
			break;
		}
		for (i = 0; io_uring_peek_cqe(ring, &cqe) == 0; i++) {
			if (cqe->res < 0 && rc == 0)
				rc = cqe->res;
			else if ((uint64_t)cqe->res != io_uring_cqe_get_data64(cqe) && rc == 0)
				rc = -EIO; /* short: the slot file was cut */
			io_uring_cqe_seen(ring, cqe);
			done++;
		}
	}
	/* After a submit error, reap what is still in flight before the ring is reused. */
	while (done < sent && io_uring_wait_cqe(ring, &cqe) == 0) {
		io_uring_cqe_seen(ring, cqe);
		done++;
	}
	return rc;
}

static struct dring *ring_get(struct cache_disk *d)
{
	struct dring *r;

	pthread_mutex_lock(&d->lock);
	r = d->rings;
	if (r)
		d->rings = r->next;
	pthread_mutex_unlock(&d->lock);
	if (r)
		return r;
	r = calloc(1, sizeof(*r));
	if (r && io_uring_queue_init(RING_DEPTH, &r->ring, 0) < 0) {
		free(r);
		r = NULL;
	}
	return r;
}

static void ring_put(struct cache_disk *d, struct dring *r)
{
	pthread_mutex_lock(&d->lock);
	r->next = d->rings;
	d->rings = r;
	pthread_mutex_unlock(&d->lock);
}

/* Drops slot @i (already out of the hash and LRU, state DEAD): deletes its
 * entry, then frees the slot. No lock held on entry. */
static void drop_dead(struct cache_disk *d, uint32_t i, const struct cache_meta_key *k)
{
	int rc;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	rc = cache_meta_blocks_update(d->meta, k, 1, NULL, NULL, 0);
	pthread_mutex_lock(&d->lock);
	if (rc == 0) {
		d->slots[i].state = DS_FREE;
		d->free_stack[d->nfree++] = i;
	} /* else: stays DEAD (never reused) until restart; the checksum guards it */
	pthread_mutex_unlock(&d->lock);
}

int cache_disk_read(struct cache_disk *d, const struct cache_meta_key *k, char *buf, size_t cap,
		    uint32_t *len)
{
	struct cache_meta_key key = *k;
	struct dring *r;
	struct dslot *s;
	uint64_t csum;
	uint32_t i, n;
	bool ok;
	int rc;

	pthread_mutex_lock(&d->lock);
	i = cache_disk_find(d, k);
	if (i == DNIL || d->slots[i].state != DS_VALID || d->slots[i].len > cap) {
		d->st.misses++;
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	s = &d->slots[i];
	if (s->readers++ == 0)
		cache_disk_lru_del(d, i);
	n = s->len;
	csum = s->csum;
	pthread_mutex_unlock(&d->lock);

	r = ring_get(d);
	rc = r ? cache_disk_rw(d, &r->ring, false, i, buf, n) : -ENOMEM;
	if (r)
		ring_put(d, r);
	ok = rc == 0 && XXH3_64bits(buf, n) == csum;

	pthread_mutex_lock(&d->lock);
	s->readers--;
	if (ok) {
		d->st.hits++;
		d->st.read_bytes += n;
		s->last_use = (uint64_t)cache_meta_now();
		s->dirty = true;
		d->ndirty = true;
		if (s->readers == 0)
			cache_disk_lru_push(d, i);
		pthread_mutex_unlock(&d->lock);
		*len = n;
		return 0;
	}
	if (rc < 0)
		d->st.io_errors++;
	else
		d->st.csum_errors++;
	if (rc < 0 && rc != -EIO) {
		/* not about the bytes (e.g. no io_uring for this thread: -ENOMEM):
		 * keep the block, read from the store this time */
		if (s->readers == 0)
			cache_disk_lru_push(d, i);
		pthread_mutex_unlock(&d->lock);
		MCFS_ERR("disk tier %s: reading slot %u: %s", d->path, i, strerror(-rc));
		return -EIO;
	}
	/* Torn, overwritten or rotten bytes: never served; the slot goes. */
	if (s->readers == 0 && s->state == DS_VALID) {
		cache_disk_hash_remove(d, i);
		s->state = DS_DEAD;
		d->st.slots_used--;
		d->st.bytes_used -= s->len;
	} else {
		i = DNIL; /* another reader still uses it: the last one drops it */
	}
	pthread_mutex_unlock(&d->lock);
	MCFS_ERR("disk tier %s: slot %u (%u bytes) %s: dropped, fetching the block again", d->path,
		 i == DNIL ? 0 : i, n, rc < 0 ? "could not be read" : "failed its checksum");
	if (i != DNIL)
		drop_dead(d, i, &key);
	return -ENOENT;
}

uint32_t cache_disk_held(struct cache_disk *d, const struct cache_meta_key *k)
{
	uint32_t i, n = 0;

	pthread_mutex_lock(&d->lock);
	i = cache_disk_find(d, k);
	if (i != DNIL && d->slots[i].state == DS_VALID)
		n = d->slots[i].len;
	pthread_mutex_unlock(&d->lock);
	return n;
}

uint64_t cache_disk_evict_path(struct cache_disk *d, const char *path)
{
	struct cache_meta_key *keys = NULL;
	uint32_t *idx = NULL, i, n = 0;
	uint64_t bytes = 0;
	int rc;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->nslots; i++) {
		struct dslot *s = &d->slots[i];

		if (s->state != DS_VALID || s->readers || !cache_meta_key_has_path(&s->key, path))
			continue;
		if (!keys) {
			keys = malloc(d->nslots * sizeof(*keys));
			idx = malloc(d->nslots * sizeof(*idx));
			if (!keys || !idx)
				break;
		}
		cache_disk_hash_remove(d, i);
		cache_disk_lru_del(d, i);
		s->state = DS_DEAD;
		d->st.slots_used--;
		d->st.bytes_used -= s->len;
		bytes += s->len;
		keys[n] = s->key;
		idx[n++] = i;
	}
	pthread_mutex_unlock(&d->lock);
	if (n) {
		rc = cache_meta_blocks_update(d->meta, keys, n, NULL, NULL, 0);
		if (rc < 0)
			MCFS_ERR("disk tier: evicting %s from the index: %s", path, strerror(-rc));
		pthread_mutex_lock(&d->lock);
		for (i = 0; rc == 0 && i < n; i++) {
			d->slots[idx[i]].state = DS_FREE;
			d->free_stack[d->nfree++] = idx[i];
		}
		pthread_mutex_unlock(&d->lock);
	}
	free(keys);
	free(idx);
	return bytes;
}

void cache_disk_get_stats(struct cache_disk *d, struct cache_disk_stats *out)
{
	pthread_mutex_lock(&d->lock);
	*out = d->st;
	out->queued = d->qlen + d->writing;
	out->full = d->full;
	pthread_mutex_unlock(&d->lock);
}

/* ---- open / close ------------------------------------------------------------ */

int cache_disk_limit(const char *dir, const char *spec, uint64_t *bytes)
{
	char p[4200];
	struct statvfs sv;
	struct stat st;
	uint64_t held = 0;
	double pct;
	char *end;

	if (spec[0] && spec[strlen(spec) - 1] != '%')
		return cfg_parse_size(spec, bytes);
	pct = spec[0] ? strtod(spec, &end) : 50;
	if (!(pct > 0 && pct <= 100))
		return -EINVAL;
	if (statvfs(dir, &sv) < 0)
		return -errno;
	/* A share of what is free now plus what our slot file already holds, so
	 * that a restart does not shrink the tier by its own size. */
	snprintf(p, sizeof(p), "%s/blocks/slots", dir);
	if (stat(p, &st) == 0)
		held = (uint64_t)st.st_blocks * 512;
	*bytes = (uint64_t)((double)((uint64_t)sv.f_bavail * sv.f_frsize + held) * pct / 100);
	return 0;
}

struct load_ctx {
	struct cache_disk *d;
	struct cache_meta_key *bad; /* entries to delete */
	size_t nbad, capbad;
};

static int load_one(void *arg, const struct cache_meta_key *k, const struct cache_meta_block *v)
{
	struct load_ctx *lc = arg;
	struct cache_disk *d = lc->d;
	struct dslot *s;

	if (v->slot >= d->nslots || v->len == 0 || v->len > d->bs ||
	    d->slots[v->slot].state != DS_FREE) {
		if (lc->nbad == lc->capbad) {
			size_t cap = lc->capbad ? lc->capbad * 2 : 64;
			struct cache_meta_key *b = realloc(lc->bad, cap * sizeof(*b));

			if (!b)
				return -ENOMEM;
			lc->bad = b;
			lc->capbad = cap;
		}
		lc->bad[lc->nbad++] = *k;
		return 0;
	}
	/* No other thread yet: the lock only keeps the index helpers' rule
	 * (lock held) true everywhere, so debug builds can check it. */
	pthread_mutex_lock(&d->lock);
	s = &d->slots[v->slot];
	s->key = *k;
	s->csum = v->csum;
	s->len = v->len;
	s->last_use = v->last_use;
	s->state = DS_VALID;
	cache_disk_hash_insert(d, v->slot);
	d->st.slots_used++;
	d->st.bytes_used += v->len;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static struct dslot *sort_base;

static int by_last_use(const void *a, const void *b)
{
	uint64_t x = sort_base[*(const uint32_t *)a].last_use;
	uint64_t y = sort_base[*(const uint32_t *)b].last_use;

	return x < y ? -1 : x > y;
}

/* Builds the index from LMDB: the hash, the LRU (oldest first) and the free stack. */
static int load_index(struct cache_disk *d)
{
	struct load_ctx lc = {.d = d};
	uint32_t i, n = 0, *order;
	uint64_t bs = 0;
	int rc;

	rc = cache_meta_get_u64(d->meta, "block_size", &bs);
	if ((rc == 0 && bs != d->bs) || rc == -ENOENT) {
		/* Another block size: the index means other byte ranges. */
		if (rc == 0)
			MCFS_WARN("disk tier: block size changed (%llu -> %llu): emptying the tier",
				  (unsigned long long)bs, (unsigned long long)d->bs);
		rc = cache_meta_blocks_clear(d->meta);
		if (rc == 0)
			rc = cache_meta_put_u64(d->meta, "block_size", d->bs);
	}
	if (rc == 0)
		rc = cache_meta_blocks_scan(d->meta, load_one, &lc);
	if (rc == 0 && lc.nbad)
		rc = cache_meta_blocks_update(d->meta, lc.bad, lc.nbad, NULL, NULL, 0);
	free(lc.bad);
	if (rc < 0)
		return rc;
	order = malloc((d->nslots + 1) * sizeof(*order));
	if (!order)
		return -ENOMEM;
	pthread_mutex_lock(&d->lock); /* as in load_one() */
	for (i = 0; i < d->nslots; i++)
		if (d->slots[i].state == DS_VALID)
			order[n++] = i;
	/* Single-threaded at open: the only user of sort_base. */
	sort_base = d->slots;
	qsort(order, n, sizeof(*order), by_last_use);
	for (i = 0; i < n; i++)
		cache_disk_lru_push(d, order[i]);
	/* Free slots, lowest on top: the file fills from its start. */
	for (i = d->nslots; i-- > 0;)
		if (d->slots[i].state == DS_FREE)
			d->free_stack[d->nfree++] = i;
	pthread_mutex_unlock(&d->lock);
	free(order);
	return 0;
}

static int open_slot_file(struct cache_disk *d, const char *dir)
{
	char sub[4096];
	off_t size = (off_t)((uint64_t)d->nslots * d->bs);

	if (snprintf(sub, sizeof(sub), "%s/blocks", dir) >= (int)sizeof(sub))
		return -ENAMETOOLONG;
	if (mkdir(sub, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(d->path, sizeof(d->path), "%s/slots", sub);
	d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
	d->direct = d->fd >= 0;
	if (d->fd < 0 && errno == EINVAL) {
		MCFS_INFO("disk tier %s: the filesystem refuses O_DIRECT; using buffered I/O",
			  d->path);
		d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	}
	if (d->fd < 0)
		return -errno;
	/* Sparse: slots get their blocks when first written (fallocate in the writer).
	 * Shrinking (a smaller disk_cache) gives the tail back. */
	if (ftruncate(d->fd, size) < 0)
		return -errno;
	return 0;
}

static int alloc_index(struct cache_disk *d, unsigned queue_max)
{
	uint32_t i;

	d->nbuckets = 1;
	while (d->nbuckets < d->nslots * 2)
		d->nbuckets <<= 1;
	d->slots = calloc(d->nslots + 1, sizeof(*d->slots));
	d->buckets = malloc(d->nbuckets * sizeof(*d->buckets));
	d->free_stack = malloc(d->nslots * sizeof(*d->free_stack));
	d->qmax = queue_max ? queue_max : 1;
	d->q = calloc(d->qmax, sizeof(*d->q));
	if (!d->slots || !d->buckets || !d->free_stack || !d->q)
		return -ENOMEM;
	memset(d->buckets, 0xff, d->nbuckets * sizeof(*d->buckets)); /* DNIL */
	for (i = 0; i <= d->nslots; i++) {
		d->slots[i].hnext = DNIL;
		d->slots[i].state = DS_FREE;
	}
	d->slots[d->nslots].prev = d->slots[d->nslots].next = d->nslots; /* LRU sentinel */
	d->st.slots = d->nslots;
	d->st.bytes_limit = (uint64_t)d->nslots * d->bs;
	return 0;
}

int cache_disk_open(const char *dir, uint64_t limit, uint64_t bs, struct cache_meta *meta,
		    unsigned queue_max, void (*done)(void *ctx, void *arg), void *ctx,
		    struct cache_disk **out)
{
	struct cache_disk *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	d->meta = meta;
	d->bs = bs;
	d->nslots = (uint32_t)MCFS_MIN(limit / bs, (uint64_t)UINT32_MAX - 1);
	d->done = done;
	d->ctx = ctx;
	d->fd = -1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->drained, NULL);
	rc = d->nslots ? 0 : -ENOSPC;
	if (rc == 0)
		rc = alloc_index(d, queue_max);
	if (rc == 0)
		rc = open_slot_file(d, dir);
	if (rc == 0)
		rc = load_index(d);
	if (rc == 0) {
		rc = -pthread_create(&d->writer, NULL, cache_disk_writer, d);
		d->writer_started = rc == 0;
	}
	if (rc < 0) {
		MCFS_ERR("disk tier in %s (%u slots): %s", dir, d->nslots, strerror(-rc));
		cache_disk_close(d);
		return rc;
	}
	MCFS_INFO("disk tier in %s (%u slots, %llu blocks held, %s)", dir, d->nslots,
		  (unsigned long long)d->st.slots_used, d->direct ? "O_DIRECT" : "buffered");
	*out = d;
	return 0;
}

void cache_disk_close(struct cache_disk *d)
{
	struct dring *r, *next;

	if (!d)
		return;
	if (d->writer_started) {
		pthread_mutex_lock(&d->lock);
		d->stopping = true;
		pthread_cond_broadcast(&d->work);
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->writer, NULL); /* drains the queue and persists use times */
	}
	for (r = d->rings; r; r = next) {
		next = r->next;
		io_uring_queue_exit(&r->ring);
		free(r);
	}
	if (d->fd >= 0)
		close(d->fd);
	free(d->slots);
	free(d->buckets);
	free(d->free_stack);
	free(d->q);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->drained);
	free(d);
}
