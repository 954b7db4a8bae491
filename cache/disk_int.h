/*
 * disk_int.h - what disk.c (index, reads, pins), disk_open.c (start and
 * stop) and disk_writer.c (the write-behind thread) share. Not for use
 * outside these three files.
 *
 * In memory the tier mirrors its LMDB index: one struct dslot per block the
 * tier may hold (disk_cache / block size of them: a "slot" is a place in
 * this table, no longer a place on disk), a hash from key to slot, an LRU of
 * VALID slots nobody reads, a free stack, a list of DEAD slots whose bytes
 * the writer is to punch out of their version file, and one struct dfile per
 * version file, counting the slots that name it. disk->lock guards all of it
 * (see disk.h).
 */
#ifndef MCFS_CACHE_DISK_INT_H
#define MCFS_CACHE_DISK_INT_H

#include <liburing.h>
#include <pthread.h>
#include <xxhash.h>
#ifdef MCFS_HAVE_XXH_DISPATCH
/* XXH3_64bits() through libxxhash's runtime dispatch: the CPU's widest vectors
 * (AVX2, AVX-512), the same hashes, faster than the SSE2 default
 * (docs/benchmarks.md, "The checksum through libxxhash's dispatch") */
#include <xxh_x86dispatch.h>
#endif

#include "disk.h"
#include "mcfs_lock.h"

#define DNIL UINT32_MAX	      /* "no slot" in the index links */
#define CACHE_DISK_FILE_ID 24 /* key bytes naming a version: path and version hashes */
#define DFILE_BUCKETS 4096
#define WB_WINDOW 32 /* the writer's window: jobs off the queue at once (disk_writer.c) */

enum dslot_state {
	DS_FREE,    /* on the free stack; no index entry points here */
	DS_WRITING, /* in the hash (a read misses); the writer owns the bytes */
	DS_VALID,   /* in the hash and the index; on the LRU when readers == 0 */
	DS_DEAD,    /* out of the hash; its index entry is being deleted, then
		     * (on the punch list) its bytes are punched by the writer */
};

/* One slot. All fields guarded by disk->lock. */
struct dslot {
	struct cache_meta_key key; /* meaningful unless FREE */
	uint64_t csum;		   /* XXH3_64bits of len bytes, VALID */
	uint64_t last_use;	   /* wall clock ns */
	uint32_t len;		   /* valid bytes */
	uint32_t readers;	   /* reads in flight: never reused while > 0 */
	uint32_t hnext;		   /* hash chain */
	uint32_t prev, next;	   /* LRU links (sentinel: slot nslots); DEAD: punch list */
	uint8_t state;		   /* enum dslot_state */
	bool dirty;		   /* last_use is newer than the index's */
	bool on_lru;
	bool old; /* found in the index at start: written by an earlier mount */
};

/*
 * One version file, blocks/<48 hex digits: the key's path and version
 * hashes>, holding block i at offset i * bs. Guarded by disk->lock.
 */
struct dfile {
	unsigned char id[CACHE_DISK_FILE_ID]; /* the first bytes of its blocks' keys */
	uint32_t nheld;			      /* slots (not FREE) and victims naming it */
	bool verified;			      /* every block checked since its last change,
					       * and none dropped since (backing_files) */
	bool superseded;		      /* a newer version of its path was pinned while
					       * blocks of this one were in use: they go at
					       * the last unpin (cache_disk_unpin_file) */
	uint32_t nold;			      /* its slots written by an earlier mount */
	uint64_t size;			      /* the version's bytes, once verified */
	uint32_t writing;		      /* writer threads writing into it now */
	struct dfile *hnext;
};

/* A queued write-behind. */
struct djob {
	struct cache_meta_key key;
	const char *data;
	uint32_t len;
	void *arg;
};

/* A job in the writer's window (disk_writer.c). Guarded by disk->lock. */
enum wjob_state {
	WJ_FREE,    /* no job */
	WJ_TAKEN,   /* off the queue, its victims' entries being deleted */
	WJ_READY,   /* to be written by the first writer thread free to */
	WJ_WRITING, /* a writer thread writes it (no lock held) */
	WJ_WRITTEN, /* written (or failed: rc), to be published */
};

struct wjob {
	struct djob job;
	struct dfile *file; /* its version file (its slot holds it), or NULL */
	uint64_t seq;	    /* order taken off the queue */
	uint64_t csum;	    /* XXH3_64bits of the bytes, once written */
	uint64_t hash_ns;   /* the write's checksum took this long (disk_writer_hash_ns) */
	uint32_t slot;	    /* DNIL: not written (no slot, or queued twice) */
	int rc;
	uint8_t state; /* enum wjob_state */
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
	bool direct;	 /* version files opened O_DIRECT (the filesystem allows it) */
	char path[4200]; /* the blocks directory, for file names and log lines */
	void (*done)(void *ctx, void *arg);
	void *ctx;

	pthread_mutex_t lock;
	pthread_cond_t work;	/* a job was queued or written, or stopping */
	pthread_cond_t drained; /* the writer took or finished jobs */

	struct dslot *slots;  /* nslots + 1 (the LRU sentinel); guarded by lock */
	uint32_t *buckets;    /* hash heads; guarded by lock */
	uint32_t nbuckets;    /* power of two */
	uint32_t *free_stack; /* guarded by lock */
	uint32_t nfree;
	uint32_t punch;			    /* DEAD slots to punch (linked by next); lock */
	unsigned punching;		    /* taken off punch by the writer; guarded by lock */
	struct dfile *files[DFILE_BUCKETS]; /* version files; guarded by lock */
	struct djob *q;			    /* ring buffer of jobs; guarded by lock */
	unsigned qmax, qhead, qlen;
	unsigned writing;	    /* jobs taken by the writer, not finished; guarded by lock */
	uint64_t queued_total;	    /* jobs ever queued; guarded by lock */
	uint64_t finished;	    /* jobs ever finished (done called); guarded by lock */
	bool stopping;		    /* guarded by lock */
	bool full;		    /* ENOSPC seen; guarded by lock */
	bool ndirty;		    /* some slot is dirty; guarded by lock */
	struct cache_disk_stats st; /* counters; guarded by lock */
	struct dring *rings;	    /* idle read rings; guarded by lock */
	uint64_t verifies;	    /* versions verified for the kernel; guarded by lock */
	uint64_t verify_errors;	    /* ... that failed their checksums; guarded by lock */

	pthread_t writer;
	bool writer_started;

	/* The writer's window (disk_writer.c): jobs off the queue, written by
	 * nwriters writer threads, published by the writer. All guarded by lock. */
	unsigned nwriters;
	struct wjob *wb;      /* WB_WINDOW entries */
	unsigned wb_busy;     /* entries not FREE */
	unsigned wb_written;  /* entries WRITTEN */
	uint64_t wb_seq;      /* next job's seq */
	unsigned wb_started;  /* writer threads started ... */
	unsigned wb_rings;    /* ... of which have a ring (the others take no job) */
	bool wb_quit;	      /* writer threads: exit */
	pthread_cond_t wb_go; /* writer threads: a job to write, or quit */
};

/* disk.c: index helpers, lock held. */
uint32_t cache_disk_find(struct cache_disk *d, const struct cache_meta_key *k);
void cache_disk_hash_insert(struct cache_disk *d, uint32_t i);
void cache_disk_hash_remove(struct cache_disk *d, uint32_t i);
void cache_disk_lru_del(struct cache_disk *d, uint32_t i);
void cache_disk_lru_push(struct cache_disk *d, uint32_t i);

/* The version file of @k's blocks, 0 or 1 reference (see struct dfile). Lock held. */
struct dfile *cache_disk_file(struct cache_disk *d, const struct cache_meta_key *k);
/* Counts one more slot naming @k's file (creating its entry). Lock held. -ENOMEM. */
MCFS_MUST_CHECK int cache_disk_file_get(struct cache_disk *d, const struct cache_meta_key *k);
/* Counts one fewer; true when none is left (the entry is gone: unlink the file). Lock held. */
bool cache_disk_file_put(struct cache_disk *d, const struct cache_meta_key *k);
/* Writes @k's version file name into @out (path under blocks/). Can't fail. */
void cache_disk_file_name(const struct cache_disk *d, const struct cache_meta_key *k, char *out,
			  size_t outlen);
/* Where block @k starts in its version file. */
uint64_t cache_disk_offset(const struct cache_disk *d, const struct cache_meta_key *k);

/*
 * Runs a block read or write of @len bytes at @off of @fd through @ring, in
 * 1 MiB pieces submitted together (writes round @len up to
 * CACHE_DISK_ALIGN; reads accept a file that ends after @len). Returns 0 or
 * a negative errno (-EIO for a short transfer). No lock held.
 */
MCFS_MUST_CHECK int cache_disk_rw(struct cache_disk *d, struct io_uring *ring, bool write, int fd,
				  uint64_t off, char *buf, uint32_t len);

/* Puts DEAD slot @i on the punch list and wakes the writer. Lock held. */
void cache_disk_punch_later(struct cache_disk *d, uint32_t i);

/* disk_writer.c */
void *cache_disk_writer(void *arg);

#endif
