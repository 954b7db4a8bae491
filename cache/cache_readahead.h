/*
 * cache_readahead.h - readahead (readahead.c): one stream per open file
 * handle. cache_stream_access() tells it a read of [off, off+len) is being
 * served; it grows the window while the access pattern stays sequential
 * (tolerating small reordering) and collapses it on random access,
 * prefetching the window's blocks. cache_read() (cache_read.h) calls it for
 * each read; the other calls are for callers that walk blocks themselves.
 *
 * Lock: the stream's own, taken before cache->lock (the lock order: cache.h).
 *
 * Contract: prefetch never evicts a block that a reader holds or that
 * readahead fetched and nobody read yet.
 */
#ifndef MCFS_CACHE_READAHEAD_H
#define MCFS_CACHE_READAHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcfs.h"

struct cache;
struct cache_file;
struct cache_stream;

/* Returns 0 with *out set, or -ENOMEM; the stream holds a reference to @f. */
MCFS_MUST_CHECK int cache_stream_new(struct cache *c, struct cache_file *f,
				     struct cache_stream **out);
void cache_stream_free(struct cache_stream *s);
void cache_stream_access(struct cache_stream *s, uint64_t off, size_t len);
/* Current window in blocks (0 = not sequential). Takes the stream's lock. */
unsigned cache_stream_window(struct cache_stream *s);
/* True if the last access was not sequential: fetch only the bytes asked for. */
bool cache_stream_random(struct cache_stream *s);

#endif
