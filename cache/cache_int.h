/*
 * cache_int.h - what the files of cache/ share: the layout of the cache, its
 * slots and file identities. Not for use outside cache/.
 *
 * Lock: one mutex, cache->lock, guards every field marked "guarded by lock"
 * below: the block hash, the LRU and free lists, the job queue, the file table
 * and the counters. It is a leaf lock: nothing else is taken while it is held,
 * and it is never held across store I/O. Its place among the daemon's locks:
 * the lock order at the top of cache.h.
 */
#ifndef MCFS_CACHE_INT_H
#define MCFS_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "budget.h"
#include "cache.h"
#include "cache_stats.h"
#include "disk.h"
#include "mcfs_lock.h"
#include "meta.h"
#include "remote.h"
#include "shared.h"

enum slot_state {
	SLOT_FREE,    /* on the free list, in no hash chain */
	SLOT_LOADING, /* in the hash; a fetch thread owns data; maybe on the job queue */
	SLOT_READY,   /* in the hash; data holds len valid bytes */
	SLOT_ERROR,   /* out of the hash; err says why; freed when the last ref goes */
};

/* A RAM-tier slot. All fields guarded by cache->lock, except data's contents
 * while LOADING (written by the one fetch thread that holds the job). */
/* Links of a block owed to the disk tier (tiers.c), and a list of them. */
struct cache_owed_link {
	struct cache_block *prev, *next;
};
struct cache_owed_list {
	struct cache_block *first, *last;
};

struct cache_block {
	struct cache_file *file; /* owner identity while not FREE */
	uint64_t index;		 /* block number in the file */
	char *data;		 /* block_size bytes of the region, fixed for the slot */
	uint32_t len;		 /* bytes of the block when READY (block_size, less at EOF) */
	uint32_t vlo, vhi;	 /* the range the current (or last) fetch job asked for */
	uint64_t *pages;	 /* bitmap of the 4 KiB pages held: all of them but for a
				    random reader's partial block (cache->page_words words) */
	bool extending;		 /* READY, and a job fetches more of its pages */
	int xerr;		 /* negative errno of the last failed extension, or 0 */
	enum slot_state state;
	int err;	 /* negative errno when ERROR */
	unsigned refs;	 /* readers + the job; > 0 means never evicted */
	bool prefetched; /* fetched by readahead, not read yet: counts in prefetch_bytes */
	bool queued;	 /* on the job queue, not yet taken by a fetch thread */
	bool warm;	 /* a warm-up fetch: counts in cache->warm_jobs while LOADING */
	bool bg_job;	 /* a background job: holds a CACHE_CLAIM_PREFETCH until it ends */
	struct cache_ra_tally *tally; /* while prefetched: the tally of the stream that
					 asked for it (a reference), or NULL */
	/* Where the last job's bytes came from (enum cache_fill), so that
	 * write-behind knows which tiers lack the block. Written by the fetch
	 * thread that holds the job, read by it after. */
	unsigned char fill;
	/* How the shared tier hands back a job it parked (enum
	 * cache_shared_resume), for the job's next ask; 0 otherwise. */
	unsigned char shared_resume;
	uint64_t shared_wait_until; /* and the bound of its wait (cache_shared_block) */
	/* READY, and its fetch thread is queuing its write-behind (the job's
	 * reference still held): cache_block_settle() waits for that. */
	bool behind_pending;
	/* Owed to the disk tier: whole, lacking there, its write-behind found the
	 * queue full. On c->owed (oall) and on its file's list (ofile) while
	 * hashed; tiers.c queues it when the writer has room. */
	bool owed;
	struct cache_owed_link oall, ofile;
	struct cache_block *hnext;	 /* hash chain */
	struct cache_block *prev, *next; /* LRU list (READY, refs 0), free list or job queue */
};

/*
 * What became of one readahead stream's prefetches: shared by the stream
 * (readahead.c) and each block it prefetched that nobody has read yet, so
 * that the stream learns when its reader did not get to them before they
 * were evicted. Freed with the last reference (cache_ra_tally_put()).
 */
struct cache_ra_tally {
	unsigned refs;		     /* guarded by cache->lock */
	atomic_uint_fast64_t unused; /* its prefetched blocks evicted before any read */
	atomic_uint_fast64_t used;   /* its prefetched blocks read */
};

/* One version of one store file, while anything refers to it (cache.c): a
 * reopen finds the blocks read before as long as the RAM tier holds one. */
struct cache_file {
	struct cache_file *hnext; /* file table chain, guarded by lock */
	uint64_t id;		  /* unique within the cache, never reused */
	/* Guarded by lock: cache_file_get()'s references (opens, streams, loads)
	 * plus one per RAM slot whose block is of this file (start_loading() to
	 * the slot's reuse or free); the last cache_file_unref() frees it. */
	unsigned refs;
	uint64_t size; /* bytes */
	uint64_t nblocks;
	char *path;
	char version[CACHE_VERSION_MAX];
	/* Its blocks owed to the disk tier, oldest first (guarded by lock), so
	 * that a whole fetch pays its own without walking every file's. */
	struct cache_owed_list owed;
};

/* A list with a sentinel: LRU (head = least recently used), free, jobs. */
struct slot_list {
	struct cache_block head;
	size_t n;
};

struct cache {
	const struct cfg *cfg; /* borrowed */
	struct remote *remote; /* the store: opened by cache_new(), closed by cache_free() */
	uint64_t bs;	       /* block size, bytes */
	unsigned bs_shift;     /* log2(bs) */
	char *region;	       /* nslots * bs bytes, mmap'd */
	size_t region_len;
	struct cache_block *slots;
	size_t nslots;
	uint64_t *page_bits;	  /* nslots * page_words words: the slots' page bitmaps */
	size_t page_words;	  /* words per bitmap: block_size / 4 KiB / 64, rounded up */
	uint64_t prefetch_budget; /* bytes */

	pthread_mutex_t lock;
	pthread_cond_t loaded;	 /* some LOADING slot left that state */
	pthread_cond_t freed;	 /* a slot went to the free list or the LRU */
	pthread_cond_t work;	 /* the job queue got a job, or stopping */
	pthread_cond_t gpu_turn; /* a GPU load waiting for a window got one */

	struct cache_block **buckets;	  /* guarded by lock */
	size_t nbuckets;		  /* power of two */
	struct slot_list lru, free, jobs; /* guarded by lock */
	/* Blocks owed to the disk tier, oldest first (b->owed; guarded by lock) */
	struct cache_owed_list owed;
	size_t nowed;
	struct cache_file **fbuckets; /* guarded by lock */
	size_t nfbuckets;
	uint64_t next_file_id;	    /* guarded by lock */
	uint64_t nfiles;	    /* guarded by lock: identities in fbuckets */
	bool stopping;		    /* guarded by lock */
	unsigned inflight;	    /* guarded by lock: fetches running */
	uint64_t prefetch_bytes;    /* guarded by lock */
	unsigned nwhole;	    /* guarded by lock: whole fetches running (whole.c) */
	uint64_t whole_t0;	    /* guarded by lock: when the first of them started */
	unsigned warm_jobs;	    /* guarded by lock: warm-up fetches queued or running */
	struct cache_stats st;	    /* guarded by lock (counters only) */
	struct cache_budget budget; /* guarded by lock: the slots' one budget (budget.h) */

	atomic_uint_fast64_t reads, read_bytes; /* cache_read()'s counters (relaxed) */
	/* cache_confirm()'s counters (relaxed), and whether offline said it serves
	 * unconfirmed versions (once per mount) */
	atomic_uint_fast64_t open_checks, offline_opens;
	atomic_bool offline_said;
	/* Wall time (cache_meta_now()) of the last cache_distrust(): answers
	 * recorded in LMDB before it are stale whatever their age. 0: none. */
	atomic_int_fast64_t distrust_before;

	/* ram.c: the NUMA plan and the prefault threads (ram_prefault), or NULL
	 * before cache_ram_place(); set there once, freed by cache_ram_stop(). */
	struct cache_ram_numa *numa;
	atomic_uint numa_nodes;		     /* nodes the region is placed on, for stats */
	atomic_bool prefault_stop;	     /* cache_free(): stop early */
	atomic_int prefault_state;	     /* CACHE_PREFAULT_*, for stats */
	atomic_uint_fast64_t prefault_bytes; /* faulted in so far */
	pthread_t *threads;
	unsigned nthreads;

	/* Disk tier and persistent metadata (cache_dir): NULL when RAM only.
	 * Set up in cache_new(), fixed afterwards; they have their own locks. */
	struct cache_meta *meta;
	struct cache_disk *disk;
	int lockfd; /* flock'd CACHE_DIR/lock: one daemon per cache_dir; -1 if none */
	/* The shared tier (cfg->shared_cache), or NULL: set up in cache_new(),
	 * fixed afterwards; it has its own lock. */
	struct cache_shared *shared;
	/* Why disk is NULL (enum cache_disk_off) and the errno behind it, or 0:
	 * set with it, fixed afterwards. */
	int disk_off, disk_off_errno;
	/* Backing files for FUSE passthrough (backing.c): NULL without a disk
	 * tier. Set up with the disk tier, fixed afterwards; its own lock. */
	struct cache_backing *backing;
	/* Whole files at a cold open (whole.c): NULL without a disk tier or with
	 * cold_whole=off. Set up with the disk tier, fixed afterwards; its own lock. */
	struct cache_whole *whole;
};

/*
 * Bytes of block @index of @f (index < f->nblocks): block_size, or less for
 * the file's last block. The one place this is worked out; cache_span()
 * gives it to callers outside the cache. Can't fail.
 */
static inline uint32_t cache_file_block_len(const struct cache *c, const struct cache_file *f,
					    uint64_t index)
{
	return (uint32_t)MCFS_MIN(c->bs, f->size - (index << c->bs_shift));
}

/* Where a block's bytes came from, and what the shared tier said (cache_block.fill). */
enum cache_fill {
	CACHE_FILL_STORE,	/* the store; the shared tier was not asked (off, down, partial) */
	CACHE_FILL_DISK,	/* the disk tier */
	CACHE_FILL_SHARED,	/* the shared tier */
	CACHE_FILL_STORE_MISS,	/* the store, after a shared miss: write it there (HEAD first) */
	CACHE_FILL_STORE_OWNED, /* the store, holding the block's lease: write it there */
	CACHE_FILL_STORE_BAD,	/* the store; the shared copy was corrupt: write it over */
};

/* Drops one reference to @f; the last one takes it out of the file table and
 * frees it. Lock held. */
void cache_file_unref(struct cache *c, struct cache_file *f);

/* blocks.c: the slots' lists, hash and page bitmaps, for cache.c's setup and the
 * fetch threads. Lock held, but for the bitmaps of a block the caller's job owns. */
void cache_lists_init(struct cache *c);
void cache_list_push_back(struct slot_list *l, struct cache_block *b);
void cache_list_del(struct slot_list *l, struct cache_block *b);
struct cache_block *cache_list_first(struct slot_list *l); /* NULL when empty */
void cache_hash_remove(struct cache *c, struct cache_block *b);
/* b was read (or is gone): it no longer counts as readahead. */
void cache_drop_prefetched(struct cache *c, struct cache_block *b);
/* Queues b's fetch job: at the head (@urgent: a reader waits) or the tail. */
void cache_enqueue(struct cache *c, struct cache_block *b, bool urgent);
/* Drops one reference; the last one makes the slot evictable or free. */
void cache_unref(struct cache *c, struct cache_block *b);
bool cache_page_held(const struct cache_block *b, uint32_t p);
void cache_pages_set(struct cache_block *b, uint32_t lo, uint32_t hi); /* [lo, hi) */
/* fetch_thread.c: a fetch thread's loop (cache.c starts them). */
void *cache_fetch_thread(void *arg);
/* Takes a reference of a READY block b (off the LRU list while held). Lock held. */
void cache_block_hold(struct cache *c, struct cache_block *b);
/*
 * whole.c's wait on the fetch threads: sleeps while block @index of @f is
 * being fetched into the RAM tier, or its write-behind being queued (so
 * that a flush after it finds the block written; before, a fetch thread
 * slow to queue it made a whole fetch give up: @index < 0: until some fetch
 * ends, or 10 ms). Returns true if the block is READY in the RAM tier now.
 * Lock not held.
 */
bool cache_block_settle(struct cache *c, struct cache_file *f, int64_t index);
/* Drops a write-behind reference of b (a writer's, taken with a
 * CACHE_CLAIM_BEHIND): the claim and the reference. Lock not held. */
void cache_block_put_behind(struct cache *c, struct cache_block *b);

/* ram.c: the region (c->nslots * c->bs bytes, on a huge-page boundary,
 * untouched): 0 or -errno, with c->region and c->region_len set. */
MCFS_MUST_CHECK int cache_ram_alloc(struct cache *c);
/* ram.c: stops and joins the prefault threads and frees the plan; the region
 * stays mapped (cache_free() unmaps it last). Safe before cache_ram_place(). */
void cache_ram_stop(struct cache *c);

/* tiers.c: the disk tier and metadata store under cfg->cache_dir (no-ops without). */
/*
 * Names this store's directory under cache_dir: "KIND-SLUG-HASH", where HASH
 * is 16 hex digits of XXH3-64 over the source (no "file://", no trailing '/')
 * and, for s3://, the endpoint and region; SLUG is the source's last 48
 * characters at most, without its scheme, with '_' for all but
 * [A-Za-z0-9._-]. Returns 0, or -ENAMETOOLONG if outlen is too small.
 */
MCFS_MUST_CHECK int cache_store_dir_name(const struct cfg *cfg, const char *kind, char *out,
					 size_t outlen);
void cache_tiers_open(struct cache *c);	 /* can't fail: RAM only, with a warning */
void cache_tiers_close(struct cache *c); /* after the fetch threads stopped; shared, then disk */
/* Opens the shared tier (cfg->shared_cache): 0, or -errno that fails the mount. */
MCFS_MUST_CHECK int cache_tier_shared_open(struct cache *c);
/* Ends the shared tier's waits for other nodes (before the fetch threads are joined). */
void cache_tier_shared_stop(struct cache *c);
/* What cache_tier_fill() did with a block. */
enum cache_tier_got {
	CACHE_TIER_NONE,   /* no tier holds it: the store */
	CACHE_TIER_FILLED, /* filled from the disk or the shared tier */
	CACHE_TIER_PARKED, /* parked in the shared tier, which hands it back (cache_block_resume) */
};
/*
 * Fills b's slot with its whole block from the disk tier, else (for a job
 * that wants the whole block) from the shared tier, verified; sets b->fill
 * either way. May park the job while another node fetches the block
 * (shared.h): the job is then the shared tier's until it calls
 * cache_block_resume(). No lock held.
 */
enum cache_tier_got cache_tier_fill(struct cache *c, struct cache_block *b, uint32_t *len);
/*
 * Queues b's job again, at the front, after the shared tier parked it;
 * @resume (enum cache_shared_resume) and @wait_until (the bound of its
 * wait) go with the next ask. Takes c->lock.
 */
void cache_block_resume(struct cache *c, struct cache_block *b, int resume, uint64_t wait_until);
/* True if b, just filled (b->fill), should be written behind to a tier that
 * lacks it: a whole block. Lock held. */
bool cache_tier_wants(const struct cache *c, const struct cache_block *b);
/* Queues b's write-behind; takes over one reference of b. No lock held. */
void cache_tier_behind(struct cache *c, struct cache_block *b);
/* The disk and shared writers' done callback: drops the reference write-behind held,
 * then queues owed blocks while the disk writer has room. */
void cache_disk_done(void *ctx, void *arg);
/* b leaves the hash (evicted, dropped, failed): no longer owed. Lock held. */
void cache_owed_forget(struct cache *c, struct cache_block *b);
/* Queues every owed block (of @f only, if not NULL), waiting for room for each
 * (unmount; an open that wants @f whole on disk). No lock held. */
void cache_tier_pay_owed(struct cache *c, const struct cache_file *f);
/* Disk-tier bytes of f's blocks that in_ram[] says RAM lacks. No lock held. */
uint64_t cache_tier_file_bytes(struct cache *c, struct cache_file *f, const bool *in_ram);
/* Adds the disk tier's counters, or why there is none. No lock held. */
void cache_tier_stats(struct cache *c, struct cache_stats *out);

/* blocks.c: drops @f's unreferenced blocks from the RAM tier; returns the bytes. */
uint64_t cache_ram_drop_file(struct cache *c, struct cache_file *f);

/* backing.c: passthrough over the disk tier's version files (c->disk set). Returns 0
 * or -ENOMEM (then no passthrough). */
MCFS_MUST_CHECK int cache_backing_open(struct cache *c);
void cache_backing_close(struct cache *c); /* NULL backing is fine */
/* Marks @path's pinned versions (open through passthrough) to be evicted at their
 * last put; returns how many there are (the disk tier kept their blocks). */
unsigned cache_backing_evict_path(struct cache *c, const char *path);
/*
 * backing.c's copies in memory (whole_mem.c). mem_claim: takes @bytes of
 * whole_mem (false: no room, or whole_mem 0); mem_release gives them back.
 * mem_add: @fd (sealed, of @f's bytes) becomes @f's backing file until the
 * last put of its gets; it takes @fd and the claim in any case; 0, -EEXIST
 * (the version is handed out already) or -ENOMEM.
 */
bool cache_backing_mem_claim(struct cache *c, uint64_t bytes);
void cache_backing_mem_release(struct cache *c, uint64_t bytes);
MCFS_MUST_CHECK int cache_backing_mem_add(struct cache *c, struct cache_file *f, int fd);
/* whole_mem.c: a detached tmpfs of at most @limit bytes with huge pages, for
 * the copies: its mount's descriptor, or -errno (EPERM: not root). */
int cache_whole_mem_mount(uint64_t limit);

/* backing.c: that mount's descriptor, made at the first call; -1 if none. */
int cache_backing_mem_mount(struct cache *c);

/* whole_mem.c: fills a memfd with @f's bytes through the cache, sealed, and
 * makes it @f's backing file (above). 0, or -errno (logged): none made. */
MCFS_MUST_CHECK int cache_whole_mem(struct cache *c, struct cache_file *f);
/* whole.c: set up with the disk tier (0, or -ENOMEM); its background thread
 * stopped before the fetch threads; freed with the disk tier. */
MCFS_MUST_CHECK int cache_whole_open(struct cache *c);
void cache_whole_close(struct cache *c);
/* Fills the backing_* counters. No lock held. */
void cache_backing_stats(struct cache *c, struct cache_stats *out);

/* Page bitmaps (blocks.c): does b hold all of [lo, hi)? all of its block? */
bool cache_block_covers(const struct cache_block *b, uint32_t lo, uint32_t hi);
bool cache_block_full(const struct cache_block *b);

struct cache_stream;

/* readahead.c: the cache and the file (the stream's reference) a stream reads. Can't fail. */
struct cache *cache_stream_cache(const struct cache_stream *s);
struct cache_file *cache_stream_file(const struct cache_stream *s);

/*
 * Readahead's prefetch (blocks.c): as cache_prefetch(), and a block it starts
 * holds a reference to @t until it is read or evicted (counted in t->unused
 * when evicted unread). The stream's lock is held; takes c->lock.
 */
MCFS_MUST_CHECK int cache_prefetch_for(struct cache *c, struct cache_file *f, uint64_t index,
				       struct cache_ra_tally *t);
/* Drops a reference to @t; the last one frees it. Takes c->lock. */
void cache_ra_tally_put(struct cache *c, struct cache_ra_tally *t);
/* The same with c->lock held: for blocks.c and cache_free(). */
void cache_ra_tally_unref(struct cache *c, struct cache_ra_tally *t);

/* Records a readahead window size in the stats histogram. */
void cache_note_window(struct cache *c, unsigned window);

#endif
