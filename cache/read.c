/*
 * read.c - one call answers a read of an open file (cache_read(), see
 * cache_read.h): the byte range in, what to reply with out.
 *
 * Design. The range is cut at block boundaries with cache_span(). A range
 * inside one block is answered from the block's slot: the reply points into
 * it and a reference pins the block until the caller has written the reply
 * (fuse_reply_data: one writev from the slot, no copy). A range across
 * blocks is copied into a buffer one block at a time, holding one reference
 * at a time, so a reader never pins two slots and readers can't deadlock
 * over a small RAM tier.
 *
 * What to fetch on a miss depends on the stream: a streaming reader's miss
 * fetches the whole block (readahead fetched or will fetch the ones after);
 * a random reader's only the 4 KiB pages it reads (it pays for what it
 * reads, not for 8 MiB), aligned to pages because O_DIRECT stores need it.
 * The stream is told of each read first, so readahead starts before this
 * reader waits.
 *
 * Counters: reads and bytes answered, relaxed atomics on the cache (the read
 * path takes no lock for them).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_ram.h"
#include "cache_read.h"
#include "cache_readahead.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A random read's partial fetch is aligned to pages: O_DIRECT needs it. */
#define READ_ALIGN (1u << CACHE_PAGE_SHIFT)

/*
 * Gets the block of span @sp of the stream's file, holding at least the
 * span's bytes: the whole block for a streaming reader, the pages of the
 * span for a random one. Returns 0 with *b (drop with cache_block_put()),
 * or a negative errno.
 */
static int get_span(struct cache_stream *s, const struct cache_span *sp, struct cache_block **b)
{
	struct cache_file *f = cache_stream_file(s);
	struct cache *c = cache_stream_cache(s);
	uint32_t lo = 0, hi = sp->blen;

	if (cache_stream_random(s)) {
		lo = sp->boff & ~(READ_ALIGN - 1);
		hi = (uint32_t)MCFS_MIN((uint64_t)sp->blen,
					((uint64_t)sp->boff + sp->len + READ_ALIGN - 1) &
					    ~(uint64_t)(READ_ALIGN - 1));
	}
	return cache_block_get_range(c, f, sp->index, lo, hi, b);
}

/* Copies [off, off+len) of the file into buf, one block reference at a time. */
static int read_copy(struct cache_stream *s, uint64_t off, size_t len, char *buf)
{
	struct cache *c = cache_stream_cache(s);
	struct cache_span sp;
	struct cache_block *b;
	size_t done = 0;
	int rc;

	while (done < len) {
		rc = cache_span(c, cache_stream_file(s), off + done, len - done, &sp);
		if (rc == 0)
			rc = get_span(s, &sp, &b);
		if (rc < 0)
			return rc;
		memcpy(buf + done, b->data + sp.boff, sp.len);
		cache_block_put(c, b);
		done += sp.len;
	}
	return 0;
}

int cache_read(struct cache_stream *s, uint64_t off, size_t len, struct cache_read_reply *out)
{
	struct cache *c = cache_stream_cache(s);
	struct cache_file *f = cache_stream_file(s);
	struct cache_span sp;
	struct cache_block *b;
	char *buf;
	int rc;

	memset(out, 0, sizeof(*out));
	out->c = c;
	if (off >= f->size || len == 0)
		return 0; /* EOF: an empty reply */
	len = (size_t)MCFS_MIN((uint64_t)len, f->size - off);
	atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->read_bytes, len, memory_order_relaxed);
	cache_stream_access(s, off, len);
	rc = cache_span(c, f, off, len, &sp);
	if (rc < 0)
		return rc; /* not reached: off < size and len > 0 */
	if (sp.len == len) {
		/* Zero copy: the reply is written from the slot while our reference pins it. */
		rc = get_span(s, &sp, &b);
		if (rc < 0)
			return rc;
		out->block = b;
		out->data = b->data + sp.boff;
		out->len = len;
		out->pinned = true;
		return 0;
	}
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	rc = read_copy(s, off, len, buf);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	out->buf = buf;
	out->data = buf;
	out->len = len;
	return 0;
}

void cache_read_done(struct cache_read_reply *r)
{
	if (r->block)
		cache_block_put(r->c, r->block);
	free(r->buf);
	memset(r, 0, sizeof(*r));
}
