/*
 * readahead.c - per-open-file sequential detection and a growing window.
 *
 * A stream remembers the block the reader was last in and how far ahead it
 * has asked the cache to fetch (ra_next). A read that lands in the block
 * read last, the next one, or anywhere inside the window already fetched is
 * sequential: the kernel's async readahead and a multithreaded FUSE session
 * reorder requests by a few MiB, and mmap faults read around the fault, so
 * "exactly the next offset" would misfire. On entering a new block the window
 * doubles (1, 2, 4 ... blocks) up to readahead_max, and the blocks up to
 * current + window are prefetched. A read elsewhere collapses the window to 0:
 * a random reader gets only the blocks it touches.
 *
 * The prefetches themselves are bounded by the cache's global budget
 * (prefetch_mem): when it is spent, cache_prefetch() says -EAGAIN and the
 * stream retries on the reader's next access (backpressure).
 *
 * Waste: a block the stream prefetched that was evicted before anyone read
 * it (its tally, blocks.c) says the reader cannot consume that far ahead
 * before eviction: a RAM tier too small for every reader's window, or a
 * random reader whose large reads (one 4 MiB read is four contiguous 1 MiB
 * FUSE requests) look like a stream for a moment. The stream then halves its
 * window and the ceiling it may grow to (cap), and doubles the contiguous run
 * it needs to call itself a stream again (min_run), so that reads of that
 * size stop opening a window. Each prefetched block that does get read
 * raises the ceiling by one again. A stream left with a ceiling of 0 fetches
 * only the pages it reads (the rest of a block is readahead too) and tries
 * one block every RA_PROBE_BLOCKS blocks. A stream whose prefetches are all
 * read keeps the ceiling at readahead_max and min_run at RA_MIN_RUN.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache.h"
#include "cache_readahead.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct cache_stream {
	struct cache *c;
	struct cache_file *f; /* reference held */
	pthread_mutex_t lock; /* guards the fields below; taken before c->lock (cache.h) */
	uint64_t last;	      /* block of the last access */
	uint64_t ra_next;     /* first block not yet asked for */
	unsigned window;      /* blocks; 0 = not sequential */
	unsigned max_window;  /* readahead_max / block_size */
	bool started;	      /* an access has been seen */
	bool random;	      /* the last access did not continue the stream */
	uint64_t next_off;    /* end of the furthest access of the current run */
	uint64_t run;	      /* bytes read contiguously (within RA_REORDER) so far */

	/* What became of its prefetches, and what it learnt (top of the file). */
	struct cache_ra_tally *tally; /* a reference */
	uint64_t unused_seen;	      /* tally->unused when last looked at */
	uint64_t used_seen;	      /* tally->used when last looked at */
	uint64_t min_run;	      /* contiguous bytes that make a stream mid-file */
	unsigned cap;		      /* the window's ceiling: max_window, less after waste */
	unsigned dry;		      /* blocks entered while streaming with cap 0 */
};

/* How far requests of one stream arrive out of order: the kernel's readahead
 * window (read_ahead_kb, 8 MiB by default) split over several FUSE threads. */
#define RA_REORDER (8ull << 20)
/* Contiguous bytes that make a stream of a reader that did not start at 0;
 * after waste, up to RA_MIN_RUN_MAX. */
#define RA_MIN_RUN (4ull << 20)
#define RA_MIN_RUN_MAX (64ull << 20)
/* A stream whose ceiling fell to 0 tries a window of 1 again after this many
 * blocks: the RAM tier may have room again. */
#define RA_PROBE_BLOCKS 8

int cache_stream_new(struct cache *c, struct cache_file *f, struct cache_stream **out)
{
	struct cache_stream *s = calloc(1, sizeof(*s));
	struct cache_attr attr = {.size = f->size};

	if (!s)
		return -ENOMEM;
	s->c = c;
	s->tally = calloc(1, sizeof(*s->tally));
	/* One more reference to the same identity. */
	snprintf(attr.version, sizeof(attr.version), "%s", f->version);
	if (!s->tally || cache_file_get(c, f->path, &attr, &s->f) < 0) {
		free(s->tally);
		free(s);
		return -ENOMEM;
	}
	s->tally->refs = 1;
	pthread_mutex_init(&s->lock, NULL);
	s->max_window = (unsigned)(c->cfg->readahead_max / c->bs);
	s->cap = s->max_window;
	s->min_run = RA_MIN_RUN;
	*out = s;
	return 0;
}

void cache_stream_free(struct cache_stream *s)
{
	if (!s)
		return;
	cache_file_put(s->c, s->f);
	cache_ra_tally_put(s->c, s->tally); /* its unread blocks may hold it longer */
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/*
 * Asks for blocks up to (not including) @end; stops at the first refusal.
 * Stream lock held (ra_next); takes the cache's lock inside cache_prefetch().
 */
static void fill_window(struct cache_stream *s, uint64_t end)
{
	MCFS_ASSERT_HELD(&s->lock);
	MCFS_ASSERT_NOT_HELD(&s->c->lock);
	if (end > s->f->nblocks)
		end = s->f->nblocks;
	while (s->ra_next < end) {
		if (cache_prefetch_for(s->c, s->f, s->ra_next, s->tally) == -EAGAIN)
			return; /* budget or RAM tier full: ask again on the next access */
		s->ra_next++;
	}
}

/*
 * Is [off, off+len) a continuation of the stream? Near the end of the last
 * access (the kernel's async readahead and a multithreaded session reorder
 * requests by a few MiB), or inside the window already fetched (mmap faults
 * read around the faulting page). Lock held.
 */
static bool continues(const struct cache_stream *s, uint64_t off)
{
	uint64_t blk = off >> s->c->bs_shift;

	MCFS_ASSERT_HELD(&s->lock);
	if (!s->started)
		return false;
	if (off + RA_REORDER >= s->next_off && off <= s->next_off + RA_REORDER)
		return true;
	return s->window > 0 && blk + 1 >= s->last && blk < s->ra_next;
}

/*
 * What became of this stream's prefetches since it last looked (its tally):
 * blocks evicted unread halve the window and its ceiling, double the run
 * that opens a window, and refill the window from the reader's block; blocks
 * read raise the ceiling by one each, up to max_window. See the top of the
 * file. Lock held.
 */
static void note_tally(struct cache_stream *s)
{
	uint64_t unused = atomic_load(&s->tally->unused), used = atomic_load(&s->tally->used);

	MCFS_ASSERT_HELD(&s->lock);
	if (unused != s->unused_seen) {
		/* a stream's own window, or (a reader that left) half the ceiling */
		s->cap = (s->window ? MCFS_MIN(s->cap, s->window) : s->cap) / 2;
		s->window = MCFS_MIN(s->window, s->cap);
		s->min_run = MCFS_MIN(s->min_run * 2, RA_MIN_RUN_MAX);
		s->ra_next = s->last + 1; /* what was asked for may be gone: ask again */
		s->dry = 0;
	} else if (used != s->used_seen) {
		s->cap = (unsigned)MCFS_MIN((uint64_t)s->cap + (used - s->used_seen),
					    (uint64_t)s->max_window);
	}
	s->unused_seen = unused;
	s->used_seen = used;
}

void cache_stream_access(struct cache_stream *s, uint64_t off, size_t len)
{
	uint64_t last_blk = (off + (len ? len - 1 : 0)) >> s->c->bs_shift;
	bool near, seq, grew = false;
	unsigned window;

	MCFS_ASSERT_NOT_HELD(&s->c->lock); /* the stream's lock comes first */
	pthread_mutex_lock(&s->lock);
	note_tally(s);
	near = continues(s, off);
	s->run = near ? s->run + len : len;
	/* Streaming: from the start of the file, or after min_run contiguous bytes.
	 * Two adjacent requests of one random read are not a stream. */
	seq = (!s->started && off == 0) || (near && (s->window > 0 || s->run >= s->min_run));
	if (!seq) {
		s->window = 0;
		s->ra_next = last_blk + 1;
	} else if (s->max_window == 0) {
		/* readahead off: classify only */
	} else if (s->window == 0 || last_blk > s->last) {
		if (s->cap == 0 && last_blk > s->last && ++s->dry >= RA_PROBE_BLOCKS) {
			s->cap = 1;
			s->dry = 0;
		}
		s->window = MCFS_MIN(s->window ? s->window * 2 : 1, s->cap);
		grew = s->window > 0;
	}
	/* Not streaming, or streaming with nothing to be read ahead (cap 0: its
	 * reader would not get to it before eviction): fetch only what is read,
	 * as the rest of the block is readahead too. But a first access proves
	 * nothing: it gets whole blocks (and single flight with other readers). */
	s->random = s->started && (!seq || (s->max_window > 0 && s->cap == 0));
	s->started = true;
	if (last_blk > s->last || !near)
		s->last = last_blk;
	if (!near || off + len > s->next_off)
		s->next_off = off + len;
	if (s->ra_next < last_blk + 1)
		s->ra_next = last_blk + 1;
	if (s->window)
		fill_window(s, last_blk + 1 + s->window);
	window = s->window;
	pthread_mutex_unlock(&s->lock);
	if (grew)
		cache_note_window(s->c, window);
}

unsigned cache_stream_window(struct cache_stream *s)
{
	unsigned w;

	pthread_mutex_lock(&s->lock);
	w = s->window;
	pthread_mutex_unlock(&s->lock);
	return w;
}

bool cache_stream_random(struct cache_stream *s)
{
	bool r;

	pthread_mutex_lock(&s->lock);
	r = s->random;
	pthread_mutex_unlock(&s->lock);
	return r;
}

struct cache *cache_stream_cache(const struct cache_stream *s)
{
	return s->c;
}

struct cache_file *cache_stream_file(const struct cache_stream *s)
{
	return s->f;
}
