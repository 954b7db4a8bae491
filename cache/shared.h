/*
 * shared.h - the shared block tier: blocks kept in an S3 bucket that the
 * nodes of a cluster share (-o shared_cache=s3://bucket[/prefix]), asked
 * after the local tiers (RAM, disk) and before the store.
 *
 * Contracts:
 *  - Only whole blocks, each an object named by cache_shared_key() and
 *    sealed by a 48-byte trailer: a MAC keyed by the cluster's
 *    shared_key_file (shared_seal.c). An object of another size or with
 *    another seal is refused, counted (corrupt, unauthentic), logged,
 *    fetched from the store and written over; it never reaches a reader or
 *    the disk tier.
 *  - A read never waits long on a silent service: one attempt per request,
 *    cut when the service sent nothing for shared_timeout (blob.c). One
 *    health state (up, read-only, down) with one probe every 5 s while not
 *    up (shared_lease.h).
 *  - Writes go through a bounded queue to writer threads, after the block's
 *    readers were answered; a full queue drops the write (counted), but for a
 *    block whose lease this node holds, which waits for room up to
 *    shared_wait, and whose run is given back if dropped all the same.
 *  - With shared_wait > 0, one lease per run of shared_run bytes: one node
 *    fetches the run, the others wait for its blocks, parked, never holding a
 *    fetch thread (shared_lease.h, shared_read.c). Best effort: a race costs
 *    a duplicate store read, never a wrong byte.
 *
 * Lock: sh->lock (private) guards the write queue, the runs and the health;
 * a leaf, never held across a request or a callback. The counters are
 * relaxed atomics. Callers hold no lock of theirs while calling in.
 */
#ifndef MCFS_CACHE_SHARED_H
#define MCFS_CACHE_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "counters.h"
#include "mcfs.h"

struct cache_shared;
struct cache_stats;

/* Bytes after the block in its object: magic, length, MAC. */
#define CACHE_SHARED_TRAILER 48
/* The cluster key's least length in bytes (shared_key_file): 128 bits even as hex digits. */
#define CACHE_SHARED_KEY_MIN 32
/* Longest object name we make (an S3 key may be 1024 bytes; the prefix adds to it). */
#define CACHE_SHARED_KEY_MAX 384

/* How a parked block comes back (the wake callback, then cache_shared_get() again). */
enum cache_shared_resume {
	CACHE_SHARED_FIRST = 0,	  /* not parked before: ask from the start */
	CACHE_SHARED_RESUMED = 1, /* its run changed (named, taken, given back): ask the run */
	CACHE_SHARED_WAITED = 2,  /* its wait is over (twice shared_wait, or stopping): the store */
};

/* One block, as the shared tier names it. Borrowed for the call. */
struct cache_shared_block {
	const char *path;     /* the file, relative to the store's root */
	const char *version;  /* its version (ETag, or size-mtime-inode) */
	uint64_t size;	      /* its size in bytes */
	uint64_t index;	      /* the block's number in the file */
	uint32_t len;	      /* the block's bytes: block_size, less for the last */
	void *park;	      /* the caller's token, handed back by wake() if parked */
	unsigned char resume; /* enum cache_shared_resume: how it comes back */
	uint64_t wait_until;  /* as wake() gave it (mcfs_now_ns()): a block parked
			       * again keeps its first wait's bound; 0 = none yet */
};

/*
 * Names @blk's object (relative to the bucket's prefix) into @out:
 * "mcfs2/STORE/SLUG-HASH/BS-INDEX", STORE being cache_store_dir_name()'s
 * name of the store, SLUG the file name's last 40 characters at most ('_'
 * for all but [A-Za-z0-9._-]), HASH 32 hex digits of XXH3-128 over the
 * path, version and size, BS the block size as typed ("8M"). Only
 * [A-Za-z0-9._-/] appear: safe as an S3 key. Returns 0, -ENAMETOOLONG or
 * -ENOMEM.
 */
MCFS_MUST_CHECK int cache_shared_key(const char *store, uint64_t bs,
				     const struct cache_shared_block *blk, char *out,
				     size_t outlen);

/* The cluster's key (shared_key_file), which seals and checks blocks (shared_seal.c). */
struct cache_shared_seal;

/*
 * Reads the key file @path: its bytes less trailing newlines and spaces, at
 * least CACHE_SHARED_KEY_MIN of them; a regular file that only its owner may
 * read or write. Returns 0 with *out set (free with cache_shared_seal_free()),
 * or -errno, logged as an error naming the file and the fix: -ENOENT and the
 * like (open), -EPERM (group or others may read or write it), -EINVAL (not a
 * regular file, too short, too long), -ENOMEM, -ENOSYS (no HMAC in libcrypto).
 * The key is never logged.
 */
MCFS_MUST_CHECK int cache_shared_seal_load(const char *path, struct cache_shared_seal **out);

/* A seal of @len bytes at @key (copied), for tests: 0, -EINVAL (length), -ENOMEM or -ENOSYS. */
MCFS_MUST_CHECK int cache_shared_seal_new(const void *key, size_t len,
					  struct cache_shared_seal **out);

/* Clears the key and frees @s. NULL is ignored. */
void cache_shared_seal_free(struct cache_shared_seal *s);

/* Writes the trailer of @len bytes at @data stored as @key into @out. 0, or -ENOMEM. */
MCFS_MUST_CHECK int cache_shared_trailer(const struct cache_shared_seal *s, const char *key,
					 const void *data, uint32_t len,
					 unsigned char out[CACHE_SHARED_TRAILER]);

/*
 * Checks @trailer against @len bytes at @data stored as @key, sealed with
 * @s. Returns 0; -EBADMSG (no trailer of ours, or another length: damaged, or
 * not a block), -EKEYREJECTED (the MAC does not match: forged, sealed with
 * another key, or its bytes damaged), both with *why (static text) saying
 * what did not match; or -ENOMEM.
 */
MCFS_MUST_CHECK int cache_shared_verify(const struct cache_shared_seal *s, const char *key,
					const void *data, uint32_t len,
					const unsigned char trailer[CACHE_SHARED_TRAILER],
					const char **why);

/* What a get found, and so what the caller does after fetching from the store. */
enum cache_shared_got {
	CACHE_SHARED_SKIP,  /* not asked (down): fetch from the store, write nothing */
	CACHE_SHARED_HIT,   /* the block is in the buffer, verified */
	CACHE_SHARED_MISS,  /* not there: fetch, then write it (if still absent) */
	CACHE_SHARED_OWNED, /* not there, and this node holds its lease: fetch, write */
	CACHE_SHARED_BAD,   /* a refused copy (corrupt or unauthentic): fetch, write it over */
	/* asked, and the request failed (the tier may still be up: one late
	 * answer on a busy service): fetch, then write it if still up and absent */
	CACHE_SHARED_FAILED,
	/* another node fetches it: parked (blk->park), the calling thread free;
	 * wake(ctx, park, resume) says when to call cache_shared_get() again */
	CACHE_SHARED_PARKED,
};

/*
 * Opens the tier at cfg->shared_cache for a store named @store (borrowed for
 * the call; see cache_shared_key()) with blocks of @bs bytes, and starts its
 * writer threads, and (leases on) its parker thread. @done(@ctx, arg) is
 * called once for each put accepted, after it was written or dropped;
 * @wake(@ctx, park, resume, wait_until) once for each block parked, from the
 * parker thread with no lock of the tier's held. @queue_max bounds the write queue.
 * Reads cfg->shared_key_file first: a key file refused there
 * (cache_shared_seal_load(), logged) fails the open. Then checks the bucket
 * and the credentials: returns -EACCES (refused) or -ENOENT (no such
 * bucket), both logged as errors, which fail the mount; a service that does
 * not answer leaves the tier down (a warning), tried again later. Returns 0
 * with *out set, or a negative errno.
 */
MCFS_MUST_CHECK int cache_shared_open(const struct cfg *cfg, const char *store, uint64_t bs,
				      unsigned queue_max, void (*done)(void *ctx, void *arg),
				      void (*wake)(void *ctx, void *park, int resume,
						   uint64_t wait_until),
				      void *ctx, struct cache_shared **out);

/* Ends waits for other nodes' blocks now (the cache is stopping): every parked
 * block is woken with CACHE_SHARED_WAITED, and no wake comes after the return.
 * Can't fail. */
void cache_shared_stop(struct cache_shared *sh);

/* Writes what is queued (or drops it if the tier is down), calls every
 * pending done, stops the writers and frees the tier. NULL is ignored. */
void cache_shared_close(struct cache_shared *sh);

/*
 * Looks for @blk (a whole block) and, when found and verified, puts its
 * blk->len bytes in @buf (which must hold them). A block another node
 * fetches is parked (CACHE_SHARED_PARKED, @buf untouched) until wake()
 * hands it back. Returns what it found.
 */
enum cache_shared_got cache_shared_get(struct cache_shared *sh,
				       const struct cache_shared_block *blk, void *buf);

/*
 * Queues a write of @blk's bytes at @data (borrowed until done(ctx, @arg)),
 * after a get answered @got (MISS, OWNED or BAD). Returns 0 (queued: done
 * will be called), -EAGAIN (the queue is full; dropped and counted) or
 * -ENOTCONN (the tier is down or refuses writes). With OWNED, a full queue
 * is waited on first, up to shared_wait.
 */
MCFS_MUST_CHECK int cache_shared_put(struct cache_shared *sh, const struct cache_shared_block *blk,
				     const void *data, enum cache_shared_got got, void *arg);

/* The tier's counters into the shared_* rows of @out (all 0 with @sh NULL). */
void cache_shared_get_stats(struct cache_shared *sh, struct cache_stats *out);

#endif
