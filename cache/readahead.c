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
 */
#define _GNU_SOURCE
#include "cache_int.h"

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
};

/* How far requests of one stream arrive out of order: the kernel's readahead
 * window (read_ahead_kb, 8 MiB by default) split over several FUSE threads. */
#define RA_REORDER (8ull << 20)
/* Contiguous bytes that make a stream of a reader that did not start at 0. */
#define RA_MIN_RUN (4ull << 20)

int cache_stream_new(struct cache *c, struct cache_file *f, struct cache_stream **out)
{
	struct cache_stream *s = calloc(1, sizeof(*s));
	struct cache_attr attr = {.size = f->size};

	if (!s)
		return -ENOMEM;
	s->c = c;
	/* One more reference to the same identity. */
	snprintf(attr.version, sizeof(attr.version), "%s", f->version);
	if (cache_file_get(c, f->path, &attr, &s->f) < 0) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	s->max_window = (unsigned)(c->cfg->readahead_max / c->bs);
	*out = s;
	return 0;
}

void cache_stream_free(struct cache_stream *s)
{
	if (!s)
		return;
	cache_file_put(s->c, s->f);
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
		if (cache_prefetch(s->c, s->f, s->ra_next) == -EAGAIN)
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

void cache_stream_access(struct cache_stream *s, uint64_t off, size_t len)
{
	uint64_t last_blk = (off + (len ? len - 1 : 0)) >> s->c->bs_shift;
	bool near, seq, grew = false;
	unsigned window;

	MCFS_ASSERT_NOT_HELD(&s->c->lock); /* the stream's lock comes first */
	pthread_mutex_lock(&s->lock);
	near = continues(s, off);
	s->run = near ? s->run + len : len;
	/* Streaming: from the start of the file, or after RA_MIN_RUN contiguous bytes.
	 * Two adjacent requests of one random read are not a stream. */
	seq = (!s->started && off == 0) || (near && (s->window > 0 || s->run >= RA_MIN_RUN));
	/* Not streaming: fetch only what is read. But a first access proves
	 * nothing: it gets whole blocks (and single flight with other readers). */
	s->random = s->started && !seq;
	if (!seq) {
		s->window = 0;
		s->ra_next = last_blk + 1;
	} else if (s->max_window == 0) {
		/* readahead off: classify only */
	} else if (s->window == 0 || last_blk > s->last) {
		s->window = s->window ? MCFS_MIN(s->window * 2, s->max_window) : 1;
		grew = true;
	}
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
