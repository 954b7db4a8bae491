/*
 * disk_int.h - what disk.c (index, reads, open/close) and disk_writer.c (the
 * write-behind thread) share. Not for use outside these two files.
 *
 * In memory the tier mirrors its LMDB index: one struct dslot per slot of
 * the slot file, a hash from key to slot, an LRU of VALID slots nobody
 * reads, and a free stack. disk->lock guards all of it (see disk.h).
 */
#ifndef MCFS_CACHE_DISK_INT_H
#define MCFS_CACHE_DISK_INT_H

#include <liburing.h>
#include <pthread.h>

#include "disk.h"
#include "mcfs_lock.h"

#define DNIL UINT32_MAX /* "no slot" in the index links */

enum dslot_state {
	DS_FREE,    /* on the free stack; no index entry points here */
	DS_WRITING, /* in the hash (a read misses); the writer owns the bytes */
	DS_VALID,   /* in the hash and the index; on the LRU when readers == 0 */
	DS_DEAD,    /* out of the hash; its index entry is being deleted */
};

/* One slot. All fields guarded by disk->lock. */
struct dslot {
	struct cache_meta_key key; /* meaningful unless FREE */
	uint64_t csum;		   /* XXH3_64bits of len bytes, VALID */
	uint64_t last_use;	   /* wall clock ns */
	uint32_t len;		   /* valid bytes */
	uint32_t readers;	   /* reads in flight: never reused while > 0 */
	uint32_t hnext;		   /* hash chain */
	uint32_t prev, next;	   /* LRU links; sentinel is slot index nslots */
	uint8_t state;		   /* enum dslot_state */
	bool dirty;		   /* last_use is newer than the index's */
	bool on_lru;
};

/* A queued write-behind. */
struct djob {
	struct cache_meta_key key;
	const char *data;
	uint32_t len;
	void *arg;
};

/* A read ring, one per concurrent reader, pooled (rings are not thread safe). */
struct dring {
	struct io_uring ring;
	struct dring *next;
};

struct cache_disk {
	struct cache_meta *meta; /* borrowed */
	uint64_t bs;		 /* block size, bytes */
	uint32_t nslots;
	int fd; /* the slot file; O_DIRECT when the filesystem allows */
	bool direct;
	char path[4200]; /* the slot file, for log lines */
	void (*done)(void *ctx, void *arg);
	void *ctx;

	pthread_mutex_t lock;
	pthread_cond_t work;	/* a job was queued, or stopping */
	pthread_cond_t drained; /* the writer finished a batch */

	struct dslot *slots;  /* nslots + 1 (the LRU sentinel); guarded by lock */
	uint32_t *buckets;    /* hash heads; guarded by lock */
	uint32_t nbuckets;    /* power of two */
	uint32_t *free_stack; /* guarded by lock */
	uint32_t nfree;
	struct djob *q; /* ring buffer of jobs; guarded by lock */
	unsigned qmax, qhead, qlen;
	unsigned writing;	    /* jobs taken by the writer, not finished; guarded by lock */
	bool stopping;		    /* guarded by lock */
	bool full;		    /* ENOSPC seen; guarded by lock */
	bool ndirty;		    /* some slot is dirty; guarded by lock */
	struct cache_disk_stats st; /* counters; guarded by lock */
	struct dring *rings;	    /* idle read rings; guarded by lock */

	pthread_t writer;
	bool writer_started;
};

/* disk.c: index helpers, lock held. */
uint32_t cache_disk_find(struct cache_disk *d, const struct cache_meta_key *k);
void cache_disk_hash_insert(struct cache_disk *d, uint32_t i);
void cache_disk_hash_remove(struct cache_disk *d, uint32_t i);
void cache_disk_lru_del(struct cache_disk *d, uint32_t i);
void cache_disk_lru_push(struct cache_disk *d, uint32_t i);

/*
 * Runs a block read or write of @len bytes at slot @slot through @ring, in
 * 1 MiB pieces submitted together. Returns 0 or a negative errno (-EIO for
 * a short transfer). No lock held.
 */
MCFS_MUST_CHECK int cache_disk_rw(struct cache_disk *d, struct io_uring *ring, bool write,
				  uint32_t slot, char *buf, uint32_t len);

/* disk_writer.c */
void *cache_disk_writer(void *arg);

#endif
