/*
 * cache_read.h - the read path (read.c): a byte range of an open file in,
 * what to reply with out.
 *
 * One call answers a read of an open file: it tells the stream's readahead,
 * cuts the range at block boundaries, fetches what is missing (on a random
 * reader's miss only the 4 KiB pages it reads, on a streaming reader's the
 * whole block) and hands back what to reply with. A range inside one block
 * is answered from the block's slot (zero copy: the block stays pinned until
 * the reply is written); one that straddles blocks holds one block at a time
 * and is copied into a buffer of its own, so that a reader never holds two
 * slots and readers can't deadlock over a small RAM tier.
 */
#ifndef MCFS_CACHE_READ_H
#define MCFS_CACHE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcfs.h"

struct cache;
struct cache_block;
struct cache_stream;

/* What to reply with. Fill with cache_read(), release with cache_read_done(). */
struct cache_read_reply {
	const char *data; /* borrowed: valid until cache_read_done(); NULL when len is 0 */
	size_t len;	  /* bytes at data: the range asked for, cut at EOF; 0 past it */
	bool pinned;	  /* data lies in a block's slot (zero copy), not in a copy */
	/* Private to cache/: what cache_read_done() releases. */
	struct cache *c;
	struct cache_block *block; /* the pinned block, or NULL */
	char *buf;		   /* the copy across blocks (malloc'd), or NULL */
};

/*
 * Reads [off, off+len) of the stream's file. Returns 0 with *out filled
 * (out->len is 0 at or past EOF, or for len 0); call cache_read_done(out)
 * once the reply is written. Errors, with *out empty and nothing held:
 * -ESTALE, the file changed in the store since it was opened (the caller
 * forgets its attributes, so that the next open sees the new version);
 * -EIO, the store failed (logged once, with the path and block); -ENOMEM.
 * Counts the read in cache_stats (reads, read_bytes) unless it is empty.
 * Threads: any, several at once on one stream too. No lock held on return.
 */
MCFS_MUST_CHECK int cache_read(struct cache_stream *s, uint64_t off, size_t len,
			       struct cache_read_reply *out);

/* Releases what a reply holds: the block's pin, or the copy. Can't fail. */
void cache_read_done(struct cache_read_reply *r);

#endif
