/*
 * disk_writer.c - write-behind: the threads that put fetched blocks on disk,
 * and take evicted ones off it.
 *
 * The fetch path queues a job (key, the RAM slot's bytes, a cookie) and goes
 * on; the caller keeps the bytes pinned until done(cookie). One thread,
 * "mcfs-diskwr", the writer, moves jobs off the queue into a window of
 * WB_WINDOW, and disk_writers writer threads (each with its own io_uring)
 * write them:
 *
 *   1. the writer, under the lock, gives each job a slot: a free one, else
 *      the least recently used VALID slot nobody reads or pins (its key
 *      leaves the hash now: the victim);
 *   2. it commits the deletion of the victims' index entries (one
 *      transaction), then punches their bytes out of their version files,
 *      and unlinks a file left with no block; the jobs are then READY;
 *   3. a writer thread takes the oldest READY job whose version file fewer
 *      than per_file() threads write: fallocates the block's range of its
 *      version file, hashes the bytes (XXH3-64) and writes them at the
 *      block's offset (O_DIRECT, 1 MiB pieces in flight together). Each job
 *      goes on by itself: no batch waits for its slowest file, so the
 *      blocks of several files are written side by side while one file's
 *      writes take its lock in turn (docs/benchmarks.md, "Several files
 *      side by side");
 *   4. the writer, under the lock, marks the written slots VALID (readers
 *      may use them: the bytes are there and the checksum is known);
 *   5. it commits their index entries, plus the use times of blocks read
 *      since the last commit, in one transaction; then calls done() for
 *      each job.
 *
 * The writer also punches the blocks other threads dropped (a failed
 * checksum, `mcfs evict`) after their entries' deletion was committed. Only
 * the writer punches and unlinks version files, and only it takes jobs: a
 * job's slot counts in its version file's references (struct dfile) from
 * step 1 on, so a file is unlinked only when no job is written into it,
 * and no job is taken between a file's last reference going and its
 * unlink.
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

#define WB_RING_DEPTH 64	       /* 8 MiB blocks in 1 MiB pieces: 8 in flight */
#define SYNC_INTERVAL_NS 1000000000ull /* LMDB flush at most once a second */
/* Writer threads writing into one version file at once, buffered. One
 * file's buffered writes take its inode's lock in turn: a second writer
 * there adds little, while a writer on another file adds a file's worth
 * (docs/benchmarks.md, "One file's page cache fills at 2.7-4.2 GB/s"). */
#define WB_PER_FILE 2

/* Jobs to publish, or just taken: window indices. */
struct batch {
	unsigned idx[WB_WINDOW];
	struct cache_meta_key dels[WB_WINDOW];
	size_t n, ndel;
};

/* Jobs in the window at most: no more than the queue holds, so that the
 * blocks the writer holds in RAM (queue and window) stay within twice the
 * queue, which tiers.c sizes to the RAM tier. */
static unsigned wb_max(const struct cache_disk *d)
{
	return MCFS_MIN(WB_WINDOW, d->qmax);
}

/* Writer threads one version file may have. O_DIRECT writes do not copy
 * into the file's pages, so they may have half the writers (a disk wants
 * several writes in flight); still not all, so that one slow file leaves
 * the others writers. */
static unsigned per_file(const struct cache_disk *d)
{
	return d->direct ? MCFS_MAX(WB_PER_FILE, d->nwriters / 2) : WB_PER_FILE;
}

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

/* Step 1: moves queued jobs into free window entries (TAKEN), with slots;
 * @b gets their indices and the victims. Lock held. */
static void take_jobs(struct cache_disk *d, struct batch *b)
{
	struct wjob *w;
	struct dslot *s;
	unsigned e;
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	b->n = b->ndel = 0;
	for (e = 0; e < WB_WINDOW && d->qlen && d->wb_busy < wb_max(d); e++) {
		w = &d->wb[e];
		if (w->state != WJ_FREE)
			continue;
		w->job = d->q[d->qhead];
		d->qhead = (d->qhead + 1) % d->qmax;
		d->qlen--;
		d->writing++;
		d->wb_busy++;
		if (cache_disk_find(d, &w->job.key) != DNIL) {
			i = DNIL; /* queued twice (refetched meanwhile): written once */
		} else {
			i = d->full ? DNIL : take_slot(d, b);
			if (i == DNIL)
				d->st.write_drops++;
		}
		if (i != DNIL && cache_disk_file_get(d, &w->job.key) < 0) {
			d->free_stack[d->nfree++] = i; /* out of memory: not written */
			d->st.write_drops++;
			i = DNIL;
		}
		if (i != DNIL) {
			s = &d->slots[i];
			s->key = w->job.key;
			s->state = DS_WRITING;
			s->len = w->job.len;
			cache_disk_hash_insert(d, i);
		}
		w->slot = i;
		w->file = i != DNIL ? cache_disk_file(d, &w->job.key) : NULL;
		w->seq = d->wb_seq++;
		w->rc = 0;
		w->state = WJ_TAKEN;
		b->idx[b->n++] = e;
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

/* Step 3 for one job: fallocate, hash, write. No lock held. */
static int write_one(struct cache_disk *d, struct io_uring *ring, struct wjob *w)
{
	const struct cache_meta_key *k = &w->job.key;
	uint64_t len = (w->job.len + CACHE_DISK_ALIGN - 1) / CACHE_DISK_ALIGN * CACHE_DISK_ALIGN;
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
		uint64_t t0 = mcfs_now_ns();

		w->csum = XXH3_64bits(w->job.data, w->job.len);
		w->hash_ns = mcfs_now_ns() - t0;
		rc = cache_disk_rw(d, ring, true, fd, off, (char *)w->job.data, w->job.len);
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

/* The oldest READY job whose version file has room for one more writer
 * thread, or NULL; *@capped: some READY job had none. Lock held. */
static struct wjob *next_ready(struct cache_disk *d, bool *capped)
{
	struct wjob *w, *best = NULL;
	unsigned e;

	MCFS_ASSERT_HELD(&d->lock);
	*capped = false;
	for (e = 0; e < WB_WINDOW; e++) {
		w = &d->wb[e];
		if (w->state != WJ_READY)
			continue;
		if (w->file->writing >= per_file(d))
			*capped = true;
		else if (!best || w->seq < best->seq)
			best = w;
	}
	return best;
}

/*
 * A writer thread, with an io_uring of its own, until wb_quit: writes the
 * window's READY jobs, oldest first, skipping those of a version file that
 * per_file() threads write already, so that a queue of mostly one file
 * does not hold up the jobs of the others behind that file's lock.
 */
static void *write_thread(void *arg)
{
	struct cache_disk *d = arg;
	struct io_uring ring;
	struct wjob *w = NULL;
	bool ring_ok, capped = false;
	uint64_t t0;
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-diskwr");
	ring_ok = io_uring_queue_init(WB_RING_DEPTH, &ring, 0) == 0;
	pthread_mutex_lock(&d->lock);
	d->wb_started++;
	d->wb_rings += ring_ok;
	pthread_cond_broadcast(&d->work); /* the writer waits for every thread's start */
	for (;;) {
		/* Sleeps on d->wb_go (d->lock) until a job it may write is READY,
		 * or quitting. A thread without a ring never takes one. */
		while (!d->wb_quit && (!ring_ok || !(w = next_ready(d, &capped)))) {
			d->st.writer_capped += capped;
			pthread_cond_wait(&d->wb_go, &d->lock);
		}
		if (d->wb_quit)
			break;
		w->state = WJ_WRITING;
		w->file->writing++;
		w->hash_ns = 0;
		pthread_mutex_unlock(&d->lock);
		t0 = mcfs_now_ns();
		rc = write_one(d, &ring, w);
		pthread_mutex_lock(&d->lock);
		d->st.writer_busy_ns += mcfs_now_ns() - t0;
		d->st.writer_hash_ns += w->hash_ns;
		w->file->writing--;
		w->rc = rc;
		w->state = WJ_WRITTEN;
		d->wb_written++;
		pthread_cond_signal(&d->work);	   /* the writer publishes it */
		pthread_cond_broadcast(&d->wb_go); /* its file has room for another */
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

/* Steps 4 and 5: publishes the WRITTEN jobs of @b (none: only the dirty use
 * times), commits their entries and the dirty use times. No lock held. */
static void publish(struct cache_disk *d, struct batch *b)
{
	struct wjob *w;
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
		w = &d->wb[b->idx[j]];
		i = w->slot;
		if (i == DNIL)
			continue;
		if (w->rc < 0 || !keys || !vals) {
			d->st.io_errors += w->rc < 0 && w->rc != -ENOSPC;
			cache_disk_hash_remove(d, i);
			d->slots[i].state = DS_DEAD; /* no entry: punched, then free */
			cache_disk_punch_later(d, i);
			continue;
		}
		d->slots[i].state = DS_VALID;
		d->slots[i].csum = w->csum;
		d->slots[i].last_use = (uint64_t)cache_meta_now();
		d->slots[i].dirty = true;
		d->ndirty = true;
		cache_disk_lru_push(d, i);
		d->st.slots_used++;
		d->st.bytes_used += w->job.len;
		d->st.writes++;
		d->st.written_bytes += w->job.len;
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

/*
 * Step 2 for the jobs just taken (@b): commits the deletion of their
 * victims' entries, punches the victims' bytes, then hands the jobs to the
 * writer threads (READY), or straight to publish (WRITTEN) those with no
 * slot or whose victims could not be deleted. No lock held.
 */
static void start_jobs(struct cache_disk *d, struct batch *b)
{
	struct wjob *w;
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
	pthread_mutex_lock(&d->lock);
	for (j = 0; j < b->n; j++) {
		w = &d->wb[b->idx[j]];
		if (w->slot != DNIL && rc == 0) {
			w->state = WJ_READY;
			continue;
		}
		if (w->slot != DNIL)
			w->rc = rc;
		w->state = WJ_WRITTEN;
		d->wb_written++;
	}
	pthread_cond_broadcast(&d->wb_go);
	pthread_mutex_unlock(&d->lock);
}

/* Steps 4 and 5 for every WRITTEN job: publishes them, then calls done()
 * and frees their window entries. Returns how many. No lock held. */
static size_t finish_jobs(struct cache_disk *d, struct batch *b)
{
	size_t j;
	unsigned e;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	pthread_mutex_lock(&d->lock);
	b->n = b->ndel = 0;
	for (e = 0; e < WB_WINDOW && d->wb_written; e++)
		if (d->wb[e].state == WJ_WRITTEN) {
			b->idx[b->n++] = e;
			d->wb_written--;
		}
	pthread_mutex_unlock(&d->lock);
	if (!b->n)
		return 0;
	publish(d, b);
	/* The caller's bytes are free only now that the written blocks read as
	 * held (VALID): a caller that drops its RAM copy at done() never finds
	 * a block in neither place (cache_file_complete()). */
	for (j = 0; j < b->n; j++)
		d->done(d->ctx, d->wb[b->idx[j]].job.arg);
	pthread_mutex_lock(&d->lock);
	for (j = 0; j < b->n; j++)
		d->wb[b->idx[j]].state = WJ_FREE;
	d->wb_busy -= (unsigned)b->n;
	d->writing -= (unsigned)b->n;
	d->finished += b->n;
	pthread_cond_broadcast(&d->drained);
	pthread_mutex_unlock(&d->lock);
	return b->n;
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
	struct batch batch, *b = &batch; /* on this thread's stack (about 1.2 KiB) */
	pthread_t *threads;
	unsigned h, nthreads;
	uint64_t last_sync = mcfs_now_ns(), t0;
	bool unsynced = false, did;
	struct timespec ts;
	char why[256];
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-diskwr");
	threads = calloc(d->nwriters, sizeof(*threads));
	for (h = 0; threads && h < d->nwriters; h++)
		if (pthread_create(&threads[h], NULL, write_thread, d) != 0)
			break;
	nthreads = h;
	pthread_mutex_lock(&d->lock);
	/* Sleeps on d->work (d->lock) until every writer thread has its ring or not. */
	while (d->wb_started < nthreads)
		pthread_cond_wait(&d->work, &d->lock);
	if (!d->wb_rings) {
		MCFS_ERR("disk tier %s: cannot start a writer thread with an io_uring: "
			 "write-behind off",
			 d->path);
		d->full = true; /* cache_disk_write() then refuses every job */
	} else if (d->wb_rings < d->nwriters) {
		MCFS_WARN("disk tier %s: %u of %u writer threads started", d->path, d->wb_rings,
			  d->nwriters);
	}
	for (;;) {
		/* Sleeps on d->work (d->lock) until a job is queued (with room in the
		 * window) or written, blocks to punch, or stopping with no job in
		 * flight; with use times to persist or an index to sync, until the
		 * next sync at the latest, so that they go together about once a
		 * second. */
		while (!(d->qlen && d->wb_busy < wb_max(d)) && !d->wb_written && d->punch == DNIL &&
		       !(d->stopping && !d->wb_busy)) {
			uint64_t since = mcfs_now_ns() - last_sync;

			if (!unsynced && !d->ndirty) {
				pthread_cond_wait(&d->work, &d->lock);
				continue;
			}
			if (since >= SYNC_INTERVAL_NS)
				break;
			deadline_in(&ts, SYNC_INTERVAL_NS - since);
			pthread_cond_timedwait(&d->work, &d->lock, &ts);
		}
		t0 = mcfs_now_ns();
		if (d->punch != DNIL) {
			pthread_mutex_unlock(&d->lock);
			punch_dead(d);
			pthread_mutex_lock(&d->lock);
		}
		did = false;
		if (d->qlen && d->wb_busy < wb_max(d)) {
			/* Without a ring d->full is set: the jobs queued before it get
			 * no slot, so no thread writes them, and done() is called. */
			take_jobs(d, b);
			pthread_mutex_unlock(&d->lock);
			start_jobs(d, b);
			pthread_mutex_lock(&d->lock);
			did = true;
		}
		if (d->wb_written) {
			pthread_mutex_unlock(&d->lock);
			finish_jobs(d, b);
			unsynced = true;
			pthread_mutex_lock(&d->lock);
			did = true;
		}
		if (!did && d->ndirty) {
			b->n = b->ndel = 0;
			pthread_mutex_unlock(&d->lock);
			publish(d, b);
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
		d->st.writer_own_ns += mcfs_now_ns() - t0;
		if (d->stopping && d->qlen == 0 && !d->wb_busy && !d->ndirty && d->punch == DNIL)
			break;
	}
	d->wb_quit = true;
	pthread_cond_broadcast(&d->wb_go);
	pthread_mutex_unlock(&d->lock);
	for (h = 0; h < nthreads; h++)
		pthread_join(threads[h], NULL);
	free(threads);
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
