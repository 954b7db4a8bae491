/*
 * cache.h - the block cache, and the only door to the store and to the
 * metadata store: fs/ asks here for attributes, listings, symlink targets,
 * capacity and bytes, and never sees cache/remote or LMDB.
 *
 * Files are cut into blocks of cfg->block_size (8 MiB by default), fetched
 * from the store by a pool of fetch threads, and kept in a RAM tier of fixed
 * slots with LRU eviction (and a disk tier under cache_dir).
 *
 * Contracts:
 *  - A block is keyed by its file's identity *and version* (struct cache_file)
 *    and its index, so a changed store file never mixes old and new bytes.
 *  - One release per successful get: cache_block_get() returns a new reference
 *    and the block is pinned in its slot until cache_block_put(). A referenced
 *    block is never evicted.
 *  - Single flight: concurrent misses on one block cause one store read; the
 *    other readers sleep until it lands.
 *  - Readahead (struct cache_stream) is per open file; prefetch never evicts a
 *    block that a reader holds or that readahead fetched and nobody read yet.
 *  - Block and page arithmetic lives in cache/ only: a reader hands
 *    cache_read() a byte range and gets back what to reply with.
 *  - Metadata policy lives here too (attrs.c): attr_ttl, negative_ttl,
 *    offline, the write-through of store answers to LMDB, and close-to-open:
 *    an open confirms its file's version with the store (cache_confirm()).
 *
 * Threads: everything here may be called from any thread.
 *
 * Lock order: the one list for the whole daemon; other headers point here.
 * A thread that holds a lock may take only locks further down the list.
 * "Leaf": nothing else is taken while it is held. Debug and sanitizer builds
 * check the places that depend on it with MCFS_ASSERT_HELD/_NOT_HELD
 * (common/mcfs_lock.h).
 *   1. inodes->lock (fs/inode.c): the inode table and its nodes. Never held
 *      across a store request; may be held while taking 3.
 *   2. cache_stream->lock (readahead.c): one open file's readahead window.
 *      Held while taking 3: fill_window() calls cache_prefetch_for().
 *   3. cache->lock (cache_int.h): the RAM tier's slots, hash, LRU, job queue,
 *      file table and counters. Leaf: the disk tier, the store and LMDB are
 *      called after it is dropped.
 *   Leaves, each taken with none of 1-3 held, and never across I/O:
 *   - disk->lock (disk_int.h): the disk tier's index, LRU, write queue and
 *     counters; dropped around io_uring I/O, LMDB and the done callback.
 *   - shared->lock (shared.c): the shared tier's write queue and up/down
 *     changes; dropped around its requests and the done callback.
 *   - backing->lock (backing.c): the backing files' list, pins and counters;
 *     opens that wait for a build sleep on its condition, the build itself
 *     runs with no lock held.
 *   - LMDB's own write lock (inside cache/meta: one write transaction at a
 *     time, held by LMDB across its commit); cache/meta has no lock of its own.
 *   - the store's (cache/remote): fetch.c's idle-connection pool lock and
 *     libcurl's share locks, http.c's manifest rwlock.
 *   - session->handles_lock (fs/fs_int.h): the list of open handles.
 *   - the stop thread's lock (fs/main.c).
 *   - gpu->lock (gpu/gpu_int.h): never held across a CUDA call, a cache call
 *     or a FUSE reply.
 * No lock of ours is held across store, disk or LMDB I/O, a CUDA call, a
 * FUSE reply or a callback into another module.
 */
#ifndef MCFS_CACHE_H
#define MCFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cache_attr.h"
#include "cfg.h"
#include "counters.h"

struct cache;
struct cache_file;
struct cache_block;
struct cache_stream;

/* Upper bounds (seconds) of the fetch-latency histogram buckets; the last is +Inf. */
#define CACHE_LAT_BUCKETS 12
#define CACHE_LAT_BOUNDS                                                                           \
	{                                                                                          \
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 1e300           \
	}
/* Readahead window histogram: bucket i counts windows of at most 2^i blocks, at growth. */
#define CACHE_RA_BUCKETS 12

/* ram_prefault's progress (cache.c): off (or unsupported), running, done, or
 * stopped short because the node ran low on memory. */
enum cache_prefault_state {
	CACHE_PREFAULT_OFF = 0,
	CACHE_PREFAULT_RUNNING = 1,
	CACHE_PREFAULT_DONE = 2,
	CACHE_PREFAULT_STOPPED = 3,
};

/*
 * A snapshot of the counters: one member per CACHE row of CACHE_COUNTERS
 * (cache/counters.h, which says what each means), the disk tier's DISK rows
 * in .disk, and the two histograms, which no row can hold.
 */
struct cache_stats {
	CACHE_COUNTERS(CACHE_CTR_MEMBER)
	struct cache_disk_stats disk;	       /* all 0 when there is no disk tier */
	uint64_t fetch_lat[CACHE_LAT_BUCKETS]; /* fetches by latency, non-cumulative */
	double fetch_lat_sum;		       /* seconds, all fetches */
	uint64_t ra_window[CACHE_RA_BUCKETS];  /* window sizes seen (log2 buckets) */
	uint64_t ra_window_sum;		       /* blocks, all windows seen */
};

/*
 * Opens the store named by cfg->source (checking that it answers and that
 * the credentials work), reserves the RAM tier (pages are touched on first
 * use) and starts cfg->connections fetch threads. @cfg is borrowed and must
 * outlive the cache. Returns 0 with *out set (free with cache_free()), or a
 * negative errno after logging why (a store that does not answer, no memory).
 *
 * With cfg->cache_dir set, cache_new also opens the metadata store (LMDB)
 * and the disk tier in this store's own subdirectory of it (named after the
 * source; cache/meta.h, cache/disk.h), so that stores never share entries.
 * If that fails (not writable, in use by another daemon of the same store,
 * no room) it logs a warning and the cache runs RAM-only: a cache directory
 * never stops a mount.
 */
MCFS_MUST_CHECK int cache_new(const struct cfg *cfg, struct cache **out);

/* Stops the fetch threads (waiting for fetches in flight), writes the disk
 * tier's queue, closes it and the store, and frees it all. NULL is fine. */
void cache_free(struct cache *c);

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
 * Returns a new reference to the identity of (path, version) with its size;
 * drop with cache_file_put(). The same (path, version) always maps to the
 * same identity, so a reopen finds the blocks read before.
 * Returns 0 or -ENOMEM.
 */
MCFS_MUST_CHECK int cache_file_get(struct cache *c, const char *path, const struct cache_attr *attr,
				   struct cache_file **out);
void cache_file_put(struct cache *c, struct cache_file *f);
/* Borrowed: valid while a reference is held. */
const char *cache_file_path(const struct cache_file *f);
uint64_t cache_file_size(const struct cache_file *f);
const char *cache_file_version(const struct cache_file *f);
/* Bytes of this file held now in the RAM or the disk tier (a block in both counts once). */
uint64_t cache_file_cached_bytes(struct cache *c, struct cache_file *f);
/* True if every block of @f is whole in the RAM or the disk tier (the disk
 * tier is asked only until a block is missing). No lock held. Can't fail. */
bool cache_file_complete(struct cache *c, struct cache_file *f);

/* ---- metadata: attributes, listings, symlinks, capacity (attrs.c) ------
 *
 * What the store says about paths, and the policy around it. An answer is
 * served from the metadata store (LMDB, under cache_dir) while it is younger
 * than attr_ttl (negative_ttl for "no such path"); else the store is asked
 * and its answer recorded (write-through), so that after a restart a stat
 * costs one LMDB read instead of a store request. With offline, a store
 * failure (anything but "no such path") is answered from LMDB whatever the
 * age, if LMDB has an answer. Without a cache_dir every call asks the store.
 *
 * *expires is the monotonic time (mcfs_now_ns()) until which the answer is
 * fresh: learned + the ttl. A recorded answer dates from when the store gave
 * it, so it expires in memory when it would have in LMDB. Callers that keep
 * answers (fs/'s inode table) ask cache_attr_fresh() before reusing them.
 *
 * Threads: any. They may block on the store: call with no lock held.
 */

/*
 * Attributes of @path ("" is the root). Returns 0 with *a and *expires set;
 * -ENOENT or -ENOTDIR for no such path (a negative answer: *expires set,
 * from negative_ttl); or the store's error (-EIO, -EACCES, ...: logged by
 * the store; *a and *expires undefined).
 */
MCFS_MUST_CHECK int cache_stat(struct cache *c, const char *path, struct cache_attr *a,
			       uint64_t *expires);

/*
 * The entries of directory @path, with their attributes (no "." or "..").
 * Returns 0 with *ents, an array of *n entries (caller frees with free()),
 * and *expires (from attr_ttl; the entries' attributes are as fresh as the
 * listing); or -ENOENT, -ENOTDIR or the store's error (*ents untouched).
 */
MCFS_MUST_CHECK int cache_list(struct cache *c, const char *path, struct cache_dirent **ents,
			       size_t *n, uint64_t *expires);

/*
 * For open(): close-to-open consistency. The attributes of @path as the store
 * says them now, asked with one request (posix: a stat; http, s3: one HEAD)
 * whatever LMDB holds, and recorded (write-through); an answer is counted
 * in open_checks.
 * Returns as cache_stat(). With offline, a store failure (anything but "no
 * such path") is answered from LMDB's record whatever its age, counted in
 * offline_opens and logged once per outage; without a record, the error.
 */
MCFS_MUST_CHECK int cache_confirm(struct cache *c, const char *path, struct cache_attr *a,
				  uint64_t *expires);

/* True if an open must call cache_confirm() (open_check=always, the default);
 * false: opens trust answers as fresh as attr_ttl allows (open_check=ttl). */
bool cache_open_confirms(const struct cache *c);

/* True while an answer that expires at @expires is fresh (0: never). Can't fail. */
bool cache_attr_fresh(uint64_t expires);

/*
 * As cache_list(), but from the store whatever LMDB holds (offline: LMDB's
 * record when the store fails), for a listing that fs/ holds and found too
 * old for a miss: LMDB's record is as old as it.
 */
MCFS_MUST_CHECK int cache_relist(struct cache *c, const char *path, struct cache_dirent **ents,
				 size_t *n, uint64_t *expires);

/*
 * When a name missing from a listing that is fresh until @list_expires (from
 * cache_list()) stops counting as absent: negative_ttl after the listing was
 * learned, or the listing's own expiry if that comes first. Past it, a lookup
 * of a name the listing lacks lists the directory again (cache_relist()),
 * so a file added to a listed directory appears within negative_ttl.
 * Can't fail.
 */
uint64_t cache_list_miss_expiry(const struct cache *c, uint64_t list_expires);

/*
 * Re-confirmation (SIGHUP, `mcfs refresh`): every answer recorded under
 * cache_dir until now is stale, whatever its age, so the next cache_stat()
 * or cache_list() of any path asks the store. Records are kept by path, not
 * by tree, so a refresh of one subtree distrusts them all; the answers that
 * fs/ keeps in memory for other paths stay, and read LMDB only once stale.
 * Can't fail.
 */
void cache_distrust(struct cache *c);

/*
 * Forgets the recorded attributes of @path (a read found that the file
 * changed in the store), so that the next cache_stat() asks the store.
 * Can't fail: a failure to forget is logged by cache/meta.
 */
void cache_forget_attr(struct cache *c, const char *path);

/*
 * The target of symlink @path into buf (NUL-terminated), always from the
 * store. Returns its length, or -ENOENT, -EINVAL (not a symlink),
 * -ENAMETOOLONG (buf too small) or the store's error.
 */
MCFS_MUST_CHECK int cache_readlink(struct cache *c, const char *path, char *buf, size_t len);

/*
 * The store's capacity and free space in bytes, for statfs. Can't fail:
 * stores with no capacity to report (object stores), and a store that fails
 * to say, give 0 and 0.
 */
void cache_statfs(struct cache *c, uint64_t *total_bytes, uint64_t *free_bytes);

/*
 * Writes the manifest of the tree under @dir to @out: the listing an http
 * store serves as .mcfs-manifest.json (format: cache/remote/manifest.h).
 * For the CLI (`mcfs manifest`), needs no cache. Returns 0, or a negative
 * errno after printing what failed to stderr; -ENOTSUP in a build without
 * the network stores.
 */
MCFS_MUST_CHECK int cache_write_manifest(const char *dir, FILE *out);

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
};

/* Drops every unreferenced cached block of @f from RAM, and every block of its
 * path (any version) from the disk tier and its backing files (a pinned one
 * when its last user puts it back), and says how much in *out. Can't fail. */
void cache_evict_file(struct cache *c, struct cache_file *f, struct cache_evicted *out);

/* ---- backing files for FUSE passthrough (backing.c) ------------------------
 *
 * The kernel reads a passthrough open's backing file itself, at the file's
 * own offsets, with no request to mcfs; so a backing file must hold the whole
 * version and nothing else. cache/ keeps them (fs/ never sees a path under
 * cache_dir): a version's own file in the disk tier (layout (d)), used as it
 * is once every block is on disk whole and verified. Lock: their own leaf lock.
 */

/*
 * A read-only descriptor of @f's backing file in *fd (the caller closes it),
 * if the disk tier holds every block of @f whole. The first get of a version
 * in this mount (and the first after one of its blocks changed) reads it and
 * verifies every block's checksum, at disk speed; there is no copy. Pins
 * the version (none of its blocks evicted) until cache_backing_put(c, f);
 * one put per successful get. Returns 0; -ENOENT when there is none (no disk
 * tier, a block missing or only in RAM, an empty file); -EIO when a block
 * failed its checksum (dropped, logged and counted in backing_build_errors:
 * the next read fetches it again); or -errno (logged). Threads: any, with
 * no lock of the caller's held (it may read the file for seconds).
 */
MCFS_MUST_CHECK int cache_backing_get(struct cache *c, struct cache_file *f, int *fd);
/* True if this cache can make backing files (it has a disk tier). Can't fail. */
bool cache_backing_enabled(const struct cache *c);
/* Unpins what cache_backing_get() pinned. Can't fail. */
void cache_backing_put(struct cache *c, struct cache_file *f);

/* A snapshot of every counter of the cache, its tiers and its store. Can't fail. */
void cache_get_stats(struct cache *c, struct cache_stats *out);

/* What @reason (enum cache_disk_off) means, in a few words: static, never NULL. */
const char *cache_disk_off_text(int reason);

/* The store's kind: "posix", "http" or "s3". Borrowed: static. Can't fail. */
const char *cache_store_kind(const struct cache *c);

/*
 * Readahead: one stream per open file handle. cache_stream_access() tells it
 * a read of [off, off+len) is being served; it grows the window while the
 * access pattern stays sequential (tolerating small reordering) and collapses
 * it on random access, prefetching the window's blocks. cache_read() calls
 * it for each read; the other calls are for callers that walk blocks
 * themselves. cache_stream_new returns 0 or -ENOMEM; the stream holds a
 * reference to @f. Lock: the stream's own, taken before cache->lock.
 */
MCFS_MUST_CHECK int cache_stream_new(struct cache *c, struct cache_file *f,
				     struct cache_stream **out);
void cache_stream_free(struct cache_stream *s);
void cache_stream_access(struct cache_stream *s, uint64_t off, size_t len);
/* Current window in blocks (0 = not sequential). Takes the stream's lock. */
unsigned cache_stream_window(struct cache_stream *s);
/* True if the last access was not sequential: fetch only the bytes asked for. */
bool cache_stream_random(struct cache_stream *s);

/* ---- reading (read.c) ---------------------------------------------------
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
