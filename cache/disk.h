/*
 * disk.h - the disk tier: blocks kept in one sparse file per file version
 * under CACHE_DIR/blocks, each block at its own offset (index * block size),
 * indexed in LMDB (cache/meta), written behind the read path and read back
 * with liburing, each read verified by its XXH3-64 checksum. A version held
 * whole is its own backing file for FUSE passthrough (cache_disk_pin_file).
 *
 * Contracts:
 *  - A block is served only if its bytes hash to the checksum committed with
 *    its index entry. A mismatch drops the entry (logged) and reads as a miss:
 *    the caller fetches from the store. Never torn or stale bytes.
 *  - An index entry is committed only after its data write completed, and a
 *    block's bytes are punched out only after its entry's deletion was
 *    committed: a killed daemon leaves no entry that points at missing or
 *    other bytes (and the checksum would catch one anyway). Bytes no entry
 *    claims are punched at the next start-up.
 *  - disk_cache bounds the version files' allocated bytes: at most
 *    disk_cache / block size blocks, each at most one block of disk.
 *  - Write-behind is off the reader's path: the caller (a fetch thread) has
 *    already served its readers; cache_disk_write() queues the job, or says
 *    the bounded queue is full (the caller keeps the block owed in the RAM
 *    tier and queues it when there is room: the disk never paces a fetch).
 *  - ENOSPC (the cache filesystem is full) stops write-behind for good, with
 *    one log line; blocks already on disk keep being served.
 *
 * Lock: disk->lock (private) guards the in-memory index, the LRU, the queue
 * and the counters. It is a leaf lock, never held across I/O, LMDB or the
 * done callback. Callers may hold no lock of theirs while calling in (the
 * lock order of the whole daemon: the top of cache/cache.h).
 */
#ifndef MCFS_CACHE_DISK_H
#define MCFS_CACHE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "counters.h"
#include "mcfs.h"
#include "meta.h"

struct cache_disk;

/* Buffers given to read and write: aligned to this, and at least len rounded up to it. */
#define CACHE_DISK_ALIGN 4096

/*
 * Parses @spec ("SIZE", or "N%" of the free space of @dir's filesystem plus
 * what @dir already holds) into a byte limit. Returns 0 or -EINVAL / -errno.
 */
MCFS_MUST_CHECK int cache_disk_limit(const char *dir, const char *spec, uint64_t *bytes);

/*
 * Opens the tier in directory @dir (creating dir/blocks, for at most @limit
 * bytes of @bs-byte blocks) over the index in @meta (borrowed; must
 * outlive the tier), and starts the writer thread. @done(@ctx, arg) is
 * called by the writer once for each job cache_disk_write() accepted, after
 * its bytes were written or abandoned. @queue_max bounds the write queue.
 * @direct: the version files are written and read with O_DIRECT where the
 * filesystem allows it (disk_direct); else through the page cache.
 * @writers: threads that write a batch's blocks at once (1: the writer alone).
 * Returns 0 with *out set, or a negative errno after logging why.
 */
MCFS_MUST_CHECK int cache_disk_open(const char *dir, uint64_t limit, uint64_t bs,
				    struct cache_meta *meta, unsigned queue_max, bool direct,
				    unsigned writers, void (*done)(void *ctx, void *arg), void *ctx,
				    struct cache_disk **out);

/* Writes what is queued, calls every pending done, persists use times, stops. */
void cache_disk_close(struct cache_disk *d);

/*
 * Reads the block @k into @buf (CACHE_DISK_ALIGN-aligned, @cap bytes) and
 * verifies it. Returns 0 with *len set; -ENOENT if the tier does not hold it
 * (or it failed its checksum: then it is dropped and logged); -EIO if the
 * read failed. Sleeps for the I/O; many callers may read at once.
 */
MCFS_MUST_CHECK int cache_disk_read(struct cache_disk *d, const struct cache_meta_key *k, char *buf,
				    size_t cap, uint32_t *len);

/*
 * Queues a write-behind of @len bytes at @data (CACHE_DISK_ALIGN-aligned,
 * readable up to @len rounded up to it) as block @k. Borrowed until
 * done(ctx, @arg): the caller keeps @data unchanged until then. Returns 0
 * (queued), -EEXIST (already held or queued), -EAGAIN (the queue is full
 * and !@wait; with @wait it sleeps until there is room) or -ENOSPC (the
 * tier is full for good). done is called only after 0.
 */
MCFS_MUST_CHECK int cache_disk_write(struct cache_disk *d, const struct cache_meta_key *k,
				     const char *data, uint32_t len, void *arg, bool wait);

/* Valid bytes of block @k held (0 if not held). */
uint32_t cache_disk_held(struct cache_disk *d, const struct cache_meta_key *k);

/*
 * Drops every block of @path (all versions) that no read is using and no
 * pin holds, from memory, the index and the disk (punched before it
 * returns). Returns the bytes dropped.
 */
uint64_t cache_disk_evict_path(struct cache_disk *d, const char *path);

/*
 * Pins the @size-byte version (@path, @version) for the kernel and opens its
 * version file read-only into *fd (the caller closes it; its size is set to
 * @size). Every block must be held whole; the first pin of the version in
 * this mount, or the first since one of its blocks changed, reads the file
 * and checks every block against its checksum (so the kernel is handed
 * verified bytes, and the page cache holds them). Pinned blocks are never
 * evicted until cache_disk_unpin_file(); one unpin per 0 returned. The
 * path's other versions (superseded) are dropped, but for blocks in use.
 * Returns 0; -ENOENT if the tier does not hold it whole; -EIO if a block
 * failed its checksum (that block is dropped and logged: the next read
 * fetches it again, and a later pin verifies again); or -errno (logged).
 */
MCFS_MUST_CHECK int cache_disk_pin_file(struct cache_disk *d, const char *path, const char *version,
					uint64_t size, int *fd);
/* Unpins what cache_disk_pin_file() pinned. If another version of the path
 * was pinned since, while this one's blocks were in use (it is superseded:
 * the store changed), the blocks that no read uses and no other pin holds go
 * too; the mark and the unpin share the tier's lock, so an unpin racing that
 * pin never leaves the old version behind. Can't fail. */
void cache_disk_unpin_file(struct cache_disk *d, const char *path, const char *version,
			   uint64_t size);
/* What cache_disk_pin_file() verified. */
struct cache_disk_verified {
	uint64_t files;	   /* versions verified whole, unchanged since */
	uint64_t bytes;	   /* their bytes */
	uint64_t verifies; /* verifications that passed (counter) */
	uint64_t errors;   /* verifications that found a bad block (counter) */
};
/* Fills @out. Can't fail. */
void cache_disk_verify_stats(struct cache_disk *d, struct cache_disk_verified *out);

/* Waits until every job queued before the call is written (or dropped) and
 * its index entry committed. */
void cache_disk_flush(struct cache_disk *d);

/* The tier's counters (struct cache_disk_stats: the DISK rows of cache/counters.h). */
void cache_disk_get_stats(struct cache_disk *d, struct cache_disk_stats *out);

#endif
