/*
 * meta.h - persistent metadata in LMDB: what the store said about each path
 * (attributes, listings, when it was asked) and the disk tier's block index.
 *
 * One environment under CACHE_DIR/meta with named databases:
 *   attrs, attrs.1  store path -> struct cache_attr, "exists", fetch time (wall clock)
 *   lists, lists.1  dir path   -> its entries (name + attributes), fetch time
 *   blocks  struct cache_meta_key -> struct cache_meta_block (slot, checksum...)
 *   info    name -> u64 (format version, block size, "gen")
 *
 * Bounded: a long-lived daemon sees the store churn (a million names over its
 * life, "no such name" answers among them), and LMDB's map has a fixed size.
 * Attributes and listings live in two generations, each a pair of databases:
 * writes go to the current one (info "gen"), reads take the current one's
 * record, else the older one's. When the current generation holds its share of
 * the map, the older one is dropped whole and becomes the current one: what
 * was recorded or refreshed in the last generation stays, the rest is asked of
 * the store again when needed. The records so never take more than half the
 * map. The block index is never dropped: the disk tier's slots bound it, and
 * the map is sized for it (@map_size of cache_meta_open()). A full map
 * (MDB_MAP_FULL) is never the disk tier's end: the write that met it drops the
 * attributes and listings, older generation first, and is tried again.
 *
 * Every function translates LMDB's codes into a negative errno here, once:
 * MDB_NOTFOUND -> -ENOENT, MDB_MAP_FULL -> -ENOSPC, MDB_CORRUPTED/MDB_INVALID
 * -> -EUCLEAN, other MDB_* -> -EIO; a positive errno from LMDB is negated.
 *
 * Durability: the environment is opened MDB_NOSYNC: a commit is a few
 * pwrite()s, not an fsync, so write-through from the metadata path stays
 * cheap. A killed daemon loses nothing (the kernel holds the pages);
 * cache_meta_sync() (called by the disk writer about once a second and at
 * close) bounds what a power loss can lose. Block data needs no sync
 * ordering at all: every read from the disk tier is verified by checksum.
 *
 * Threads: every function may be called from any thread; LMDB serialises
 * writers itself and readers never block. No lock of ours is held inside.
 */
#ifndef MCFS_CACHE_META_H
#define MCFS_CACHE_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcfs.h"
#include "cache_attr.h"

struct cache_meta;

/*
 * A block's key: XXH3-128 of the path, XXH3-64 of the version, the block
 * index big-endian. Fixed size (LMDB keys are small), sorted by path first,
 * so all versions and blocks of one path are adjacent.
 */
#define CACHE_META_KEY_LEN 32
struct cache_meta_key {
	unsigned char b[CACHE_META_KEY_LEN];
};

/* Where a block lives in the disk tier; stored as is (host byte order). */
struct cache_meta_block {
	uint32_t slot;	   /* slot number in the slot file */
	uint32_t len;	   /* valid bytes */
	uint64_t csum;	   /* XXH3_64bits of the len bytes */
	uint64_t last_use; /* wall clock ns of the last read or write */
};

/*
 * Opens (creating) the environment in directory @dir, with a map of
 * @map_size bytes (address space: the file grows only as pages are used; the
 * caller makes it large enough for the block index, as tiers.c does). A
 * database that LMDB finds corrupt or of another format is removed and
 * recreated (it is a cache: the store has everything), with a log line.
 * Returns 0 with *out set (close with cache_meta_close()), or a negative
 * errno after logging.
 */
MCFS_MUST_CHECK int cache_meta_open(const char *dir, uint64_t map_size, struct cache_meta **out);

/* Syncs and closes. No call may be in progress. Can't fail. */
void cache_meta_close(struct cache_meta *m);

/* Flushes committed transactions to disk. Returns 0 or a negative errno. */
MCFS_MUST_CHECK int cache_meta_sync(struct cache_meta *m);

/*
 * Words @rc, a negative errno from a cache_meta_* call, for a log line, into
 * @buf. -ENOSPC names what is full, by which has less room left: the metadata
 * map (its size and how much of it is used) or the cache filesystem (its free
 * bytes); -EIO (LMDB's own errors) says whether the filesystem is nearly
 * full; other codes are strerror(). Returns buf. Can't fail.
 */
const char *cache_meta_strerror(struct cache_meta *m, int rc, char *buf, size_t len);

/*
 * The map's size in bytes (as asked at open), the bytes its databases' pages
 * use now, and how many times a generation of attributes and listings was
 * dropped for room since open. Can't fail (a failed read shows 0 used).
 */
void cache_meta_usage(struct cache_meta *m, uint64_t *map_bytes, uint64_t *used_bytes,
		      uint64_t *prunes);

/* Wall-clock time in ns (fetch times survive restarts; the monotonic clock does not). */
int64_t cache_meta_now(void);

/* ---- attributes and listings -------------------------------------------- */

/*
 * Records what the store said about @path at @fetched (cache_meta_now()):
 * its attributes, or with @a NULL that it does not exist. Errors: -ENOSPC
 * only if the record does not fit a map with no attributes or listings left.
 */
MCFS_MUST_CHECK int cache_meta_put_attr(struct cache_meta *m, const char *path,
					const struct cache_attr *a, int64_t fetched);

/* Fills *a, *exists, *fetched. Returns 0, -ENOENT if never recorded, or an error. */
MCFS_MUST_CHECK int cache_meta_get_attr(struct cache_meta *m, const char *path,
					struct cache_attr *a, bool *exists, int64_t *fetched);

/* Forgets @path's attributes (a read found the file changed). 0 or an error. */
MCFS_MUST_CHECK int cache_meta_del_attr(struct cache_meta *m, const char *path);

/*
 * Records the listing of directory @dir, and each entry's attributes in
 * attrs, in one transaction. @ents is borrowed for the call.
 */
MCFS_MUST_CHECK int cache_meta_put_list(struct cache_meta *m, const char *dir,
					const struct cache_dirent *ents, size_t n, int64_t fetched);

/*
 * The recorded listing of @dir: *ents is an array of *n entries, caller
 * frees with free(). Returns 0, -ENOENT if never recorded, or an error.
 */
MCFS_MUST_CHECK int cache_meta_get_list(struct cache_meta *m, const char *dir,
					struct cache_dirent **ents, size_t *n, int64_t *fetched);

/* ---- the disk tier's block index ---------------------------------------- */

/* Fills @k for block @index of (path, version). Can't fail. */
void cache_meta_block_key(const char *path, const char *version, uint64_t index,
			  struct cache_meta_key *k);

/* True if @k is a block of @path (any version). */
bool cache_meta_key_has_path(const struct cache_meta_key *k, const char *path);

/*
 * Calls @fn for every index entry, in key order, inside one read
 * transaction (so @fn must not call back into the meta module). Stops at the
 * first non-zero return of @fn and returns it; 0 when all were seen.
 */
MCFS_MUST_CHECK int cache_meta_blocks_scan(struct cache_meta *m,
					   int (*fn)(void *arg, const struct cache_meta_key *k,
						     const struct cache_meta_block *v),
					   void *arg);

/*
 * One transaction: deletes @ndel keys (missing ones are fine), then puts
 * @nput entries. Either all of it is committed or none. Arrays are borrowed.
 */
MCFS_MUST_CHECK int cache_meta_blocks_update(struct cache_meta *m,
					     const struct cache_meta_key *dels, size_t ndel,
					     const struct cache_meta_key *keys,
					     const struct cache_meta_block *vals, size_t nput);

/* Empties the block index (block size changed). Returns 0 or an error. */
MCFS_MUST_CHECK int cache_meta_blocks_clear(struct cache_meta *m);

/* Named u64 values in "info". get: 0, -ENOENT or an error. */
MCFS_MUST_CHECK int cache_meta_get_u64(struct cache_meta *m, const char *name, uint64_t *v);
MCFS_MUST_CHECK int cache_meta_put_u64(struct cache_meta *m, const char *name, uint64_t v);

#endif
