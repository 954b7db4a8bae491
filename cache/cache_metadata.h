/*
 * cache_metadata.h - attributes, listings, symlinks and capacity (attrs.c).
 * The records themselves live in the metadata store (cache/meta.h, private to
 * cache/); this is the policy fs/ sees.
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
 *
 * Close-to-open: an open confirms its file's version with the store
 * (cache_confirm()), unless open_check=ttl.
 */
#ifndef MCFS_CACHE_METADATA_H
#define MCFS_CACHE_METADATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cache_attr.h"
#include "mcfs.h"

struct cache;

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

#endif
