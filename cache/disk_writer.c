/*
 * disk_writer.c - write-behind: the thread that puts fetched blocks on disk,
 * and takes evicted ones off it, with helpers for the writes themselves.
 *
 * The fetch path queues a job (key, the RAM slot's bytes, a cookie) and goes
 * on; the caller keeps the bytes pinned until done(cookie). One thread,
 * "mcfs-diskwr", owns its own io_uring and runs batches of up to WB_BATCH
 * jobs:
 *
 *   1. under the lock, give each job a slot: a free one, else the least
 *      recently used VALID slot nobody reads or pins (its key leaves the hash
 *      now: the victim);
 *   2. commit the deletion of the victims' index entries (one transaction),
 *      then punch their bytes out of their version files, and unlink a file
 *      left with no block;
 *   3. per job: fallocate the block's range of its version file, hash the
 *      bytes (XXH3-64), write them at the block's offset (O_DIRECT, 1 MiB
 *      pieces in flight together). The jobs of a batch are written at once
 *      by the writer and disk_writers - 1 helper threads (each with its own
 *      ring): one thread hashing and copying paces a fast disk, and the
 *      page cache (disk_direct=false) more so;
 *   4. under the lock, mark the written slots VALID (readers may use them:
 *      the bytes are there and the checksum is known);
 *   5. commit their index entries, plus the use times of blocks read since
 *      the last batch, in one transaction; then call done() for each job.
 *
 * Between batches it punches the blocks other threads dropped (a failed
 * checksum, `mcfs evict`) after their entries' deletion was committed. Only
 * this thread punches and unlinks version files, and never during step 3
 * (the only time helpers create and write them), so a file is never
 * unlinked under a block being written into it.
 *
 * A kill between any two steps leaves only entries whose bytes were fully
 * written before the entry was committed; the start-up sweep (disk.c)
 * punches what no entry claims. The read-side checksum covers the cases the
 * file system itself may tear (power loss without O_DSYNC).
 *
 * ENOSPC from fallocate, a write or LMDB turns write-behind off for the
 * rest of the mount with one log line: the cache keeps working from RAM
 * (and the disk blocks already indexed). The thread also syncs LMDB about
 * once a second when something was committed (meta.h: NOSYNC).
 */
#define _GNU_SOURCE
#include "disk_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define WB_BATCH 16		       /* jobs per batch: one index commit per up to 128 MiB */
#define WB_RING_DEPTH 64	       /* 8 MiB blocks in 1 MiB pieces: 8 in flight */
#define SYNC_INTERVAL_NS 1000000000ull /* LMDB flush at most once a second */

struct batch {
	struct djob jobs[WB_BATCH];
	uint32_t slot[WB_BATCH]; /* DNIL: skipped */
	int rc[WB_BATCH];
	uint64_t csum[WB_BATCH];
	struct cache_meta_key dels[WB_BATCH];
	size_t n, ndel;
};

/* Takes a slot for @k; returns DNIL if none can be had. Lock held. */
static uint32_t take_slot(struct cache_disk *d, struct batch *b)
{
	struct dslot *head = &d->slots[d->nslots], *s;
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	if (d->nfree)
		return d->free_stack[--d->nfree];
	i = head->next; /* least recently used; LRU holds only VALID, unread slots */
	if (i == d->nslots)
		return DNIL;
	s = &d->slots[i];
	cache_disk_lru_del(d, i);
	cache_disk_hash_remove(d, i);
	b->dels[b->ndel++] = s->key;
	d->st.slots_used--;
	d->st.bytes_used -= s->len;
	d->st.evictions++;
	return i;
}

/* Step 1: moves up to WB_BATCH jobs from the queue into @b, with slots. Lock held. */
static void take_jobs(struct cache_disk *d, struct batch *b)
{
	struct dslot *s;
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	b->n = b->ndel = 0;
	while (d->qlen && b->n < WB_BATCH) {
		b->jobs[b->n] = d->q[d->qhead];
		d->qhead = (d->qhead + 1) % d->qmax;
		d->qlen--;
		d->writing++;
		if (cache_disk_find(d, &b->jobs[b->n].key) != DNIL) {
			i = DNIL; /* queued twice (refetched meanwhile): written once */
		} else {
			i = d->full ? DNIL : take_slot(d, b);
			if (i == DNIL)
				d->st.write_drops++;
		}
		if (i != DNIL && cache_disk_file_get(d, &b->jobs[b->n].key) < 0) {
			d->free_stack[d->nfree++] = i; /* out of memory: not written */
			d->st.write_drops++;
			i = DNIL;
		}
		if (i != DNIL) {
			s = &d->slots[i];
			s->key = b->jobs[b->n].key;
			s->state = DS_WRITING;
			s->len = b->jobs[b->n].len;
			cache_disk_hash_insert(d, i);
		}
		b->slot[b->n] = i;
		b->rc[b->n] = 0;
		b->n++;
	}
	pthread_cond_broadcast(&d->drained); /* room in the queue (cache_disk_write) */
}

/* Logs the first ENOSPC and stops write-behind; @why: what is full (NULL:
 * the cache filesystem). No lock held. */
static void went_full(struct cache_disk *d, const char *what, const char *why)
{
	bool first;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	pthread_mutex_lock(&d->lock);
	first = !d->full;
	d->full = true;
	pthread_mutex_unlock(&d->lock);
	if (first)
		MCFS_ERR("disk tier %s: %s: %s; continuing RAM-only (blocks already on disk are "
			 "still served)",
			 d->path, what, why ? why : "no space left on the cache filesystem");
}

/* Step 3 for one job. No lock held. */
static int write_one(struct cache_disk *d, struct io_uring *ring, struct batch *b, size_t j)
{
	const struct cache_meta_key *k = &b->jobs[j].key;
	uint64_t len =
	    (b->jobs[j].len + CACHE_DISK_ALIGN - 1) / CACHE_DISK_ALIGN * CACHE_DISK_ALIGN;
	uint64_t off = cache_disk_offset(d, k);
	char p[sizeof(d->path) + 64];
	int rc = 0, fd;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	cache_disk_file_name(d, k, p, sizeof(p));
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | (d->direct ? O_DIRECT : 0), 0600);
	if (fd < 0)
		rc = -errno;
	if (rc == 0 && fallocate(fd, 0, (off_t)off, (off_t)len) < 0 && errno != EOPNOTSUPP)
		rc = -errno;
	if (rc == 0) {
		b->csum[j] = XXH3_64bits(b->jobs[j].data, b->jobs[j].len);
		rc = cache_disk_rw(d, ring, true, fd, off, (char *)b->jobs[j].data, b->jobs[j].len);
	}
	if (fd >= 0)
		close(fd);
	if (rc == -ENOSPC || rc == -EDQUOT)
		went_full(d, "writing a block", NULL);
	else if (rc < 0)
		MCFS_ERR("disk tier %s: writing a block at offset %llu: %s", p,
			 (unsigned long long)off, strerror(-rc));
	return rc;
}

/*
 * Step 3 for the jobs of @b: each thread that finds the batch (the writer,
 * and the helpers while it is posted) takes its next job. Returns when the
 * last job is written. No lock held.
 */
static void write_batch(struct cache_disk *d, struct io_uring *ring, struct batch *b)
{
	size_t j;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	pthread_mutex_lock(&d->lock);
	d->wb_batch = b;
	d->wb_next = 0;
	d->wb_left = b->n;
	if (d->nwriters > 1)
		pthread_cond_broadcast(&d->wb_go);
	while (d->wb_next < b->n) {
		j = d->wb_next++;
		pthread_mutex_unlock(&d->lock);
		if (b->slot[j] != DNIL)
			b->rc[j] = write_one(d, ring, b, j);
		pthread_mutex_lock(&d->lock);
		d->wb_left--;
	}
	/* Sleeps on d->wb_done (d->lock) until the helpers wrote the jobs they took. */
	while (d->wb_left)
		pthread_cond_wait(&d->wb_done, &d->lock);
	d->wb_batch = NULL;
	pthread_mutex_unlock(&d->lock);
}

/* A helper of step 3, with an io_uring of its own, until wb_quit. */
static void *write_helper(void *arg)
{
	struct cache_disk *d = arg;
	struct io_uring ring;
	struct batch *b;
	bool ring_ok;
	size_t j;
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-diskwr");
	ring_ok = io_uring_queue_init(WB_RING_DEPTH, &ring, 0) == 0;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		/* Sleeps on d->wb_go (d->lock) until a batch has a job to take. A
		 * helper without a ring never takes one. */
		while (!d->wb_quit &&
		       (!ring_ok || !d->wb_batch || d->wb_next >= ((struct batch *)d->wb_batch)->n))
			pthread_cond_wait(&d->wb_go, &d->lock);
		if (d->wb_quit)
			break;
		b = d->wb_batch;
		j = d->wb_next++;
		pthread_mutex_unlock(&d->lock);
		rc = b->slot[j] != DNIL ? write_one(d, &ring, b, j) : 0;
		pthread_mutex_lock(&d->lock);
		if (b->slot[j] != DNIL)
			b->rc[j] = rc;
		if (--d->wb_left == 0)
			pthread_cond_signal(&d->wb_done);
	}
	pthread_mutex_unlock(&d->lock);
	if (ring_ok)
		io_uring_queue_exit(&ring);
	return NULL;
}

/*
 * Takes block @k (out of the hash, its entry deleted) off the disk: punches
 * its range unless a new block of the same key was written meanwhile, and
 * unlinks its version file when no block is left in it. No lock held.
 */
static void release(struct cache_disk *d, const struct cache_meta_key *k)
{
	char p[sizeof(d->path) + 64];
	bool punch, gone;
	int fd;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	pthread_mutex_lock(&d->lock);
	punch = cache_disk_find(d, k) == DNIL;
	pthread_mutex_unlock(&d->lock);
	cache_disk_file_name(d, k, p, sizeof(p));
	fd = punch ? open(p, O_WRONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)cache_disk_offset(d, k), (off_t)d->bs) < 0)
			MCFS_WARN("disk tier %s: punching a block at offset %llu: %s (the "
				  "next start-up tries again)",
				  p, (unsigned long long)cache_disk_offset(d, k), strerror(errno));
		close(fd);
	}
	pthread_mutex_lock(&d->lock);
	gone = cache_disk_file_put(d, k);
	pthread_mutex_unlock(&d->lock);
	if (gone && unlink(p) < 0 && errno != ENOENT)
		MCFS_WARN("disk tier %s: unlink: %s", p, strerror(errno));
}

/* Punches the DEAD slots other threads queued, then frees them. No lock held. */
static void punch_dead(struct cache_disk *d)
{
	struct cache_meta_key k;
	uint32_t i, next;

	pthread_mutex_lock(&d->lock);
	i = d->punch;
	d->punch = DNIL;
	d->punching++;
	pthread_mutex_unlock(&d->lock);
	for (; i != DNIL; i = next) {
		pthread_mutex_lock(&d->lock);
		k = d->slots[i].key;
		next = d->slots[i].next;
		pthread_mutex_unlock(&d->lock);
		release(d, &k);
		pthread_mutex_lock(&d->lock);
		d->slots[i].state = DS_FREE;
		d->free_stack[d->nfree++] = i;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	d->punching--;
	pthread_cond_broadcast(&d->drained);
	pthread_mutex_unlock(&d->lock);
}

/* Steps 4 and 5: publishes the batch, commits its entries and dirty use times. */
static void publish(struct cache_disk *d, struct batch *b)
{
	struct cache_meta_key *keys;
	struct cache_meta_block *vals;
	size_t j, n = 0, cap, fresh = 0;
	char why[256];
	uint32_t i;
	int rc;

	pthread_mutex_lock(&d->lock);
	cap = b->n + (d->ndirty ? d->nslots : 0);
	keys = malloc((cap ? cap : 1) * sizeof(*keys));
	vals = malloc((cap ? cap : 1) * sizeof(*vals));
	for (j = 0; j < b->n; j++) {
		i = b->slot[j];
		if (i == DNIL)
			continue;
		if (b->rc[j] < 0 || !keys || !vals) {
			d->st.io_errors += b->rc[j] < 0 && b->rc[j] != -ENOSPC;
			cache_disk_hash_remove(d, i);
			d->slots[i].state = DS_DEAD; /* no entry: punched, then free */
			cache_disk_punch_later(d, i);
			continue;
		}
		d->slots[i].state = DS_VALID;
		d->slots[i].csum = b->csum[j];
		d->slots[i].last_use = (uint64_t)cache_meta_now();
		d->slots[i].dirty = true;
		d->ndirty = true;
		cache_disk_lru_push(d, i);
		d->st.slots_used++;
		d->st.bytes_used += b->jobs[j].len;
		d->st.writes++;
		d->st.written_bytes += b->jobs[j].len;
		fresh++;
	}
	for (i = 0; keys && vals && d->ndirty && i < d->nslots; i++) {
		struct dslot *s = &d->slots[i];

		if (!s->dirty || s->state != DS_VALID)
			continue;
		s->dirty = false;
		keys[n] = s->key;
		/* slot: informational (the block's place is its key's) */
		vals[n] = (struct cache_meta_block){
		    .slot = i, .len = s->len, .csum = s->csum, .last_use = s->last_use};
		n++;
	}
	if (keys && vals)
		d->ndirty = false;
	pthread_mutex_unlock(&d->lock);
	rc = n ? cache_meta_blocks_update(d->meta, NULL, 0, keys, vals, n) : 0;
	if (rc == -ENOSPC)
		went_full(d, "recording blocks in the index",
			  cache_meta_strerror(d->meta, rc, why, sizeof(why)));
	else if (rc < 0)
		MCFS_ERR("disk tier: recording %zu blocks in the index: %s", n,
			 cache_meta_strerror(d->meta, rc, why, sizeof(why)));
	if (rc >= 0 && fresh) { /* the entries of this batch's blocks are committed */
		pthread_mutex_lock(&d->lock);
		d->st.indexed += fresh;
		pthread_mutex_unlock(&d->lock);
	}
	/* On failure the blocks stay usable until restart, then read as misses. */
	free(keys);
	free(vals);
}

/* Runs one batch (steps 2-5). No lock held. */
static void run_batch(struct cache_disk *d, struct io_uring *ring, struct batch *b)
{
	char why[256];
	size_t j;
	int rc = 0;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	if (b->ndel) {
		rc = cache_meta_blocks_update(d->meta, b->dels, b->ndel, NULL, NULL, 0);
		if (rc == -ENOSPC)
			went_full(d, "evicting from the index",
				  cache_meta_strerror(d->meta, rc, why, sizeof(why)));
		else if (rc < 0)
			MCFS_ERR("disk tier: evicting %zu blocks from the index: %s", b->ndel,
				 cache_meta_strerror(d->meta, rc, why, sizeof(why)));
	}
	/* Entries gone: the victims' bytes may go. (If the deletion failed they
	 * stay, entries and bytes, until the next start-up reads them.) */
	for (j = 0; rc == 0 && j < b->ndel; j++)
		release(d, &b->dels[j]);
	for (j = 0; j < b->n; j++)
		if (rc < 0 && b->slot[j] != DNIL)
			b->rc[j] = rc;
	if (rc == 0)
		write_batch(d, ring, b);
	publish(d, b);
	/* The caller's bytes are free only now that the written blocks read as
	 * held (VALID): a caller that drops its RAM copy at done() never finds
	 * a block in neither place (cache_file_complete()). */
	for (j = 0; j < b->n; j++)
		d->done(d->ctx, b->jobs[j].arg);
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(ns / 1000000000);
	ts->tv_nsec += (long)(ns % 1000000000);
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

void *cache_disk_writer(void *arg)
{
	struct cache_disk *d = arg;
	struct io_uring ring;
	struct batch b = {0}; /* one batch at a time, on this thread's stack (about 2 KiB) */
	pthread_t *helpers;
	unsigned h, nhelpers;
	uint64_t last_sync = mcfs_now_ns();
	bool unsynced = false, ring_ok;
	struct timespec ts;
	char why[256];
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-diskwr");
	ring_ok = io_uring_queue_init(WB_RING_DEPTH, &ring, 0) == 0;
	if (!ring_ok)
		MCFS_ERR("disk tier %s: cannot set up the writer's io_uring: write-behind off",
			 d->path);
	helpers = calloc(d->nwriters, sizeof(*helpers));
	for (h = 0; ring_ok && helpers && h + 1 < d->nwriters; h++)
		if (pthread_create(&helpers[h], NULL, write_helper, d) != 0)
			break;
	nhelpers = h;
	if (ring_ok && nhelpers + 1 < d->nwriters)
		MCFS_WARN("disk tier %s: %u of %u writer threads started", d->path, nhelpers + 1,
			  d->nwriters);
	pthread_mutex_lock(&d->lock);
	if (!ring_ok)
		d->full = true; /* cache_disk_write() then refuses every job */
	for (;;) {
		/* Sleeps on d->work (d->lock) until a job is queued, stopping, or a
		 * second passed with use times to persist. */
		while (!d->stopping && d->qlen == 0 && !d->ndirty && !unsynced && d->punch == DNIL)
			pthread_cond_wait(&d->work, &d->lock);
		if (d->punch != DNIL) {
			pthread_mutex_unlock(&d->lock);
			punch_dead(d);
			pthread_mutex_lock(&d->lock);
		}
		if (!d->stopping && d->qlen == 0 && d->punch == DNIL) {
			deadline_in(&ts, SYNC_INTERVAL_NS);
			pthread_cond_timedwait(&d->work, &d->lock, &ts);
		}
		if (d->qlen) {
			/* Without a ring d->full is set: the jobs queued before it get
			 * no slot, so nothing touches the ring, and done() is called. */
			take_jobs(d, &b);
			pthread_mutex_unlock(&d->lock);
			run_batch(d, ring_ok ? &ring : NULL, &b);
			unsynced = true;
			pthread_mutex_lock(&d->lock);
			d->writing -= (unsigned)b.n;
			d->finished += b.n;
			pthread_cond_broadcast(&d->drained);
		} else if (d->ndirty) {
			b.n = b.ndel = 0;
			pthread_mutex_unlock(&d->lock);
			publish(d, &b);
			unsynced = true;
			pthread_mutex_lock(&d->lock);
		}
		if (unsynced && (d->stopping || mcfs_now_ns() - last_sync >= SYNC_INTERVAL_NS)) {
			pthread_mutex_unlock(&d->lock);
			rc = cache_meta_sync(d->meta);
			if (rc < 0)
				MCFS_WARN("disk tier: syncing the index failed: %s",
					  cache_meta_strerror(d->meta, rc, why, sizeof(why)));
			last_sync = mcfs_now_ns();
			unsynced = false;
			pthread_mutex_lock(&d->lock);
		}
		if (d->stopping && d->qlen == 0 && !d->ndirty && d->punch == DNIL)
			break;
	}
	d->wb_quit = true;
	pthread_cond_broadcast(&d->wb_go);
	pthread_mutex_unlock(&d->lock);
	for (h = 0; h < nhelpers; h++)
		pthread_join(helpers[h], NULL);
	free(helpers);
	if (ring_ok)
		io_uring_queue_exit(&ring);
	return NULL;
}

int cache_disk_write(struct cache_disk *d, const struct cache_meta_key *k, const char *data,
		     uint32_t len, void *arg, bool wait)
{
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	if (d->full || d->stopping) {
		rc = -ENOSPC;
	} else if (cache_disk_find(d, k) != DNIL) {
		rc = -EEXIST;
	} else if (d->qlen == d->qmax && !wait) {
		rc = -EAGAIN; /* the caller keeps the block owed (tiers.c) */
	} else {
		/* Sleeps on d->drained (d->lock) until the writer took jobs off a
		 * full queue: only a caller that asked to wait (a flush). */
		while (d->qlen == d->qmax && !d->full && !d->stopping)
			pthread_cond_wait(&d->drained, &d->lock);
	}
	if (rc == 0 && (d->full || d->stopping)) {
		rc = -ENOSPC;
	} else if (rc == 0 && cache_disk_find(d, k) != DNIL) {
		rc = -EEXIST;
	} else if (rc == 0) {
		d->q[(d->qhead + d->qlen) % d->qmax] =
		    (struct djob){.key = *k, .data = data, .len = len, .arg = arg};
		d->qlen++;
		d->queued_total++;
		pthread_cond_signal(&d->work);
	}
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void cache_disk_flush(struct cache_disk *d)
{
	uint64_t target;

	pthread_mutex_lock(&d->lock);
	/* Sleeps on d->drained (d->lock) until every job queued before this call
	 * is written: jobs queued meanwhile by busy readers do not keep it waiting. */
	target = d->queued_total;
	while (d->finished < target && !d->stopping)
		pthread_cond_wait(&d->drained, &d->lock);
	pthread_mutex_unlock(&d->lock);
}
