/*
 * cache_disk.h - the disk tier as seen from outside cache/: backing files for
 * FUSE passthrough (backing.c), and why the tier is off. The tier itself
 * (files under cache_dir, its index, write-behind) is cache/disk.h, private
 * to cache/; its counters are the DISK rows of counters.h.
 *
 * The kernel reads a passthrough open's backing file itself, at the file's
 * own offsets, with no request to mcfs; so a backing file must hold the whole
 * version and nothing else. cache/ keeps them (fs/ never sees a path under
 * cache_dir): a version's own file in the disk tier (layout (d)), used as it
 * is once every block is on disk whole and verified. Lock: their own leaf lock.
 */
#ifndef MCFS_CACHE_DISK_PUBLIC_H
#define MCFS_CACHE_DISK_PUBLIC_H

#include <stdbool.h>

#include "mcfs.h"

struct cache;
struct cache_file;

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

/*
 * cold_whole (whole.c): fetches every block of @f the disk tier lacks and
 * waits until the version is whole there, so that cache_backing_get() finds
 * it. Paced by the disk writers; the fetch threads do the work. Returns 0
 * when whole; -ENOENT when it is not (cold_whole=off, no disk tier, a file
 * larger than half the tier, a fetch that failed three passes, stopping):
 * the open then reads through the cache. Threads: any, no lock held (it
 * waits for the whole file: seconds).
 */
MCFS_MUST_CHECK int cache_whole_fetch(struct cache *c, struct cache_file *f);
/* Drops @f's copy in memory (whole_mem) if no get holds it: the open it was
 * made for did not take it. Can't fail. */
void cache_backing_mem_unused(struct cache *c, const struct cache_file *f);
/*
 * cold_whole=model: queues the other files of @f's directory whose names end
 * with @f's suffix, in name order, to be fetched whole in the background (a
 * directory's files of one suffix at most once in a while). Lists the
 * directory (a store request at most). Can't fail: a file not queued is only not fetched ahead.
 */
void cache_whole_siblings(struct cache *c, const struct cache_file *f);
/*
 * Ends the whole fetches for good: those running return -ENOENT at their
 * next block, later ones at once, and the background threads are joined.
 * For the stop (the opens waiting for a fetch answer at once); cache_free()
 * calls it too. Threads: any, no lock held; may be called again.
 */
void cache_whole_stop(struct cache *c);

/* What @reason (enum cache_disk_off) means, in a few words: static, never NULL. */
const char *cache_disk_off_text(int reason);

#endif
