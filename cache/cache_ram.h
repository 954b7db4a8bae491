/*
 * cache_ram.h - the RAM tier: the blocks of files in fixed slots of one
 * region, with LRU eviction, and the calls that get, prefetch, warm and drop
 * them (blocks.c); the region itself, its placement and prefault (ram.c),
 * for the GPU module to pin; and GPU loads' windows of slots (budget.c).
 *
 * Contracts:
 *  - One release per successful get: cache_block_get() returns a new reference
 *    and the block is pinned in its slot until cache_block_put(). A referenced
 *    block is never evicted.
 *  - Single flight: concurrent misses on one block cause one store read; the
 *    other readers sleep until it lands.
 *  - Block and page arithmetic lives in cache/ only (cache_span() here, and
 *    cache_read() in cache_read.h for a reader that wants a reply).
 *
 * Threads: any. Lock: cache->lock, a leaf (the lock order: cache.h).
 */
#ifndef MCFS_CACHE_RAM_H
#define MCFS_CACHE_RAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcfs.h"

struct cache;
struct cache_file;
struct cache_block;

/*
 * The RAM tier as one region, for the GPU module to pin (register) it once.
 * Borrowed: valid until cache_free(). Can't fail.
 */
void cache_ram_region(struct cache *c, void **base, size_t *len);

/*
 * Places the RAM tier's memory and starts ram_prefault. @gpu_nodes: the NUMA
 * node of each of the @ngpus devices that read the tier by DMA (-1 where it
 * is unknown; NULL when 0). On a host of several nodes, each range of the
 * region is preferred on a node chosen for those devices (common/mcfs_numa.h
 * says how) and faulted in by a thread on that node's CPUs; on one node it
 * is only faulted in. Logs the placement in one line (and a refused mbind()
 * once: the tier then goes where it is first touched). Call once, before the
 * region is pinned or read: gpu_new() does, in either build; a later call
 * does nothing. Borrows @gpu_nodes for the call. Can't fail.
 */
void cache_ram_place(struct cache *c, const int *gpu_nodes, unsigned ngpus);

/* Slots of the RAM tier: blocks it holds at most. Fixed for the cache's life.
 * Can't fail. */
size_t cache_ram_slots(const struct cache *c);

/*
 * A GPU load's window: how many RAM-tier blocks it may hold at once. GPU
 * loads hold a quarter of the slots at most together (cache/budget.h says
 * why no mix of loads and readers can then deadlock): a load asks for
 * @want (>= 1) and waits its turn, first come first served, until a window
 * fits; *@granted is then between 1 and @want. While it waits, @stop (may be
 * NULL) is called every 100 ms without any lock held; when it returns
 * non-zero the load gives up: -EINTR, nothing held. Give the window back
 * with cache_gpu_window_put(), once its blocks are released.
 */
MCFS_MUST_CHECK int cache_gpu_window(struct cache *c, unsigned want, int (*stop)(void *), void *arg,
				     unsigned *granted);

/* Gives back a window of @n slots from cache_gpu_window(). Can't fail. */
void cache_gpu_window_put(struct cache *c, unsigned n);

/*
 * Block arithmetic lives here and nowhere else. A span is the part of the
 * byte range [off, off+len) of a file that lies in one block: cache_span()
 * cuts the range at the first block boundary after @off (and at EOF).
 * Callers walk a range by calling it again at off + sp->len.
 */
struct cache_span {
	uint64_t index; /* block number in the file */
	uint32_t boff;	/* offset of the range's first byte in the block */
	uint32_t len;	/* bytes of the range inside this block (> 0) */
	uint32_t blen;	/* bytes of the block: block_size, less for the file's last */
};

/*
 * Fills *sp for the first block of [off, off+len) of @f. Returns 0, or
 * -EINVAL when @len is 0 or @off is at or past EOF (*sp untouched).
 */
MCFS_MUST_CHECK int cache_span(const struct cache *c, const struct cache_file *f, uint64_t off,
			       uint64_t len, struct cache_span *sp);

/* Block size in bytes (a power of two, fixed for the cache's life). Can't fail. */
uint64_t cache_block_size(const struct cache *c);

/*
 * Returns a new reference to block @index of @f with its bytes ready; drop
 * with cache_block_put(). Sleeps while the block is fetched (by this call or
 * by another). Returns 0, -EINVAL for an index past EOF, -ESTALE when the
 * file changed in the store since @f was captured, or -EIO when the store
 * failed (both logged once, with the path and block).
 */
MCFS_MUST_CHECK int cache_block_get(struct cache *c, struct cache_file *f, uint64_t index,
				    struct cache_block **out);
/* Granule of partial blocks: a block may hold some of its 4 KiB pages. */
#define CACHE_PAGE_SHIFT 12
#define CACHE_PAGE_SZ (1u << CACHE_PAGE_SHIFT)

/*
 * As cache_block_get(), but only bytes [lo, hi) of the block are needed: a
 * miss fetches just the pages of it the block lacks (a random reader pays for
 * what it reads, not for 8 MiB), and the block keeps them, so a second pass
 * is served from RAM. The returned block holds at least [lo, hi); read
 * nothing else of it. lo and hi are offsets within the block,
 * lo < hi <= its length; lo should be a multiple of 4 KiB (O_DIRECT stores).
 */
MCFS_MUST_CHECK int cache_block_get_range(struct cache *c, struct cache_file *f, uint64_t index,
					  uint32_t lo, uint32_t hi, struct cache_block **out);
void cache_block_put(struct cache *c, struct cache_block *b);
/* Borrowed: valid until cache_block_put(). */
const char *cache_block_data(const struct cache_block *b);
/* Valid bytes: block_size, or less for the file's last block. */
size_t cache_block_len(const struct cache_block *b);

/*
 * Starts a fetch of block @index if it is not cached or loading, without
 * waiting. Returns 0 if started or already there, -EAGAIN if the prefetch
 * budget or the RAM tier has no room now (try later), -EINVAL past EOF.
 */
MCFS_MUST_CHECK int cache_prefetch(struct cache *c, struct cache_file *f, uint64_t index);

/*
 * Like cache_prefetch(), for an explicit warm-up (`mcfs prefetch`, the
 * prefetch ioctl): the block is not readahead, so it does not count against
 * prefetch_mem and is evictable like any block once loaded. At most
 * 2 x connections warm-up fetches are queued or running at once; beyond that
 * (or with no evictable slot) it answers -EAGAIN: call again later.
 * Returns 0 when it started a fetch, 1 when the block is cached or loading.
 */
MCFS_MUST_CHECK int cache_warm(struct cache *c, struct cache_file *f, uint64_t index);

/* Bytes cache_evict_file() dropped, per tier: a block held by both counts in each. */
struct cache_evicted {
	uint64_t ram_bytes;
	uint64_t disk_bytes; /* 0 without a disk tier */
	uint64_t held_open;  /* versions open through passthrough: the disk tier keeps
			      * their blocks until their last close, then drops them */
};

/* Drops every unreferenced cached block of @f from RAM, and every block of its
 * path (any version) from the disk tier and its backing files (a pinned one
 * when its last user puts it back), and says how much in *out. Can't fail. */
void cache_evict_file(struct cache *c, struct cache_file *f, struct cache_evicted *out);

/* Bytes of this file held now in the RAM or the disk tier (a block in both counts once). */
uint64_t cache_file_cached_bytes(struct cache *c, struct cache_file *f);
/* True if every block of @f is whole in the RAM or the disk tier (the disk
 * tier is asked only until a block is missing). No lock held. Can't fail. */
bool cache_file_complete(struct cache *c, struct cache_file *f);

#endif
