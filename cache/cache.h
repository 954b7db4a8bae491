/*
 * cache.h - the block cache, and the only door to the store and to the
 * metadata store: fs/ and gpu/ ask cache/ for attributes, listings, symlink
 * targets, capacity and bytes, and never see cache/remote or LMDB.
 *
 * Files are cut into blocks of cfg->block_size (8 MiB by default), fetched
 * from the store by a pool of fetch threads, and kept in a RAM tier of fixed
 * slots with LRU eviction (and a disk tier under cache_dir).
 *
 * This header holds what every user of the cache needs: its life (cache_new,
 * cache_free), the identity of a file version (struct cache_file) and the lock
 * order of the whole daemon. The rest is one header per purpose, each the
 * manual of its calls:
 *   cache_ram.h        the RAM tier: blocks, spans, prefetch, eviction, the
 *                      region the GPU module pins, GPU loads' windows
 *   cache_metadata.h   attributes, listings, symlinks, capacity, and the
 *                      metadata policy (attr_ttl, offline, close-to-open)
 *   cache_disk.h       the disk tier as fs/ sees it: backing files for FUSE
 *                      passthrough, and why the tier is off
 *   cache_readahead.h  one readahead stream per open file
 *   cache_read.h       the read path: a byte range in, what to reply with out
 *   cache_stats.h      the counters' snapshot and its histograms
 *   cache_attr.h       the attribute and directory-entry types
 *   counters.h         the table of every counter of the daemon
 * A file includes the ones whose calls it makes.
 *
 * Contract: a block is keyed by its file's identity *and version* (struct
 * cache_file) and its index, so a changed store file never mixes old and new
 * bytes.
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

#include <stdint.h>

#include "cache_attr.h"
#include "cfg.h"
#include "mcfs.h"

struct cache;
struct cache_file;

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

/* The daemon stops: no block waits for another node any longer (the shared
 * tier's parked blocks go to the store now, not after their bound), so that
 * the readers still in flight are answered and the session can end. Any
 * thread, any number of times, before cache_free(). */
void cache_stop_waits(struct cache *c);

/* The store's kind: "posix", "http" or "s3". Borrowed: static. Can't fail. */
const char *cache_store_kind(const struct cache *c);

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

#endif
