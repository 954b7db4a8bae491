/*
 * shared_read.c - the shared tier's reads (shared.h: cache_shared_get()): a
 * block's GET, verified, and after a miss who fetches it, by the leases:
 * this node (OWNED: fetch it from the store, then write it, shared.c),
 * another node (wait for the block to appear), or nobody can tell (MISS: the
 * store, unleased).
 *
 * Why leases: N nodes that load one model at once miss every block together;
 * without them each fetches every block from the store, N times the model.
 * The cluster's object store is the only shared thing we may use, and Swift's
 * s3api (like older S3 services) refuses conditional PUTs (If-None-Match), so
 * the lease is "last writer wins, read back after a pause": the pause is
 * twice the recent latency of a small request, so that a node that read no
 * lease just before our write lands its own before our read-back. A race
 * that slips through sends two nodes to the store for one run's blocks (never
 * a wrong byte); a lease whose node died costs the waiters shared_wait, once,
 * and expires after that long.
 *
 * A lease's age is the service's to tell: the Date of the answer that
 * brought it less its Last-Modified (cache_shared_lease_fresh()), one clock,
 * to the second. The nodes' clocks are never compared: a node whose clock
 * was off by about shared_wait took over leases still held, or waited on
 * dead ones. The time in the lease's body (the writer's clock) is for
 * people, and for a service that sends no Date. A node's own timers (when to
 * write its lease again, how long to wait) run on its monotonic clock.
 *
 * One lease covers a run of blocks (shared_run, 256 MiB of a file), not one block:
 * taking a lease costs three small requests and a pause before the store
 * read can begin. Measured on one node with a 2 Gbit/s origin (2 CPUs, Swift
 * beside it, tests/bench/bench_shared.py, 4 GiB of 8 MiB blocks), a lease per
 * block made the load 1.17 times as long as without the shared cache (21.1
 * against 18.1 s), no leases at all as long (18.2 s), and one per 256 MiB
 * 1.06 times (19.1 s; what was left was mostly each file's first run, whose
 * first block waited for the lease), and with the background claims of a
 * node alone (alone(), below) 1.02 times (18.4 against 18.0 s). This node keeps
 * what it learned of its recent runs (sh->runs): a run it holds answers its
 * next misses at once, one that another node holds sends them to wait; the
 * first miss of a run decides for the others, which wait for it. An owner
 * writes its lease again when half of shared_wait has passed, so that the
 * last blocks of a long run are not taken over; a waiter looks at the lease
 * every few polls and takes over one given back or expired.
 *
 * A block whose write this node must drop gives the run back ("released"):
 * the waiters take it over and fetch what they wait for, this node fetches
 * the rest of the run unleased (a block both fetch is read twice from the
 * store; drops are rare: a full queue for shared_wait, a refusing service).
 */
#define _GNU_SOURCE
#include "shared_int.h"

#include "cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LEASE_MAX 160	     /* a lease object: "NODE TIME_MS[ released]\n" */
#define LEASE_LOOK_EVERY 4   /* a waiter looks at the lease every this many polls */
#define POLL_FIRST_MS 50     /* the first look for a block another node fetches */
#define POLL_MAX_MS 1000     /* polls double up to this */
#define SETTLE_MIN_US 10000  /* a lease's pause before its read-back, at least */
#define SETTLE_MAX_US 200000 /* and at most */

/* Sets the latency estimates' first values (cache_shared_open()). */
void cache_shared_lease_init(struct cache_shared *sh)
{
	atomic_store(&sh->settle_us, 2 * SETTLE_MIN_US);
	atomic_store(&sh->waited_ms, 2 * POLL_FIRST_MS);
}

/*
 * Sleeps @ms, or less if the cache stops. Returns true if it is stopping.
 * Sleeps on sh->stop_cond (sh->lock) until the time passes or stopping.
 */
static bool pause_ms(struct cache_shared *sh, unsigned ms)
{
	struct timespec ts = cache_shared_deadline(ms / 1000.0);
	bool stop;

	pthread_mutex_lock(&sh->lock);
	while (!atomic_load(&sh->stopping) &&
	       pthread_cond_timedwait(&sh->stop_cond, &sh->lock, &ts) == 0)
		;
	stop = atomic_load(&sh->stopping);
	pthread_mutex_unlock(&sh->lock);
	return stop;
}

/* Feeds a small request's latency into settle_us (an average of the last few). */
static void note_latency(struct cache_shared *sh, unsigned long long t0)
{
	unsigned us = (unsigned)MCFS_MIN((mcfs_now_ns() - t0) / 1000, 10ull * SETTLE_MAX_US);
	unsigned old = atomic_load_explicit(&sh->settle_us, memory_order_relaxed);
	unsigned v = (old * 7 + 2 * us) / 8;

	atomic_store_explicit(&sh->settle_us, MCFS_MAX(SETTLE_MIN_US, MCFS_MIN(SETTLE_MAX_US, v)),
			      memory_order_relaxed);
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One GET of block @blk (@key) into @buf, verified: HIT, MISS, BAD or FAILED; health kept. */
static enum cache_shared_got get_block(struct cache_shared *sh, enum ticket t, const char *key,
				       const struct cache_shared_block *blk, void *buf)
{
	unsigned char tr[CACHE_SHARED_TRAILER];
	struct remote_blob_res res;
	const char *why = NULL;
	int rc;

	rc = remote_blob_get(sh->blob, key, buf, blk->len, tr, sizeof(tr), &res);
	if (rc == 0)
		rc = cache_shared_verify(sh->seal, key, buf, blk->len, tr, &why);
	else if (rc == -EBADMSG)
		why = "its size is not the block's and trailer's: truncated, or not a block";
	if (rc == 0 || rc == -ENOENT || rc == -EBADMSG || rc == -EKEYREJECTED || rc == -ENOMEM)
		cache_shared_went_well(sh, &sh->rd, t); /* the service answered */
	if (rc == 0) {
		shared_count(&sh->read_bytes, blk->len);
		return CACHE_SHARED_HIT;
	}
	if (rc == -ENOENT)
		return CACHE_SHARED_MISS;
	if (rc == -EBADMSG || rc == -EKEYREJECTED) {
		/* The caller fetches the block over the bytes in @buf, which no
		 * reader sees and no tier keeps. */
		shared_count(rc == -EBADMSG ? &sh->corrupt : &sh->unauthentic, 1);
		MCFS_WARN("shared cache %s%s (block %" PRIu64 " of %s): refused, %s; fetching it "
			  "from the store and writing it over",
			  sh->name, key, blk->index, blk->path, why);
		return CACHE_SHARED_BAD;
	}
	if (rc == -ENOMEM) /* not checked, so not served: the store (not written over) */
		return CACHE_SHARED_FAILED;
	cache_shared_went_wrong(sh, &sh->rd, t, "GET", key, &res);
	return CACHE_SHARED_FAILED;
}

int cache_shared_lease_key(const struct cache_shared *sh, const struct cache_shared_block *blk,
			   char *out, size_t len)
{
	uint64_t run = sh->run_blocks;
	struct cache_shared_block first = *blk;
	size_t n;
	int rc;

	first.index = blk->index / run * run;
	rc = cache_shared_key(sh->store, sh->bs, &first, out, len);
	if (rc < 0)
		return rc;
	n = strlen(out);
	rc = snprintf(out + n, len - n, "-run%" PRIu64 ".lease", run);
	return rc < 0 || (size_t)rc >= len - n ? -ENAMETOOLONG : 0;
}

bool cache_shared_lease_fresh(int64_t date_ns, int64_t modified_ns, uint64_t written_ms,
			      uint64_t now_ms, double wait_s)
{
	int64_t wait_ms = (int64_t)(wait_s * 1000), age_ms;

	if (date_ns > 0 && modified_ns > 0) {
		/* whole seconds each: a second more either way */
		age_ms = (date_ns - modified_ns) / 1000000;
		return age_ms < wait_ms + 1000 && age_ms > -(wait_ms + 1000);
	}
	return written_ms + (uint64_t)wait_ms > now_ms && written_ms < now_ms + (uint64_t)wait_ms;
}

/*
 * Reads the lease @lkey: 0 with *mine (ours) and *held (someone's, younger
 * than shared_wait, not released), -ENOENT, or -EIO / -ENOTCONN (the tier
 * failed or is down).
 */
static int read_lease(struct cache_shared *sh, const char *lkey, bool *mine, bool *held)
{
	char body[LEASE_MAX + 1], node[96], state[16] = "";
	unsigned long long t0 = mcfs_now_ns(), ms = 0;
	struct remote_blob_res res;
	enum ticket t = cache_shared_begin(&sh->rd);
	size_t n;
	bool fresh;
	int rc;

	*mine = *held = false;
	if (t == T_NONE)
		return -ENOTCONN;
	rc = remote_blob_get_small(sh->blob, lkey, body, LEASE_MAX, &n, &res);
	note_latency(sh, t0);
	if (rc != 0 && rc != -ENOENT && rc != -EBADMSG) {
		cache_shared_went_wrong(sh, &sh->rd, t, "GET", lkey, &res);
		return -EIO;
	}
	cache_shared_went_well(sh, &sh->rd, t);
	if (rc == -ENOENT)
		return rc;
	body[rc == 0 ? n : 0] = '\0';
	/* a lease we cannot read is nobody's: take it over */
	if (sscanf(body, "%95s %llu %15s", node, &ms, state) < 2)
		return 0;
	*mine = strcmp(node, sh->node) == 0;
	fresh = cache_shared_lease_fresh(res.date_ns, res.modified_ns, ms, wall_ms(), sh->wait_s);
	*held = fresh && strcmp(state, "released") != 0;
	if (!*mine && fresh)
		atomic_store(&sh->others_ns, mcfs_now_ns()); /* another node, lately */
	return 0;
}

/* A lease object's body into @body: "NODE TIME_MS[ released]\n". Returns its length. */
static size_t lease_body(struct cache_shared *sh, bool released, char body[LEASE_MAX])
{
	int n = snprintf(body, LEASE_MAX, "%s %" PRIu64 "%s\n", sh->node, wall_ms(),
			 released ? " released" : "");

	return (size_t)MCFS_MIN(MCFS_MAX(n, 0), LEASE_MAX - 1);
}

/* Writes our lease @lkey. 0, or -errno. */
static int write_lease(struct cache_shared *sh, const char *lkey)
{
	char body[LEASE_MAX];
	unsigned long long t0 = mcfs_now_ns();
	struct remote_blob_res res;
	enum ticket t;
	size_t n;
	int rc;

	if (atomic_load(&sh->rd.state) != H_UP)
		return -ENOTCONN;
	t = cache_shared_begin(&sh->wr);
	if (t == T_NONE)
		return -ENOTCONN;
	n = lease_body(sh, false, body);
	rc = remote_blob_put_small(sh->blob, lkey, body, n, &res);
	note_latency(sh, t0);
	if (rc < 0) {
		cache_shared_write_failed(sh, t, rc, "PUT", lkey, &res);
		return rc;
	}
	cache_shared_went_well(sh, &sh->wr, t);
	return 0;
}

/*
 * Writes our lease, lets racing writers land theirs, reads it back: 1 if it
 * is ours (this node fetches the run), 0 if another node's, -errno.
 */
static int claim(struct cache_shared *sh, const char *lkey)
{
	bool mine, held;
	int rc = write_lease(sh, lkey);

	if (rc < 0)
		return rc;
	if (pause_ms(sh, atomic_load_explicit(&sh->settle_us, memory_order_relaxed) / 1000))
		return 1;
	rc = read_lease(sh, lkey, &mine, &held);
	if (rc < 0)
		return rc == -ENOENT ? 1 : rc;
	return mine || !held;
}

/*
 * Asks the service who holds run @lkey, claiming it if nobody: 1 (this node),
 * 0, -errno. *@untouched: it had no lease before our claim.
 */
static int ask_owner(struct cache_shared *sh, const char *lkey, bool *untouched)
{
	bool mine, held;
	int rc = read_lease(sh, lkey, &mine, &held);

	*untouched = rc == -ENOENT;
	if (rc < 0 && rc != -ENOENT)
		return rc;
	if (rc == 0 && held)
		return mine;
	rc = claim(sh, lkey);
	if (rc == 1) {
		shared_count(&sh->leases, 1);
		atomic_store(&sh->won, true);
	}
	return rc;
}

/* ---- what this node knows of its runs (sh->runs, guarded by sh->lock) ---- */

/* Run @r's state as of @now, good for shared_wait (lock held). */
static void stamp_run(struct cache_shared *sh, struct shared_run *r, uint64_t now)
{
	r->since_ns = now;
	r->until_ns = now + (uint64_t)(sh->wait_s * 1e9);
}

static struct shared_run *find_run(struct cache_shared *sh, const char *lkey)
{
	unsigned i;

	for (i = 0; i < SHARED_RUNS; i++)
		if (sh->runs[i].state != RUN_FREE && strcmp(sh->runs[i].key, lkey) == 0)
			return &sh->runs[i];
	return NULL;
}

/* A slot for @lkey: a free or stale one, else the oldest not being claimed; or NULL. */
static struct shared_run *new_run(struct cache_shared *sh, const char *lkey, uint64_t now)
{
	struct shared_run *r, *pick = NULL;
	unsigned i;

	for (i = 0; i < SHARED_RUNS; i++) {
		r = &sh->runs[i];
		if (r->state == RUN_FREE || (r->state != RUN_CLAIMING && now >= r->until_ns)) {
			pick = r;
			break;
		}
		if (r->state != RUN_CLAIMING && (!pick || r->since_ns < pick->since_ns))
			pick = r;
	}
	if (pick) {
		snprintf(pick->key, sizeof(pick->key), "%s", lkey);
		pick->refreshing = pick->untouched = false;
		pick->next = 0;
	}
	return pick;
}

/*
 * Our lease of run @r (@lkey), if half as old as shared_wait at @now: written
 * again, so that its last blocks stay ours (lock held on entry and on return).
 */
static void refresh_run(struct cache_shared *sh, struct shared_run *r, const char *lkey,
			uint64_t now)
{
	if (r->refreshing || now - r->since_ns < (uint64_t)(sh->wait_s * 1e9) / 2)
		return;
	r->refreshing = true;
	pthread_mutex_unlock(&sh->lock);
	if (write_lease(sh, lkey) < 0)
		now = 0;
	pthread_mutex_lock(&sh->lock);
	r = find_run(sh, lkey); /* the slot may have gone to another run meanwhile */
	if (r && r->state == RUN_OURS) {
		r->refreshing = false;
		if (now)
			stamp_run(sh, r, now);
	}
}

/*
 * Whether this node seems to load alone: it has won a claim, and saw no other
 * node's recent lease for twice shared_wait. Such a node claims a new run in
 * the background (the claimer thread) and fetches the run's blocks from the
 * store meanwhile: the claim's requests and pause (a quarter of a second on
 * a busy service) would otherwise hold the first block of every file. If
 * another node claimed the run after all, what this node fetched before the
 * answer is read from the store twice (and written once: a HEAD first); the
 * lost claim shows the other node, and the next runs are claimed first again.
 */
static bool alone(struct cache_shared *sh, uint64_t now)
{
	uint64_t seen = atomic_load(&sh->others_ns);

	return atomic_load(&sh->won) &&
	       (seen == 0 || now - seen > (uint64_t)(2 * sh->wait_s * 1e9));
}

/* The answer @rc of run @r's claim, for the waiting threads (lock held). */
static void settle_run(struct cache_shared *sh, struct shared_run *r, int rc, bool untouched)
{
	r->state = rc == 1 ? RUN_OURS : rc == 0 ? RUN_THEIRS : RUN_FREE;
	r->untouched = rc == 1 && untouched;
	r->early = r->early_queued = false;
	stamp_run(sh, r, mcfs_now_ns());
	pthread_cond_broadcast(&sh->runs_changed);
}

/*
 * Who fetches run @lkey: 1 (this node), 0 (another), -errno (nobody can
 * tell, or this node gave it back: the store, unleased; -EAGAIN: this node
 * claims it in the background, see alone()). What this node knows answers
 * at once; the first miss of a run asks the service while the others wait
 * for its answer. @look (a waiter's periodic look) asks again about a run
 * another node holds.
 */
static int run_owner(struct cache_shared *sh, const char *lkey, bool look)
{
	uint64_t now;
	struct shared_run *r;
	bool untouched;
	int rc;

	pthread_mutex_lock(&sh->lock);
	while ((r = find_run(sh, lkey)) && r->state == RUN_CLAIMING && !r->early)
		pthread_cond_wait(&sh->runs_changed, &sh->lock);
	if (r && r->state == RUN_CLAIMING) { /* early: the store meanwhile */
		pthread_mutex_unlock(&sh->lock);
		if (!look)
			shared_count(&sh->early, 1);
		return -EAGAIN;
	}
	now = mcfs_now_ns();
	if (r && now < r->until_ns && !(look && r->state == RUN_THEIRS)) {
		rc = r->state == RUN_OURS ? 1 : r->state == RUN_THEIRS ? 0 : -ENOTCONN;
		if (rc == 1)
			refresh_run(sh, r, lkey, now);
		pthread_mutex_unlock(&sh->lock);
		return rc;
	}
	if (!r)
		r = new_run(sh, lkey, now);
	if (r) {
		r->state = RUN_CLAIMING;
		r->early = r->early_queued = !look && sh->claimer_on && alone(sh, now);
	}
	if (r && r->early) {
		pthread_cond_signal(&sh->claims);
		pthread_mutex_unlock(&sh->lock);
		shared_count(&sh->early, 1);
		return -EAGAIN;
	}
	pthread_mutex_unlock(&sh->lock);

	rc = ask_owner(sh, lkey, &untouched);
	if (!r)
		return rc; /* every slot is being claimed: not remembered */
	pthread_mutex_lock(&sh->lock);
	settle_run(sh, r, rc, untouched);
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

void *cache_shared_claimer(void *arg)
{
	struct cache_shared *sh = arg;
	char lkey[SHARED_LEASE_KEY_MAX];
	struct shared_run *r;
	bool untouched;
	unsigned i;
	int rc;

	pthread_setname_np(pthread_self(), "mcfs-shclaim");
	pthread_mutex_lock(&sh->lock);
	for (;;) {
		for (r = NULL, i = 0; !r && i < SHARED_RUNS; i++)
			if (sh->runs[i].state == RUN_CLAIMING && sh->runs[i].early_queued)
				r = &sh->runs[i];
		if (r && atomic_load(&sh->stopping)) { /* unmounting: nobody will read the run */
			settle_run(sh, r, -ECANCELED, false);
			continue;
		}
		if (!r && sh->closing)
			break;
		if (!r) {
			pthread_cond_wait(&sh->claims, &sh->lock);
			continue;
		}
		r->early_queued = false;
		memcpy(lkey, r->key, sizeof(lkey));
		pthread_mutex_unlock(&sh->lock);
		/* a claiming slot is not given to another run */
		rc = ask_owner(sh, lkey, &untouched);
		pthread_mutex_lock(&sh->lock);
		settle_run(sh, r, rc, untouched);
	}
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

enum run_state cache_shared_run_now(struct cache_shared *sh, const char *lkey)
{
	struct shared_run *r = find_run(sh, lkey);

	if (r && r->state == RUN_OURS && mcfs_now_ns() < r->until_ns)
		return RUN_OURS;
	if (r && r->state == RUN_CLAIMING && r->early)
		return RUN_CLAIMING;
	return RUN_FREE;
}

/*
 * Polls for a block another node is fetching, up to shared_wait. Every few
 * polls it looks at the run's lease: one given back (its node could not
 * write a block) or expired is claimed again, so that one waiter, not all,
 * goes to the store.
 *
 * Polls cost the shared service a request each, and every waiting fetch
 * thread of every node polls: measured with 4 nodes on 2 cores
 * (tests/bench/bench_shared.py), they were most of Swift's work. So the
 * first look comes after half the time recent waits took, and the next ones
 * twice as far apart each, up to POLL_MAX_MS: about two looks per wait.
 */
static enum cache_shared_got await_block(struct cache_shared *sh, const char *key, const char *lkey,
					 const struct cache_shared_block *blk, void *buf)
{
	unsigned long long deadline = mcfs_now_ns() + (unsigned long long)(sh->wait_s * 1e9);
	unsigned long long t0 = mcfs_now_ns();
	unsigned ms, polls = 0, avg = atomic_load_explicit(&sh->waited_ms, memory_order_relaxed);
	enum cache_shared_got got;
	enum ticket t;

	ms = MCFS_MAX(POLL_FIRST_MS, MCFS_MIN(avg / 2, POLL_MAX_MS));
	for (;;) {
		if (pause_ms(sh, ms))
			return CACHE_SHARED_MISS; /* stopping: the store, without waiting */
		t = cache_shared_begin(&sh->rd);
		if (t == T_NONE)
			return CACHE_SHARED_SKIP;
		got = get_block(sh, t, key, blk, buf);
		if (got == CACHE_SHARED_HIT) {
			shared_count(&sh->waits, 1);
			atomic_store_explicit(
			    &sh->waited_ms,
			    (avg * 3 + (unsigned)((mcfs_now_ns() - t0) / 1000000)) / 4,
			    memory_order_relaxed);
		}
		if (got != CACHE_SHARED_MISS)
			return got;
		if (mcfs_now_ns() >= deadline) {
			shared_count(&sh->wait_timeouts, 1);
			MCFS_DEBUG("shared cache %s%s: not written within shared_wait (%.1f s); "
				   "fetching it from the store",
				   sh->name, key, sh->wait_s);
			return CACHE_SHARED_MISS;
		}
		if (++polls % LEASE_LOOK_EVERY == 0 && run_owner(sh, lkey, true) == 1)
			return CACHE_SHARED_OWNED;
		ms = MCFS_MIN(ms * 2, POLL_MAX_MS);
	}
}

/*
 * Does block @index of run @lkey go to the store without asking the shared
 * cache? Yes when this node holds the run (or claims it in the background),
 * no other node held it before (untouched: so nobody wrote its blocks), and
 * this node has not fetched the block yet (past the run's frontier, which it
 * moves): the GET could only miss. A block this node fetched before (read
 * again once the RAM tier let it go) is asked for, since this node wrote it.
 * Measured (tests/bench/bench_shared.py, one node, shaped origin): each
 * run's GETs, answered late by a Swift busy with the writes, held the first
 * blocks of every file while the origin link idled. Keeps the lease fresh,
 * as run_owner() does for the blocks that ask.
 */
static bool unasked(struct cache_shared *sh, const char *lkey, uint64_t index)
{
	uint64_t now = mcfs_now_ns();
	struct shared_run *r;
	bool skip;

	pthread_mutex_lock(&sh->lock);
	r = find_run(sh, lkey);
	skip = r && index >= r->next &&
	       ((r->state == RUN_OURS && r->untouched && now < r->until_ns) ||
		(r->state == RUN_CLAIMING && r->early));
	if (skip) {
		r->next = index + 1;
		if (r->state == RUN_OURS)
			refresh_run(sh, r, lkey, now);
	}
	pthread_mutex_unlock(&sh->lock);
	return skip;
}

/* This node fetches block @index of run @lkey from the store: moves the run's frontier. */
static void fetching(struct cache_shared *sh, const char *lkey, uint64_t index)
{
	struct shared_run *r;

	pthread_mutex_lock(&sh->lock);
	r = find_run(sh, lkey);
	if (r && index >= r->next)
		r->next = index + 1;
	pthread_mutex_unlock(&sh->lock);
}

/*
 * After a miss of @blk (@key, its run @lkey): OWNED, HIT (waited for), MISS,
 * BAD, FAILED or SKIP.
 */
static enum cache_shared_got take_lease(struct cache_shared *sh, const char *key, const char *lkey,
					const struct cache_shared_block *blk, void *buf)
{
	int rc = run_owner(sh, lkey, false);

	if (rc == 1 || rc == -EAGAIN)
		fetching(sh, lkey, blk->index);
	if (rc < 0)
		return CACHE_SHARED_MISS;
	return rc == 1 ? CACHE_SHARED_OWNED : await_block(sh, key, lkey, blk, buf);
}

enum cache_shared_got cache_shared_get(struct cache_shared *sh,
				       const struct cache_shared_block *blk, void *buf)
{
	char key[CACHE_SHARED_KEY_MAX], lkey[SHARED_LEASE_KEY_MAX];
	bool leased = sh->wait_s > 0;
	enum cache_shared_got got;
	enum ticket t;

	if (cache_shared_key(sh->store, sh->bs, blk, key, sizeof(key)) < 0)
		return CACHE_SHARED_SKIP;
	if (leased && cache_shared_lease_key(sh, blk, lkey, sizeof(lkey)) < 0)
		leased = false;
	if (leased && atomic_load(&sh->rd.state) == H_UP && unasked(sh, lkey, blk->index)) {
		shared_count(&sh->unasked, 1);
		shared_count(&sh->misses, 1);
		return CACHE_SHARED_MISS;
	}
	t = cache_shared_begin(&sh->rd);
	if (t == T_NONE)
		return CACHE_SHARED_SKIP;
	got = get_block(sh, t, key, blk, buf);
	if (got == CACHE_SHARED_MISS && leased)
		got = take_lease(sh, key, lkey, blk, buf);
	if (got == CACHE_SHARED_HIT)
		shared_count(&sh->hits, 1);
	else if (got != CACHE_SHARED_SKIP && got != CACHE_SHARED_FAILED)
		shared_count(&sh->misses, 1);
	return got;
}

void cache_shared_give_back(struct cache_shared *sh, const char *lkey)
{
	char body[LEASE_MAX];
	struct remote_blob_res res;
	struct shared_run *r;
	bool sent = false;
	size_t n;

	pthread_mutex_lock(&sh->lock);
	r = find_run(sh, lkey);
	if (r && r->state == RUN_GIVEN && mcfs_now_ns() < r->until_ns)
		sent = true; /* once per run */
	else if (r && r->state != RUN_CLAIMING) {
		r->state = RUN_GIVEN;
		stamp_run(sh, r, mcfs_now_ns());
	}
	pthread_mutex_unlock(&sh->lock);
	if (sent || atomic_load(&sh->rd.state) != H_UP)
		return;
	n = lease_body(sh, true, body);
	if (remote_blob_put_small(sh->blob, lkey, body, n, &res) < 0)
		shared_count(&sh->errors, 1);
}
