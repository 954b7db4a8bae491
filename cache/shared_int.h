/*
 * shared_int.h - what the shared tier's own files share (shared.c: writes,
 * health, life; shared_read.c: reads and leases; shared_lease.c: their
 * decisions, pure). Not for use outside them: the tier's interface is
 * shared.h.
 */
#ifndef MCFS_CACHE_SHARED_INT_H
#define MCFS_CACHE_SHARED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "blob.h"
#include "shared.h"
#include "shared_lease.h"

/* Writer threads: a PUT of 8 MiB waits on the service more than on us, and a
 * node that holds leases must write as fast as it fetches, or others wait. */
#define SHARED_WRITERS 4
/* A run's lease object: a block's key and "-runN.lease" */
#define SHARED_LEASE_KEY_MAX (CACHE_SHARED_KEY_MAX + 32)
/* Between two looks at a lease another node holds, at most (a quarter of shared_wait if less) */
#define SHARED_LOOK_NS 250000000ull

struct put_job {
	char key[CACHE_SHARED_KEY_MAX];
	char lkey[SHARED_LEASE_KEY_MAX]; /* owned: its run's lease */
	uint64_t index;			 /* owned: the block's number in its run */
	const void *data;		 /* borrowed until done() */
	uint32_t len;
	bool check; /* HEAD first: another node may have written it */
	bool owned; /* this node holds the block's lease: other nodes wait for it */
	void *arg;
};

/* A block parked while another node fetches it (shared_read.c). */
struct shared_parked {
	struct shared_parked *next;
	char lkey[SHARED_LEASE_KEY_MAX]; /* its run's lease */
	uint64_t index;			 /* its number in the run */
	uint64_t deadline_ns;		 /* woken WAITED then: twice shared_wait */
	void *park;			 /* the caller's token */
	int resume;			 /* enum cache_shared_resume, once taken off */
};

struct cache_shared {
	struct remote_blob *blob;
	struct cache_shared_seal *seal; /* the cluster's key: seals and checks blocks */
	const char *name;		/* s3://bucket/prefix, for logs */
	char store[128];		/* cache_store_dir_name() of the store */
	uint64_t bs;
	uint64_t run_blocks;	    /* shared_run in blocks, 1 to SHARED_RUN_MAX */
	uint64_t timeout_ns;	    /* shared_timeout */
	uint64_t wait_ns;	    /* shared_wait: 0 = no leases */
	char node[SHARED_NODE_MAX]; /* this daemon in leases: host name and a random number */
	atomic_int conditional;	    /* lease PUTs with If-None-Match: 1 taken, -1 refused */
	atomic_int state;	    /* health.state, for reads without the lock */
	void (*done)(void *ctx, void *arg);
	void (*wake)(void *ctx, void *park, int resume, uint64_t wait_until);
	void *ctx;

	pthread_mutex_t lock;	/* guards what follows, but the counters */
	pthread_cond_t work;	/* the queue got a job, or closing */
	pthread_cond_t room;	/* a writer took a job (CLOCK_MONOTONIC) */
	pthread_cond_t changed; /* a run's state changed, or stopping (CLOCK_MONOTONIC) */
	struct shared_health health;
	struct shared_runs runs;
	struct put_job *q; /* ring of qmax jobs */
	unsigned qmax, qhead, qn;
	unsigned writing; /* jobs being written now */
	bool closing;	  /* writers finish the queue and end */
	bool stopping;	  /* no more waiting for other nodes */
	pthread_t writers[SHARED_WRITERS];
	unsigned nwriters;
	struct shared_parked *parked; /* blocks waiting for other nodes, newest first */
	atomic_uint nparked;	      /* their number, for the stats */
	pthread_t parker;	      /* watches their runs (shared_read.c) */
	pthread_mutex_t stop_lock; /* guards parker_on: the join, once, before any stop returns */
	bool parker_on;		   /* started, and not joined yet */

	/* The shared_* rows of cache/counters.h; relaxed. */
	atomic_uint_fast64_t hits, misses, read_bytes, waits, wait_timeouts, puts, put_bytes,
	    put_skips, put_drops, corrupt, unauthentic, errors, leases, put_waits;
};

static inline void shared_count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The parker thread (shared_read.c): watches the runs of the parked blocks,
 * looks at their leases and claims them as a waiting thread would, and wakes
 * each block when it may be asked again; at stop, wakes them all WAITED. */
void *cache_shared_parker(void *arg);

/* Waits on sh->changed (sh->lock held) for @ns at most. */
void cache_shared_sleep(struct cache_shared *sh, uint64_t ns);

/* May a request for @op go now? (shared_health_ask(), under the lock) */
enum shared_ticket cache_shared_ask(struct cache_shared *sh, enum shared_op op);

/*
 * Reports request @what (@op on @key) of ticket @t: @rc and @res as blob.h
 * gave them (rc 0 for any answer that is no failure of the service). Counts
 * the error, and logs a change of the state in one line.
 */
void cache_shared_tell(struct cache_shared *sh, enum shared_ticket t, enum shared_op op, int rc,
		       const char *what, const char *key, const struct remote_blob_res *res);

/* Names the lease of @blk's run into @out. 0 or -ENAMETOOLONG / -ENOMEM. */
int cache_shared_lease_key(const struct cache_shared *sh, const struct cache_shared_block *blk,
			   char *out, size_t len);

/* PUT of lease @l as @lkey (@if_absent: If-None-Match: *). 0 or -errno (-ESTALE: one exists). */
int cache_shared_put_lease(struct cache_shared *sh, const char *lkey, const struct shared_lease *l,
			   bool if_absent, struct remote_blob_res *res);

#endif
