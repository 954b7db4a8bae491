/*
 * fetch_thread.c - the RAM tier's fetch threads: each takes the next job off
 * the queue (demand reads at its head, readahead at its tail), fills the
 * block's slot from the disk or shared tier, or else from the store, a
 * request per run of pages the slot lacks, marks it READY (or ERROR), wakes
 * its readers and hands a whole block to write-behind (tiers.c). The slots,
 * their lists and hash are blocks.c's.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_ram.h"
#include "cache_stats.h"

#include <errno.h>
#include <string.h>

static void note_latency(struct cache *c, double secs)
{
	static const double bounds[CACHE_LAT_BUCKETS] = CACHE_LAT_BOUNDS;
	unsigned i = 0;

	MCFS_ASSERT_HELD(&c->lock);
	while (i + 1 < CACHE_LAT_BUCKETS && secs > bounds[i])
		i++;
	c->st.fetch_lat[i]++;
	c->st.fetch_lat_sum += secs;
}

/* Reads bytes [lo, hi) of b's block from the store into the slot. No lock held. */
static int fetch_range(struct cache *c, struct cache_block *b, uint32_t lo, uint32_t hi)
{
	struct cache_file *f = b->file;
	uint64_t off = (b->index << c->bs_shift) + lo;
	size_t want = hi - lo;
	struct remote_obj obj = {.path = f->path, .version = f->version, .size = f->size};
	ssize_t got;

	MCFS_DEBUG("fetch %s block %llu [%u, %u)", f->path, (unsigned long long)b->index, lo, hi);
	MCFS_ASSERT_NOT_HELD(&c->lock);
	got = remote_read(c->remote, &obj, off, b->data + lo, want);
	if (got >= 0 && (size_t)got != want)
		got = -ESTALE;
	if (got < 0) {
		MCFS_ERR("%s: block %llu (bytes %llu-%llu): %s", f->path,
			 (unsigned long long)b->index, (unsigned long long)off,
			 (unsigned long long)(off + want - 1),
			 got == -ESTALE ? "the file changed in the store since it was opened"
					: strerror((int)-got));
		return (int)got;
	}
	return 0;
}

/*
 * Runs one job: the whole block from the disk or shared tier if one holds it
 * (*from_tier), else the pages of [vlo, vhi) the block lacks from the store,
 * one request per run of missing pages. *bytes: bytes fetched from the store.
 * FETCH_PARKED: the shared tier parked the job (another node fetches the
 * block) and will hand it back (cache_block_resume). No lock held: while the
 * job runs, nobody else changes b's bitmap.
 */
#define FETCH_PARKED 1
static int fetch(struct cache *c, struct cache_block *b, uint64_t *bytes, bool *from_tier)
{
	uint32_t p, end = (b->vhi + CACHE_PAGE_SZ - 1) >> CACHE_PAGE_SHIFT, run;
	enum cache_tier_got got = CACHE_TIER_NONE;
	uint32_t len;
	int rc;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	*bytes = 0;
	if (!b->extending)
		got = cache_tier_fill(c, b, &len); /* tiers.c */
	*from_tier = got == CACHE_TIER_FILLED;
	if (got == CACHE_TIER_PARKED)
		return FETCH_PARKED;
	if (*from_tier)
		return 0;
	for (p = b->vlo >> CACHE_PAGE_SHIFT; p < end; p = run) {
		if (cache_page_held(b, p)) {
			run = p + 1;
			continue;
		}
		for (run = p; run < end && !cache_page_held(b, run); run++)
			;
		rc = fetch_range(c, b, p << CACHE_PAGE_SHIFT,
				 MCFS_MIN(run << CACHE_PAGE_SHIFT, b->len));
		if (rc < 0)
			return rc;
		*bytes += MCFS_MIN(run << CACHE_PAGE_SHIFT, b->len) - (p << CACHE_PAGE_SHIFT);
	}
	return 0;
}

/* Ends a job that grew a READY block (lock held): its pages, or its error. Did it
 * make b whole? */
static bool end_extension(struct cache *c, struct cache_block *b, int rc, uint64_t bytes)
{
	bool was_full = cache_block_full(b);

	MCFS_ASSERT_HELD(&c->lock);
	b->extending = false;
	if (rc != 0) {
		c->st.fetch_errors++;
		b->xerr = rc; /* the pages held stay good: they are of this version */
		return false;
	}
	cache_pages_set(b, b->vlo, b->vhi);
	c->st.fetched_bytes += bytes;
	return !was_full && cache_block_full(b);
}

void *cache_fetch_thread(void *arg)
{
	struct cache *c = arg;
	struct cache_block *b;
	unsigned long long t0;
	uint64_t bytes;
	bool from_tier, behind;
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-fetch");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		/* Sleeps on c->work (c->lock) until a job is queued or the cache stops. */
		t0 = mcfs_now_ns();
		while (!c->stopping && c->jobs.n == 0)
			pthread_cond_wait(&c->work, &c->lock);
		if (c->nwhole) /* idle while a whole fetch runs (whole_fetch_idle_ns) */
			c->st.whole_fetch_idle_ns += mcfs_now_ns() - MCFS_MAX(t0, c->whole_t0);
		if (c->stopping)
			break;
		b = cache_list_first(&c->jobs);
		cache_list_del(&c->jobs, b);
		b->queued = false;
		c->inflight++;
		pthread_mutex_unlock(&c->lock);

		t0 = mcfs_now_ns();
		rc = fetch(c, b, &bytes, &from_tier);

		pthread_mutex_lock(&c->lock);
		c->st.fetch_busy_ns += mcfs_now_ns() - t0;
		if (rc == FETCH_PARKED) {
			/* b and the job's reference are the shared tier's until it
			 * hands them back (it may have already: b is not ours to touch) */
			c->inflight--;
			continue;
		}
		b->shared_resume = 0;
		b->shared_wait_until = 0;
		if (!from_tier) { /* fetches count store reads only */
			c->st.fetches++;
			note_latency(c, (double)(mcfs_now_ns() - t0) / 1e9);
		}
		behind = false;
		if (b->extending) {
			/* A block an extension makes whole is written behind as
			 * one fetched whole is: else the disk tier never holds it. */
			behind = end_extension(c, b, rc, bytes) && cache_tier_wants(c, b);
		} else if (rc == 0) {
			b->state = SLOT_READY;
			cache_pages_set(b, from_tier ? 0 : b->vlo, from_tier ? b->len : b->vhi);
			c->st.fetched_bytes += bytes;
			/* Write-behind of a whole block to the tiers that lack it
			 * (b->fill says where it came from): the writers hold a
			 * reference (the slot's bytes stay put) until cache_disk_done(). */
			behind = cache_tier_wants(c, b);
		} else {
			c->st.fetch_errors++;
			cache_hash_remove(c, b);
			cache_drop_prefetched(c, b);
			b->state = SLOT_ERROR;
			b->err = rc;
		}
		if (b->warm) {
			b->warm = false;
			c->warm_jobs--;
		}
		if (b->bg_job) {
			b->bg_job = false;
			cache_budget_put(&c->budget, CACHE_CLAIM_PREFETCH);
		}
		if (behind) {
			b->refs++;
			(void)cache_budget_take(&c->budget, CACHE_CLAIM_BEHIND); /* never refused */
			b->behind_pending = true;
		}
		pthread_cond_broadcast(&c->loaded);
		if (behind) {
			pthread_mutex_unlock(&c->lock);
			cache_tier_behind(c, b); /* tiers.c; takes the extra reference */
			pthread_mutex_lock(&c->lock);
			/* queued to the writers, or owed: cache_block_settle() waits for this */
			b->behind_pending = false;
			pthread_cond_broadcast(&c->loaded);
		}
		cache_unref(c, b); /* the job's reference: b stays put until here */
		/* In flight until its write-behind is queued: "no fetch in flight and
		 * nothing queued" then means every block is written or on its way. */
		c->inflight--;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

void cache_block_resume(struct cache *c, struct cache_block *b, int resume, uint64_t wait_until)
{
	pthread_mutex_lock(&c->lock);
	b->shared_resume = (unsigned char)resume;
	b->shared_wait_until = wait_until;
	cache_enqueue(c, b, true);
	pthread_mutex_unlock(&c->lock);
}
