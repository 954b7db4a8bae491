/*
 * shared_int.h - what the shared tier's own files share (shared.c: writes,
 * life; shared_read.c: reads, and who fetches a missed block; shared_health.c:
 * the up/down states). Not for use
 * outside them: the tier's interface is shared.h.
 */
#ifndef MCFS_CACHE_SHARED_INT_H
#define MCFS_CACHE_SHARED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "blob.h"
#include "shared.h"

#define SHARED_RETRY_S 5 /* a down tier is probed this often: a restart's time */
/* Writer threads: a PUT of 8 MiB waits on the service more than on us, and a
 * node that holds leases must write as fast as it fetches, or others wait. */
#define SHARED_WRITERS 4
#define NS_PER_S 1000000000ull

enum { H_UP = 0, H_DOWN = 1 };

/* What cache_shared_begin() allows: nothing (down), a request, or the one probe of a down state. */
enum ticket { T_NONE, T_NORMAL, T_PROBE };

struct health {
	const char *what;	       /* "reads" or "writes", for log lines */
	atomic_int state;	       /* H_UP or H_DOWN */
	atomic_bool probing;	       /* H_DOWN: the probe is out */
	atomic_uint_fast64_t retry_ns; /* H_DOWN: when the next probe may go */
	unsigned long long since_ns;   /* guarded by sh->lock: when it went down */
};

/* A run's lease object: a block's key and "-runN.lease" */
#define SHARED_LEASE_KEY_MAX (CACHE_SHARED_KEY_MAX + 32)
/* Runs this node remembers (shared_read.c): more than a node reads at once. */
#define SHARED_RUNS 64

struct put_job {
	char key[CACHE_SHARED_KEY_MAX];
	char lkey[SHARED_LEASE_KEY_MAX]; /* owned: its run's lease */
	const void *data;		 /* borrowed until done() */
	uint32_t len;
	bool check; /* HEAD first: another node may have written it */
	bool owned; /* this node holds the block's lease: other nodes wait for it */
	void *arg;
};

/* What this node knows of a run's lease: being asked, ours, another node's,
 * or given back by us (shared_read.c). */
enum run_state { RUN_FREE, RUN_CLAIMING, RUN_OURS, RUN_THEIRS, RUN_GIVEN };

struct shared_run {
	char key[SHARED_LEASE_KEY_MAX];
	enum run_state state;
	uint64_t since_ns; /* when it was learned (ours: when our lease was written) */
	uint64_t until_ns; /* it holds until then (CLOCK_MONOTONIC, mcfs_now_ns()) */
	bool refreshing;   /* ours: one thread writes the lease again */
	/* Claimed in the background (the claimer thread): this node seemed
	 * alone, so its misses of the run go to the store meanwhile. */
	bool early;
	bool early_queued; /* early, and the claimer has not taken it yet */
	/* Ours, and its lease did not exist when we claimed it: no other node
	 * fetched any of its blocks (unasked(), shared_read.c). */
	bool untouched;
	uint64_t next; /* its blocks from this index on: not fetched by this node yet */
};

struct cache_shared {
	struct remote_blob *blob;
	struct cache_shared_seal *seal; /* the cluster's key: seals and checks blocks */
	const char *name;		/* s3://bucket/prefix, for logs */
	char store[128];		/* cache_store_dir_name() of the store */
	uint64_t bs;
	double wait_s;	     /* shared_wait */
	uint64_t run_blocks; /* shared_run in blocks, at least 1 */
	double timeout_s;    /* shared_timeout */
	char node[96];	     /* this daemon in leases: host name and a random number */
	void (*done)(void *ctx, void *arg);
	void *ctx;
	struct health rd, wr;
	atomic_uint settle_us; /* twice a small request's recent latency */
	/* when a request was first cut by the service's silence (shared_health.c),
	 * or 0; a byte heard after it starts the count again */
	atomic_uint_fast64_t quiet_ns;
	atomic_uint waited_ms; /* how long waits for other nodes' blocks took lately */

	pthread_mutex_t lock;	  /* guards the queue, closing and state changes */
	pthread_cond_t work;	  /* the queue got a job, or closing */
	pthread_cond_t room;	  /* a writer took a job: the queue has room (CLOCK_MONOTONIC) */
	pthread_cond_t stop_cond; /* cache_shared_stop(): wakes pauses (CLOCK_MONOTONIC) */
	struct put_job *q;	  /* ring of qmax jobs, guarded by lock */
	unsigned qmax, qhead, qn; /* guarded by lock */
	unsigned writing;	  /* guarded by lock: jobs being written now */
	bool closing;		  /* guarded by lock: writers finish the queue and end */
	atomic_bool stopping;	  /* no more waiting for other nodes */
	pthread_t writers[SHARED_WRITERS];
	unsigned nwriters;
	struct shared_run runs[SHARED_RUNS]; /* guarded by lock */
	pthread_cond_t runs_changed;	     /* a run's claim was answered (lock) */
	pthread_cond_t claims;		     /* an early claim was queued, or closing (lock) */
	pthread_t claimer;		     /* asks the early claims (shared_read.c) */
	bool claimer_on;
	/* Whether this node may seem alone (shared_read.c: alone()): it has won
	 * a claim, and when it last saw another node's recent lease (0: never). */
	atomic_bool won;
	atomic_uint_fast64_t others_ns;

	/* The shared_* rows of cache/counters.h; relaxed. */
	atomic_uint_fast64_t hits, misses, read_bytes, waits, wait_timeouts, puts, put_bytes,
	    put_skips, put_drops, corrupt, unauthentic, errors, leases, put_waits, early, unasked;
};

static inline void shared_count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A deadline @s seconds from now on CLOCK_MONOTONIC, for a timed wait. */
static inline struct timespec cache_shared_deadline(double s)
{
	struct timespec ts;
	long ns;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = ts.tv_nsec + (long)((s - (double)(long)s) * 1e9);
	ts.tv_sec += (long)s + ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	return ts;
}

/* ---- reads and leases (shared_read.c) ----------------------------------- */

/* Sets the latency estimates' first values. */
void cache_shared_lease_init(struct cache_shared *sh);

/*
 * Was a lease written within @wait_s seconds? Judged by the service's clock
 * where it gave one: @date_ns (the Date of its answer) less @modified_ns (the
 * lease's Last-Modified), whole seconds each, so a second more is allowed
 * either way. Without them, by the writer's clock (@written_ms, the lease's
 * body) against this node's (@now_ms), @wait_s either way. Pure.
 */
bool cache_shared_lease_fresh(int64_t date_ns, int64_t modified_ns, uint64_t written_ms,
			      uint64_t now_ms, double wait_s);

/* Names the lease of @blk's run into @out. 0 or -ENAMETOOLONG / -ENOMEM. */
int cache_shared_lease_key(const struct cache_shared *sh, const struct cache_shared_block *blk,
			   char *out, size_t len);

/*
 * Gives back the run lease @lkey, one of whose blocks this node will not
 * write after all: a waiting node claims it, instead of all of them waiting
 * shared_wait and going to the store. Sent once per run, also while writes
 * are counted down (one small request, and the waiters need it most then),
 * but not while the tier is; it changes no state. Failing, the lease
 * expires after shared_wait.
 */
void cache_shared_give_back(struct cache_shared *sh, const char *lkey);
/*
 * The claimer thread: takes the early claims run_owner() queues (sh->claims),
 * asks the service for each and records the answer; ends when closing.
 */
void *cache_shared_claimer(void *arg);
/* What this node knows of run @lkey now, for the write of one of its missed
 * blocks: RUN_OURS (held), RUN_CLAIMING (an early claim, not answered yet),
 * or RUN_FREE (anything else). Called with sh->lock held. */
enum run_state cache_shared_run_now(struct cache_shared *sh, const char *lkey);

/* ---- health (shared_health.c) ------------------------------------------- */

/* May a request go? T_NORMAL (up), T_PROBE (down, and this one probes) or T_NONE. */
enum ticket cache_shared_begin(struct health *h);

/* A request of ticket @t went well: a probe brings its state up (one line). */
void cache_shared_went_well(struct cache_shared *sh, struct health *h, enum ticket t);

/* Ends a probe ticket of @h whose failure another state answers for. */
void cache_shared_release(struct health *h, enum ticket t);

/*
 * A request of ticket @t (@op on @key) failed, as @res says: an up state goes
 * down, logged once; but for reads, a busy service (res->busy), or one whose
 * silence just began (res->quiet), changes no state. Counts the error.
 */
void cache_shared_went_wrong(struct cache_shared *sh, struct health *h, enum ticket t,
			     const char *op, const char *key, const struct remote_blob_res *res);

/* A write (@op on @key, @rc) failed: the whole tier down (or busy), or its writes refused. */
void cache_shared_write_failed(struct cache_shared *sh, enum ticket wt, int rc, const char *op,
			       const char *key, const struct remote_blob_res *res);

#endif
