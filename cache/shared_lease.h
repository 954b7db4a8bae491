/*
 * shared_lease.h - the shared tier's decisions, as pure code: the health of
 * the service, and who fetches a run of blocks. No threads, no I/O, no clock
 * of its own: the caller passes the time (CLOCK_MONOTONIC ns, mcfs_now_ns())
 * and what the service answered, and does what the answer says, so a fake
 * clock and a fake service drive it in shared_lease_test.c.
 *
 * Health: one state (up, read-only, down) and one probe while it is not up,
 * every SHARED_RETRY_NS; requests in flight when it changed change nothing,
 * so a slow service does not flap. One clock of silence sorts a cut request
 * (shared_outcome()): a service that answers our other requests is busy, not
 * gone, and costs this read a trip to the store only.
 *
 * Runs: N nodes that load one model at once miss every block together, and
 * without leases would read the model N times from the store. One lease
 * covers a run of blocks (shared_run bytes of a file). The first thread of
 * this node to miss a block of a run asks the service (STEP_ASK); the others
 * wait in memory for its answer. A run another node holds is watched by one
 * thread at a time, which reads the lease every look_ns; its bits say which
 * blocks are written, so each waiter GETs its block once, when it is there.
 * The one no-progress clock: a lease that names no new block for bound_ns
 * (shared_wait; its holder died) is taken over at the next look, one bound
 * per run, not per block. A holder writes its lease only with a new block,
 * so one written again without one (a hog) is taken over at the look that
 * sees its Last-Modified move. A waiting block's own bound is twice
 * bound_ns; then it is read from the store.
 *
 * Threads: none here; the caller holds sh->lock around every call. Not for
 * use outside cache/shared*.c.
 */
#ifndef MCFS_CACHE_SHARED_LEASE_H
#define MCFS_CACHE_SHARED_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- health: one state, with one probe while it is not up --------------- */

#define SHARED_RETRY_NS 5000000000ull /* a state that is not up is probed this often */

/* The service: up, taking reads but refusing writes (full, read-only
 * credentials), or down (no answer, 5xx): reads go to the store. */
enum shared_state { SHARED_UP = 1, SHARED_DOWN = 2, SHARED_READ_ONLY = 3 };

/* What a request is for. */
enum shared_op { SHARED_OP_READ, SHARED_OP_WRITE };

/* What shared_health_ask() allows: nothing, a request, or the state's one probe. */
enum shared_ticket { SHARED_T_NONE, SHARED_T_GO, SHARED_T_PROBE };

/* How a request went, as shared_outcome() sorts it. */
enum shared_outcome {
	SHARED_O_OK,	  /* the service answered (a miss and a refused block are answers) */
	SHARED_O_BUSY,	  /* cut while the service still talks to us: this request only */
	SHARED_O_REFUSED, /* a write refused (4xx, 507): the service takes reads only */
	SHARED_O_DOWN,	  /* no answer, a 5xx, silent for twice the timeout, 403 on a read */
};

struct shared_health {
	enum shared_state state;
	bool probing;	   /* not up: the probe is out */
	uint64_t probe_ns; /* not up: when the next probe may go */
	uint64_t since_ns; /* when the state last changed */
};

/* Starts @h up at @now. Can't fail. */
void shared_health_init(struct shared_health *h, uint64_t now);

/*
 * May a request for @op go at @now? Up: yes. Reads while writes are refused:
 * yes. Otherwise one probe every SHARED_RETRY_NS (a write probes a read-only
 * state; a read probes a down one), and nothing while the probe is out.
 */
enum shared_ticket shared_health_ask(struct shared_health *h, enum shared_op op, uint64_t now);

/*
 * Reports how a request of ticket @t for @op went. A probe that went well
 * brings its state up; a failure takes an up state down (O_DOWN) or
 * read-only (O_REFUSED on a write); O_BUSY changes nothing. Returns true
 * when the state changed (the caller logs one line), false otherwise.
 */
bool shared_health_tell(struct shared_health *h, enum shared_ticket t, enum shared_op op,
			enum shared_outcome o, uint64_t now);

/*
 * Sorts a request's result: @rc (blob.h's errors, or 0), @status (HTTP, 0 =
 * none), whether the fetch layer cut it while the service sent bytes on other
 * requests (@busy) or because it sent nothing (@quiet), or after a PUT's body
 * went out whole (@unanswered), and how long ago the service last sent us a
 * byte (@silent_ns) against @timeout_ns (shared_timeout). The one clock of
 * silence: a service silent for twice shared_timeout is down; a shorter
 * silence, or a busy or slow-to-store one, is this request's problem only.
 */
enum shared_outcome shared_outcome(enum shared_op op, int rc, long status, bool busy, bool quiet,
				   bool unanswered, uint64_t silent_ns, uint64_t timeout_ns);

/* ---- leases: one per run of a file's blocks ------------------------------ */

/*
 * The lease object of a run: "NODE BITS[ released]\n", NODE the holder,
 * BITS the run's blocks it has written so far (hex, block 0 the lowest bit
 * of the last digit). The holder writes it when it claims the run and again
 * after each block it writes: a lease that changes is progress, which is
 * what waiters watch. "released": given back (a write it could not make).
 */
#define SHARED_RUN_MAX 256 /* blocks a lease covers, at most */
#define SHARED_LEASE_MAX (96 + SHARED_RUN_MAX / 4 + 16)
#define SHARED_NODE_MAX 96

struct shared_lease {
	char node[SHARED_NODE_MAX];
	uint64_t bits[SHARED_RUN_MAX / 64];
	bool released;
	int64_t modified_ns; /* read: its Last-Modified (the service's clock); 0 = unknown */
};

/* Parses a lease body of @n bytes. Returns 0, or -EINVAL (not a lease: nobody's). */
int shared_lease_parse(const char *body, size_t n, struct shared_lease *out);

/* Writes @l as a body into @out (SHARED_LEASE_MAX bytes). Returns its length. */
size_t shared_lease_format(const struct shared_lease *l, char *out);

static inline bool shared_bit(const uint64_t *bits, uint64_t i)
{
	return (bits[i / 64] >> (i % 64)) & 1;
}

/*
 * A lease's age by the service's one clock: @date_ns (the Date of the answer
 * that brought it) less @modified_ns (its Last-Modified), each to the second,
 * so a second more is allowed. UINT64_MAX when either is missing (0). The
 * nodes' clocks are never compared.
 */
uint64_t shared_lease_age(int64_t date_ns, int64_t modified_ns);

/*
 * Who holds a run, by one read of its lease: @rc 0 with @l, -ENOENT (none),
 * -EINVAL (not a lease); @age_ns from shared_lease_age(). Returns 1 (@self's),
 * 0 (another node's: younger than @bound_ns and not released) or -ENOENT
 * (nobody's: free to claim).
 */
int shared_lease_holder(int rc, const struct shared_lease *l, uint64_t age_ns, const char *self,
			uint64_t bound_ns);

/* What this node knows of one run. */
enum shared_run_state {
	SHARED_RUN_FREE,   /* slot unused */
	SHARED_RUN_ASKING, /* one thread asks the service; the others wait for it */
	SHARED_RUN_OURS,   /* this node fetches the run's blocks and writes them */
	SHARED_RUN_THEIRS, /* another node does: wait for its blocks */
	SHARED_RUN_GIVEN,  /* this node gave it back: its misses go to the store, unleased */
};

struct shared_run {
	char key[448]; /* the lease's object name */
	enum shared_run_state state;
	uint64_t until_ns;		    /* OURS, GIVEN: forgotten then (asked again) */
	uint64_t bits[SHARED_RUN_MAX / 64]; /* OURS: written; THEIRS: the lease's, last look */
	uint64_t moved_ns;		    /* THEIRS: when the lease last showed progress */
	uint64_t seen_node;		    /* THEIRS: a hash of the holder last seen, 0 = none */
	int64_t seen_modified;		    /* THEIRS: that lease's Last-Modified */
	uint64_t look_ns;		    /* THEIRS: when the next look at the lease may go */
	bool looking;			    /* THEIRS: a thread reads the lease now */
	bool publishing;		    /* OURS: a thread writes the lease now */
	bool dirty;			    /* OURS: bits changed since that write began */
};

/* The runs a node remembers: more than it reads at once. */
#define SHARED_RUNS 64

struct shared_runs {
	struct shared_run r[SHARED_RUNS];
	uint64_t bound_ns; /* shared_wait: the longest a lease may show no progress */
	uint64_t look_ns;  /* between two looks at a lease another node holds */
};

/* What a thread that missed a block of a run does next (shared_run_step()). */
enum shared_step {
	SHARED_STEP_ASK,   /* ask the service who holds the run, then shared_run_claimed() */
	SHARED_STEP_WAIT,  /* another thread of this node asks or looks: wait, step again */
	SHARED_STEP_FETCH, /* the run is ours: fetch the block from the store, write it */
	SHARED_STEP_STORE, /* fetch it from the store, unleased (given back, or no slot) */
	SHARED_STEP_GET,   /* the holder wrote it: GET it from the shared cache */
	SHARED_STEP_LOOK,  /* read the lease, then shared_run_looked() */
};

/* Empties @rs; @bound_ns and @look_ns as above. Can't fail. */
void shared_runs_init(struct shared_runs *rs, uint64_t bound_ns, uint64_t look_ns);

/*
 * A thread missed block @index of run @key at @now: what now. *@wait_ns is
 * set with SHARED_STEP_WAIT: the longest to wait before stepping again
 * (a change of any run wakes the waiters earlier).
 */
enum shared_step shared_run_step(struct shared_runs *rs, const char *key, uint64_t index,
				 uint64_t now, uint64_t *wait_ns);

/* The answer of a STEP_ASK for @key: 1 ours, 0 another node's, < 0 nobody can tell. */
void shared_run_claimed(struct shared_runs *rs, const char *key, int rc, uint64_t now);

/*
 * What the lease of @key held at a STEP_LOOK: @rc 0 with @l, -ENOENT (gone),
 * -EINVAL (not a lease), other < 0 (the look failed); @age_ns its age by the
 * service's clock (Date less Last-Modified; UINT64_MAX unknown). Returns true
 * when the run is free to take: gone, released, unreadable, older than the
 * bound, showing no progress for the bound (the holder died), or written again
 * by its holder with no new block (a hog: a holder writes its lease only with
 * a new block); then the caller claims it (STEP_ASK's work) and reports with
 * shared_run_claimed().
 */
bool shared_run_looked(struct shared_runs *rs, const char *key, int rc,
		       const struct shared_lease *l, uint64_t age_ns, uint64_t now);

/*
 * Block @index of our run @key is written (@ok) or dropped. Returns true when
 * the caller now writes the lease (into @out: our bits), then calls
 * shared_run_published(); false when another thread's write will carry it,
 * the block was written before (no new bit: waiters would take a lease
 * written again unchanged for a hog's), or the run is no longer ours. A dropped block gives the run
 * back: @out is then the released lease, written once.
 */
bool shared_run_wrote(struct shared_runs *rs, const char *key, uint64_t index, bool ok,
		      const char *node, uint64_t now, struct shared_lease *out);

/*
 * The lease write that shared_run_wrote() asked for is done. Returns true
 * with @out when bits changed meanwhile: write again, and call this again.
 */
bool shared_run_published(struct shared_runs *rs, const char *key, const char *node,
			  struct shared_lease *out);

#endif
