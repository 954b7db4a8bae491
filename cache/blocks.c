/*
 * blocks.c - the RAM tier: fixed slots of one block each, a hash from
 * (file identity, block index) to slot, LRU eviction, reference counts and
 * single-flight fetches by a pool of fetch threads.
 *
 * Flow of a miss: the reader takes a slot (free, or the least recently used
 * unreferenced one), puts it in the hash as LOADING with two references (its
 * own and the job's), queues the job at the head of the queue and sleeps on
 * `loaded`. A fetch thread (fetch_thread.c) takes the job, reads the block from
 * the store into the slot without the lock, marks it READY (or ERROR) and wakes
 * the readers.
 * Anyone else who misses on the same block finds it LOADING, takes a
 * reference and sleeps too: one store read per block.
 *
 * Readahead queues jobs at the tail and never waits for a slot: if none is
 * evictable without dropping a block that readahead fetched and nobody read
 * yet, or the prefetch budget is spent, it answers -EAGAIN and the stream
 * asks again later. Demand reads always go first.
 *
 * Disk and shared tiers (tiers.c, when cache_dir or shared_cache is set): a
 * fetch thread asks them before the store; a whole block is queued for
 * write-behind to those that lack it, each writer holding one reference
 * until it is written.
 *
 * Memory: the slots are one anonymous mapping (huge pages advised), touched
 * on first use, so that the GPU module can register it once as pinned memory.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache.h"
#include "cache_ram.h"
#include "cache_stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- lists ------------------------------------------------------------- */

static void list_init(struct slot_list *l)
{
	l->head.prev = l->head.next = &l->head;
	l->n = 0;
}

void cache_list_del(struct slot_list *l, struct cache_block *b)
{
	b->prev->next = b->next;
	b->next->prev = b->prev;
	b->prev = b->next = NULL;
	l->n--;
}

void cache_list_push_back(struct slot_list *l, struct cache_block *b)
{
	b->prev = l->head.prev;
	b->next = &l->head;
	l->head.prev->next = b;
	l->head.prev = b;
	l->n++;
}

static void list_push_front(struct slot_list *l, struct cache_block *b)
{
	b->next = l->head.next;
	b->prev = &l->head;
	l->head.next->prev = b;
	l->head.next = b;
	l->n++;
}

struct cache_block *cache_list_first(struct slot_list *l)
{
	return l->n ? l->head.next : NULL;
}

void cache_lists_init(struct cache *c)
{
	list_init(&c->lru);
	list_init(&c->free);
	list_init(&c->jobs);
}

/* ---- hash -------------------------------------------------------------- */

static size_t bucket_of(const struct cache *c, const struct cache_file *f, uint64_t index)
{
	uint64_t h = (f->id * 0x9E3779B97F4A7C15ull) ^ (index * 0xC2B2AE3D27D4EB4Full);

	h ^= h >> 29;
	return (size_t)(h & (c->nbuckets - 1));
}

static struct cache_block *hash_find(struct cache *c, struct cache_file *f, uint64_t index)
{
	struct cache_block *b;

	for (b = c->buckets[bucket_of(c, f, index)]; b; b = b->hnext)
		if (b->file == f && b->index == index)
			return b;
	return NULL;
}

static void hash_insert(struct cache *c, struct cache_block *b)
{
	size_t i = bucket_of(c, b->file, b->index);

	b->hnext = c->buckets[i];
	c->buckets[i] = b;
}

void cache_hash_remove(struct cache *c, struct cache_block *b)
{
	struct cache_block **pp = &c->buckets[bucket_of(c, b->file, b->index)];

	while (*pp != b)
		pp = &(*pp)->hnext;
	*pp = b->hnext;
	b->hnext = NULL;
	cache_owed_forget(c, b); /* another identity next: its bytes are not owed */
}

/* ---- slots ------------------------------------------------------------- */

void cache_ra_tally_unref(struct cache *c, struct cache_ra_tally *t)
{
	MCFS_ASSERT_HELD(&c->lock);
	if (--t->refs == 0)
		free(t);
}

void cache_ra_tally_put(struct cache *c, struct cache_ra_tally *t)
{
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_ra_tally_unref(c, t);
	pthread_mutex_unlock(&c->lock);
}

/* b was read (or is gone): it no longer counts as readahead. Lock held. */
void cache_drop_prefetched(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	if (b->prefetched) {
		b->prefetched = false;
		c->prefetch_bytes -= c->bs;
	}
	if (b->tally) {
		cache_ra_tally_unref(c, b->tally);
		b->tally = NULL;
	}
}

/*
 * Takes a slot for reuse: a free one, else the least recently used READY
 * block nobody holds. A prefetch (for_prefetch) does not evict blocks that
 * readahead fetched and nobody read yet. Returns NULL if none qualifies.
 * Called with the lock held.
 */
static struct cache_block *take_slot(struct cache *c, bool for_prefetch)
{
	struct cache_block *b = cache_list_first(&c->free);

	MCFS_ASSERT_HELD(&c->lock);
	if (b) {
		cache_list_del(&c->free, b);
		return b;
	}
	for (b = cache_list_first(&c->lru); b && b != &c->lru.head; b = b->next) {
		if (for_prefetch && b->prefetched)
			continue;
		cache_list_del(&c->lru, b);
		cache_hash_remove(c, b);
		cache_file_unref(c, b->file); /* the slot's */
		b->file = NULL;
		if (b->prefetched) {
			c->st.prefetch_unused++;
			/* tells the stream that asked for it (readahead.c) */
			if (b->tally)
				atomic_fetch_add(&b->tally->unused, 1);
			cache_drop_prefetched(c, b);
		}
		c->st.evictions++;
		return b;
	}
	return NULL;
}

/* Turns a taken slot into a LOADING block of (f, index) with @refs references. */
static void start_loading(struct cache *c, struct cache_block *b, struct cache_file *f,
			  uint64_t index, unsigned refs)
{
	MCFS_ASSERT_HELD(&c->lock);
	b->file = f;
	f->refs++; /* the slot's, until it is reused or freed */
	b->index = index;
	b->state = SLOT_LOADING;
	b->err = 0;
	b->len = cache_file_block_len(c, f, index);
	b->refs = refs;
	b->prefetched = false;
	b->tally = NULL;
	b->warm = false;
	b->bg_job = false;
	b->extending = false;
	b->xerr = 0;
	b->shared_resume = 0;
	b->shared_wait_until = 0;
	b->behind_pending = false;
	b->vlo = 0;
	b->vhi = b->len;
	memset(b->pages, 0, c->page_words * sizeof(uint64_t));
	hash_insert(c, b);
}

void cache_enqueue(struct cache *c, struct cache_block *b, bool urgent)
{
	MCFS_ASSERT_HELD(&c->lock);
	b->queued = true;
	if (urgent)
		list_push_front(&c->jobs, b);
	else
		cache_list_push_back(&c->jobs, b);
	pthread_cond_signal(&c->work);
}

/* Drops one reference; the last one makes the slot evictable or free. Lock held. */
void cache_unref(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	if (--b->refs > 0)
		return;
	if (b->state == SLOT_READY) {
		cache_list_push_back(&c->lru, b);
	} else if (b->state == SLOT_ERROR) {
		b->state = SLOT_FREE;
		cache_file_unref(c, b->file);
		b->file = NULL;
		cache_list_push_back(&c->free, b);
	}
	pthread_cond_broadcast(&c->freed);
}

/* ---- page bitmaps ------------------------------------------------------ */

bool cache_page_held(const struct cache_block *b, uint32_t p)
{
	return (b->pages[p / 64] >> (p % 64)) & 1;
}

/* Marks the pages of [lo, hi) held. Lock held. */
void cache_pages_set(struct cache_block *b, uint32_t lo, uint32_t hi)
{
	uint32_t p;

	for (p = lo >> CACHE_PAGE_SHIFT; p < (hi + CACHE_PAGE_SZ - 1) >> CACHE_PAGE_SHIFT; p++)
		b->pages[p / 64] |= 1ull << (p % 64);
}

bool cache_block_covers(const struct cache_block *b, uint32_t lo, uint32_t hi)
{
	uint32_t p;

	for (p = lo >> CACHE_PAGE_SHIFT; p < (hi + CACHE_PAGE_SZ - 1) >> CACHE_PAGE_SHIFT; p++)
		if (!cache_page_held(b, p))
			return false;
	return true;
}

bool cache_block_full(const struct cache_block *b)
{
	return cache_block_covers(b, 0, b->len);
}

/* Bytes of b held: its pages, the last one cut at the block's end. */
static uint64_t held_bytes(const struct cache_block *b)
{
	uint32_t p, n = (b->len + CACHE_PAGE_SZ - 1) >> CACHE_PAGE_SHIFT;
	uint64_t bytes = 0;

	for (p = 0; p < n; p++)
		if (cache_page_held(b, p))
			bytes += MCFS_MIN(CACHE_PAGE_SZ, b->len - (p << CACHE_PAGE_SHIFT));
	return bytes;
}

/* ---- public ------------------------------------------------------------ */

static bool covers(const struct cache_block *b, uint32_t lo, uint32_t hi)
{
	return cache_block_covers(b, lo, hi);
}

int cache_span(const struct cache *c, const struct cache_file *f, uint64_t off, uint64_t len,
	       struct cache_span *sp)
{
	uint64_t index = off >> c->bs_shift;
	uint32_t boff = (uint32_t)(off & (c->bs - 1)), blen;

	if (len == 0 || off >= f->size)
		return -EINVAL;
	blen = cache_file_block_len(c, f, index);
	sp->index = index;
	sp->boff = boff;
	sp->blen = blen;
	sp->len = (uint32_t)MCFS_MIN((uint64_t)(blen - boff), len);
	return 0;
}

uint64_t cache_block_size(const struct cache *c)
{
	return c->bs;
}

/* Drops an unreferenced READY block from the cache. Lock held. */
static void discard(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	cache_list_del(&c->lru, b);
	cache_hash_remove(c, b);
	cache_drop_prefetched(c, b);
	b->state = SLOT_FREE;
	cache_file_unref(c, b->file);
	b->file = NULL;
	cache_list_push_back(&c->free, b);
}

/*
 * Sleeps until b's fetch ends; b holds our reference. Returns 0 if b now
 * holds [lo, hi), 1 if it holds another part (the caller drops its reference
 * and looks again), or a negative errno (our reference is dropped). Lock held.
 */
static int await(struct cache *c, struct cache_block *b, uint32_t lo, uint32_t hi)
{
	int rc;

	MCFS_ASSERT_HELD(&c->lock);
	/* Sleeps on c->loaded (c->lock) until the fetch or extension of b ends. */
	while (b->state == SLOT_LOADING || (b->extending && !covers(b, lo, hi)))
		pthread_cond_wait(&c->loaded, &c->lock);
	rc = b->state == SLOT_ERROR ? b->err : 0;
	if (rc == 0 && !covers(b, lo, hi))
		rc = b->xerr; /* the extension that was to bring our pages failed */
	if (rc < 0) {
		/* The fetch thread logged the cause. */
		rc = rc == -ENOMEM || rc == -ESTALE ? rc : -EIO;
		cache_unref(c, b);
		return rc;
	}
	return covers(b, lo, hi) ? 0 : 1;
}

int cache_block_get_range(struct cache *c, struct cache_file *f, uint64_t index, uint32_t lo,
			  uint32_t hi, struct cache_block **out)
{
	struct cache_block *b;
	int rc;

	if (index >= f->nblocks || lo >= hi || hi > cache_file_block_len(c, f, index))
		return -EINVAL;
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	for (;;) {
		b = hash_find(c, f, index);
		if (!b) {
			b = take_slot(c, false);
			if (!b) {
				/* Every slot is held by a reader or a fetch: sleeps on
				 * c->freed (c->lock) until one is put back. While it
				 * waits, no new background claim is admitted (budget.h). */
				c->budget.readers_waiting++;
				pthread_cond_wait(&c->freed, &c->lock);
				c->budget.readers_waiting--;
				continue;
			}
			start_loading(c, b, f, index, 2); /* ours and the job's */
			b->vlo = lo;
			b->vhi = hi;
			c->st.misses++;
			cache_enqueue(c, b, true);
		} else if (b->state == SLOT_READY && covers(b, lo, hi)) {
			if (b->refs++ == 0)
				cache_list_del(&c->lru, b);
			c->st.hits++;
			break;
		} else if (b->state == SLOT_LOADING) {
			b->refs++;
			c->st.waits++;
			if (b->queued) { /* queued by readahead: a reader now waits for it */
				cache_list_del(&c->jobs, b);
				list_push_front(&c->jobs, b);
			}
		} else {
			/* READY but without some pages we need: fetch just those into it */
			if (b->refs++ == 0)
				cache_list_del(&c->lru, b);
			if (!b->extending) {
				b->extending = true;
				b->xerr = 0;
				b->vlo = lo;
				b->vhi = hi;
				b->refs++; /* the job's */
				c->st.misses++;
				cache_enqueue(c, b, true);
			} else {
				c->st.waits++; /* another extension runs: see what it brings */
			}
		}
		rc = await(c, b, lo, hi);
		if (rc == 0)
			break;
		if (rc < 0) {
			pthread_mutex_unlock(&c->lock);
			*out = NULL;
			return rc;
		}
		cache_unref(c, b);
	}
	if (b->tally) /* readahead that got read: tells its stream (readahead.c) */
		atomic_fetch_add(&b->tally->used, 1);
	cache_drop_prefetched(c, b);
	pthread_mutex_unlock(&c->lock);
	*out = b;
	return 0;
}

int cache_block_get(struct cache *c, struct cache_file *f, uint64_t index, struct cache_block **out)
{
	if (index >= f->nblocks)
		return -EINVAL;
	return cache_block_get_range(c, f, index, 0, cache_file_block_len(c, f, index), out);
}

void cache_block_put(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_unref(c, b);
	pthread_mutex_unlock(&c->lock);
}

void cache_block_hold(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_HELD(&c->lock);
	if (b->refs++ == 0 && b->state == SLOT_READY)
		cache_list_del(&c->lru, b); /* held: never evicted */
}

void cache_block_put_behind(struct cache *c, struct cache_block *b)
{
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_budget_put(&c->budget, CACHE_CLAIM_BEHIND);
	cache_unref(c, b);
	pthread_mutex_unlock(&c->lock);
}

const char *cache_block_data(const struct cache_block *b)
{
	return b->data;
}

size_t cache_block_len(const struct cache_block *b)
{
	return b->len;
}

/*
 * Starts a background fetch of block @index (readahead, or a warm-up with
 * @warm) without waiting; a readahead block holds a reference to @t (if not
 * NULL) until read. Returns 0 when started, 1 when the block is cached or
 * loading, -EAGAIN when its budget or the RAM tier has no room now.
 */
static int start_background(struct cache *c, struct cache_file *f, uint64_t index, bool warm,
			    struct cache_ra_tally *t)
{
	struct cache_block *b;
	int rc = 0;

	if (index >= f->nblocks)
		return -EINVAL;
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	if (hash_find(c, f, index)) {
		rc = 1;
		goto out;
	}
	/* Readahead is bounded by prefetch_mem; a warm-up by its queue, so that a
	 * warm-up of a huge file can't flood the queue ahead of readers. */
	if (warm ? c->warm_jobs >= 2 * c->nthreads
		 : c->prefetch_bytes + c->bs > c->prefetch_budget) {
		rc = -EAGAIN;
		goto out;
	}
	/* The one budget (budget.h): background holds at most half the slots,
	 * and yields to a reader waiting for one. */
	if (!cache_budget_take(&c->budget, CACHE_CLAIM_PREFETCH)) {
		rc = -EAGAIN;
		goto out;
	}
	b = take_slot(c, true);
	if (!b) {
		cache_budget_put(&c->budget, CACHE_CLAIM_PREFETCH);
		rc = -EAGAIN;
		goto out;
	}
	start_loading(c, b, f, index, 1); /* the job's */
	b->bg_job = true;
	if (warm) {
		b->warm = true;
		c->warm_jobs++;
	} else {
		b->prefetched = true;
		c->prefetch_bytes += c->bs;
		if (t) {
			b->tally = t;
			t->refs++;
		}
	}
	c->st.prefetches++;
	cache_enqueue(c, b, false);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

bool cache_block_settle(struct cache *c, struct cache_file *f, int64_t index)
{
	struct cache_block *b;
	struct timespec ts;
	bool ready;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	if (index < 0) {
		/* Sleeps on c->loaded (c->lock) for one fetch's end, at most 10 ms:
		 * the fetches that refused the caller may all have ended already. */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c->loaded, &c->lock, &ts);
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	/* Sleeps on c->loaded (c->lock) until this block's fetch ends and its
	 * write-behind is queued (or owed): a whole fetch's flush then finds it. */
	while ((b = hash_find(c, f, (uint64_t)index)) &&
	       (b->state == SLOT_LOADING || b->behind_pending))
		pthread_cond_wait(&c->loaded, &c->lock);
	ready = b && b->state == SLOT_READY;
	pthread_mutex_unlock(&c->lock);
	return ready;
}

int cache_prefetch(struct cache *c, struct cache_file *f, uint64_t index)
{
	return cache_prefetch_for(c, f, index, NULL);
}

int cache_prefetch_for(struct cache *c, struct cache_file *f, uint64_t index,
		       struct cache_ra_tally *t)
{
	int rc = start_background(c, f, index, false, t);

	return rc > 0 ? 0 : rc;
}

int cache_warm(struct cache *c, struct cache_file *f, uint64_t index)
{
	return start_background(c, f, index, true, NULL);
}

void cache_evict_file(struct cache *c, struct cache_file *f, struct cache_evicted *out)
{
	struct cache_block *b;
	uint64_t i;

	out->ram_bytes = 0;
	out->disk_bytes = 0;
	out->held_open = 0;
	pthread_mutex_lock(&c->lock);
	for (i = 0; i < f->nblocks; i++) {
		b = hash_find(c, f, i);
		if (!b || b->state != SLOT_READY || b->refs > 0)
			continue;
		out->ram_bytes += held_bytes(b);
		discard(c, b);
	}
	pthread_mutex_unlock(&c->lock);
	if (c->disk) /* all versions of the path */
		out->disk_bytes = cache_disk_evict_path(c->disk, f->path);
	out->held_open = cache_backing_evict_path(c, f->path);
}

uint64_t cache_ram_drop_file(struct cache *c, struct cache_file *f)
{
	struct cache_block *b;
	uint64_t i, bytes = 0;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < f->nblocks; i++) {
		b = hash_find(c, f, i);
		if (!b || b->state != SLOT_READY || b->refs > 0)
			continue;
		bytes += held_bytes(b);
		discard(c, b);
	}
	pthread_mutex_unlock(&c->lock);
	return bytes;
}

bool cache_file_complete(struct cache *c, struct cache_file *f)
{
	struct cache_block *b;
	struct cache_meta_key key;
	bool *in_ram = calloc(f->nblocks + 1, sizeof(*in_ram));
	bool all = in_ram != NULL;
	uint64_t i;

	pthread_mutex_lock(&c->lock);
	for (i = 0; all && i < f->nblocks; i++) {
		b = hash_find(c, f, i);
		in_ram[i] = b && b->state == SLOT_READY && cache_block_full(b);
	}
	pthread_mutex_unlock(&c->lock);
	for (i = 0; all && i < f->nblocks; i++) {
		if (in_ram[i])
			continue;
		cache_meta_block_key(f->path, f->version, i, &key);
		all = c->disk && cache_disk_held(c->disk, &key) == cache_file_block_len(c, f, i);
	}
	free(in_ram);
	return all;
}

uint64_t cache_file_cached_bytes(struct cache *c, struct cache_file *f)
{
	struct cache_block *b;
	uint64_t i, bytes = 0;
	/* blocks RAM holds, so that the disk tier's count adds only the others */
	bool *in_ram = c->disk ? calloc(f->nblocks + 1, sizeof(*in_ram)) : NULL;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < f->nblocks; i++) {
		b = hash_find(c, f, i);
		if (b && b->state == SLOT_READY) {
			bytes += held_bytes(b);
			if (in_ram)
				in_ram[i] = cache_block_full(b);
		}
	}
	pthread_mutex_unlock(&c->lock);
	bytes += cache_tier_file_bytes(c, f, in_ram);
	free(in_ram);
	return bytes;
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
	struct remote_stats rs;

	pthread_mutex_lock(&c->lock);
	*out = c->st;
	out->block_size = c->bs;
	out->slots = c->nslots;
	out->slots_used = c->nslots - c->free.n;
	out->inflight = c->inflight;
	out->prefetch_bytes = c->prefetch_bytes;
	out->ram_background_slots =
	    c->budget.held[CACHE_CLAIM_PREFETCH] + c->budget.held[CACHE_CLAIM_BEHIND];
	out->ram_budget_refusals = c->budget.refusals;
	out->gpu_window_waits = c->budget.gpu_waits;
	out->file_identities = c->nfiles;
	out->disk_owed = c->nowed;
	pthread_mutex_unlock(&c->lock);
	out->ram_bytes_limit = c->nslots * c->bs;
	out->ram_bytes_used = out->slots_used * c->bs;
	out->ram_prefault = (uint64_t)atomic_load(&c->prefault_state);
	out->ram_faulted_bytes = atomic_load_explicit(&c->prefault_bytes, memory_order_relaxed);
	out->ram_numa_nodes = atomic_load(&c->numa_nodes);
	cache_tier_stats(c, out);
	cache_backing_stats(c, out);
	out->reads = atomic_load_explicit(&c->reads, memory_order_relaxed);
	out->read_bytes = atomic_load_explicit(&c->read_bytes, memory_order_relaxed);
	out->open_checks = atomic_load_explicit(&c->open_checks, memory_order_relaxed);
	out->offline_opens = atomic_load_explicit(&c->offline_opens, memory_order_relaxed);
	remote_get_stats(c->remote, &rs);
	out->store_requests = rs.requests;
	out->store_reads = rs.read_requests;
	out->store_bytes = rs.read_bytes;
	out->store_errors = rs.errors;
	out->store_retries = rs.retries;
}

const char *cache_store_kind(const struct cache *c)
{
	return remote_kind(c->remote);
}

void cache_note_window(struct cache *c, unsigned window)
{
	unsigned i = 0;

	while (i + 1 < CACHE_RA_BUCKETS && (1u << i) < window)
		i++;
	pthread_mutex_lock(&c->lock);
	c->st.ra_window[i]++;
	c->st.ra_window_sum += window;
	pthread_mutex_unlock(&c->lock);
}

void cache_ram_region(struct cache *c, void **base, size_t *len)
{
	*base = c->region;
	*len = c->region_len;
}

size_t cache_ram_slots(const struct cache *c)
{
	return c->nslots;
}
