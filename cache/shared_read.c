/*
 * shared_read.c - the shared tier's reads (shared.h: cache_shared_get()): a
 * block's GET, verified; after a miss, its run's lease says who fetches it
 * (shared_lease.h has the protocol and decides; this file sends the requests).
 *
 * A claim reads the lease. None there: written with If-None-Match: *, where
 * the service takes it (AWS S3, MinIO), and the first writer wins. Where it
 * does not (Swift's s3api answers 501, once; then it is not asked again), and
 * for a take-over: written, then read back after twice the write's own time,
 * so that a node that read no lease just before our write lands its own
 * first; the last writer wins. A race that slips through costs a duplicate
 * store read of one run, never a wrong byte.
 *
 * A block that waits for another node is parked (sh->parked), never held by
 * its fetch thread: the call returns CACHE_SHARED_PARKED and the thread takes
 * its next job. One parker thread runs the run steps for every parked block
 * (looks at leases, take-overs) and hands each back through wake() once its
 * run changed (RESUMED: the next call goes straight to the run's step) or
 * its bound, twice shared_wait from its first wait, passed (WAITED: the
 * store). A block that cannot be parked (stopping, no memory) goes to the
 * store at once.
 */
#define _GNU_SOURCE
#include "shared_int.h"

#include "cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETTLE_MIN_NS 10000000ull  /* a claim's pause before its read-back, at least */
#define SETTLE_MAX_NS 200000000ull /* and at most */

/* One GET of block @blk (@key) into @buf, verified: HIT, MISS, BAD or FAILED; health told. */
static enum cache_shared_got get_block(struct cache_shared *sh, enum shared_ticket t,
				       const char *key, const struct cache_shared_block *blk,
				       void *buf)
{
	unsigned char tr[CACHE_SHARED_TRAILER];
	struct remote_blob_res res;
	const char *why = NULL;
	int rc;

	rc = remote_blob_get(sh->blob, key, buf, blk->len, tr, sizeof(tr), &res);
	cache_shared_tell(sh, t, SHARED_OP_READ, rc, "GET", key, &res);
	if (rc == 0)
		rc = cache_shared_verify(sh->seal, key, buf, blk->len, tr, &why);
	else if (rc == -EBADMSG)
		why = "its size is not the block's and trailer's: truncated, or not a block";
	if (rc == 0) {
		shared_count(&sh->read_bytes, blk->len);
		return CACHE_SHARED_HIT;
	}
	if (rc == -ENOENT) {
		shared_count(&sh->misses, 1); /* each GET that found none, waited for or not */
		return CACHE_SHARED_MISS;
	}
	if (rc == -EBADMSG || rc == -EKEYREJECTED) {
		/* The caller fetches the block over the bytes in @buf, which no
		 * reader sees and no tier keeps. */
		shared_count(rc == -EBADMSG ? &sh->corrupt : &sh->unauthentic, 1);
		MCFS_WARN("shared cache %s%s (block %" PRIu64 " of %s): refused, %s; fetching it "
			  "from the store and writing it over",
			  sh->name, key, blk->index, blk->path, why);
		return CACHE_SHARED_BAD;
	}
	return CACHE_SHARED_FAILED; /* the service failed, or -ENOMEM: not checked, not served */
}

int cache_shared_lease_key(const struct cache_shared *sh, const struct cache_shared_block *blk,
			   char *out, size_t len)
{
	struct cache_shared_block first = *blk;
	size_t n;
	int rc;

	first.index = blk->index / sh->run_blocks * sh->run_blocks;
	rc = cache_shared_key(sh->store, sh->bs, &first, out, len);
	if (rc < 0)
		return rc;
	n = strlen(out);
	rc = snprintf(out + n, len - n, "-run%" PRIu64 ".lease", sh->run_blocks);
	return rc < 0 || (size_t)rc >= len - n ? -ENAMETOOLONG : 0;
}

/*
 * Reads the lease @lkey: 0 with @l, -ENOENT, -EINVAL (not a lease), or -EIO
 * (the service failed: told) / -ENOTCONN (down); *@age from the service's clock.
 */
static int read_lease(struct cache_shared *sh, const char *lkey, struct shared_lease *l,
		      uint64_t *age)
{
	char body[SHARED_LEASE_MAX];
	struct remote_blob_res res;
	enum shared_ticket t = cache_shared_ask(sh, SHARED_OP_READ);
	size_t n = 0;
	int rc;

	memset(l, 0, sizeof(*l));
	*age = UINT64_MAX;
	if (t == SHARED_T_NONE)
		return -ENOTCONN;
	rc = remote_blob_get_small(sh->blob, lkey, body, sizeof(body), &n, &res);
	cache_shared_tell(sh, t, SHARED_OP_READ, rc, "GET", lkey, &res);
	if (rc == -EBADMSG)
		return -EINVAL; /* too long to be a lease: nobody's */
	if (rc < 0)
		return rc == -ENOENT ? rc : -EIO;
	*age = shared_lease_age(res.date_ns, res.modified_ns);
	rc = shared_lease_parse(body, n, l);
	l->modified_ns = res.modified_ns;
	return rc;
}

int cache_shared_put_lease(struct cache_shared *sh, const char *lkey, const struct shared_lease *l,
			   bool if_absent, struct remote_blob_res *res)
{
	char body[SHARED_LEASE_MAX];
	size_t n = shared_lease_format(l, body);
	enum shared_ticket t = cache_shared_ask(sh, SHARED_OP_WRITE);
	int rc;

	memset(res, 0, sizeof(*res)); /* no answer, when no request goes */
	if (t == SHARED_T_NONE)
		return -ENOTCONN;
	rc = remote_blob_put_small(sh->blob, lkey, body, n, if_absent, res);
	/* a conditional PUT's 412 (one exists) or 501 (not taken) is an answer */
	cache_shared_tell(sh, t, SHARED_OP_WRITE,
			  rc == -ESTALE || (if_absent && res->status == 501) ? 0 : rc, "PUT", lkey,
			  res);
	return rc;
}

/*
 * Claims run @lkey (@over: taking over a stalled lease, not read first):
 * 1 (this node's), 0 (another's), -errno (nobody can tell).
 */
static int claim(struct cache_shared *sh, const char *lkey, bool over)
{
	struct shared_lease l, mine;
	struct remote_blob_res res;
	uint64_t age, t0, pause;
	bool absent = false;
	int rc;

	memset(&mine, 0, sizeof(mine));
	snprintf(mine.node, sizeof(mine.node), "%s", sh->node);
	if (!over) {
		rc = read_lease(sh, lkey, &l, &age);
		if (rc == -EIO || rc == -ENOTCONN)
			return rc;
		absent = rc == -ENOENT;
		rc = shared_lease_holder(rc, &l, age, sh->node, sh->wait_ns);
		if (rc >= 0)
			return rc;
	}
	/* none there: created only if still none, where the service can say so */
	if (absent && atomic_load(&sh->conditional) >= 0) {
		rc = cache_shared_put_lease(sh, lkey, &mine, true, &res);
		if (rc == 0 || rc == -ESTALE) {
			atomic_store(&sh->conditional, 1);
			return rc == 0 ? 1 : 0;
		}
		if (res.status != 501)
			return rc;
		atomic_store(&sh->conditional, -1);
		MCFS_INFO("shared cache %s: no conditional PUT (If-None-Match); leases are "
			  "written, then read back",
			  sh->name);
	}
	t0 = mcfs_now_ns();
	rc = cache_shared_put_lease(sh, lkey, &mine, false, &res);
	if (rc < 0)
		return rc;
	pause = MCFS_MAX(SETTLE_MIN_NS, MCFS_MIN(SETTLE_MAX_NS, 2 * (mcfs_now_ns() - t0)));
	t0 = mcfs_now_ns() + pause; /* the whole pause: other runs' changes wake the sleep */
	pthread_mutex_lock(&sh->lock);
	while (!sh->stopping && mcfs_now_ns() < t0)
		cache_shared_sleep(sh, t0 - mcfs_now_ns());
	pthread_mutex_unlock(&sh->lock);
	rc = read_lease(sh, lkey, &l, &age);
	if (rc == -EIO || rc == -ENOTCONN)
		return rc;
	rc = shared_lease_holder(rc, &l, age, sh->node, sh->wait_ns);
	return rc == -ENOENT ? 1 : rc;
}

/*
 * Asks (or takes over) run @lkey and records the answer: claim()'s. Called
 * and returns with sh->lock held. Below 0 (nobody can tell: the service
 * failed, is down or refuses writes), the caller's block goes to the store,
 * and the run's next miss asks again: asked again at once, a claim that
 * cannot be written failed in a loop of lease GETs, and its block never
 * came (a read-only bucket: hundreds of GETs a second, for as long as it was).
 */
static int ask(struct cache_shared *sh, const char *lkey, bool over)
{
	int rc;

	pthread_mutex_unlock(&sh->lock);
	rc = claim(sh, lkey, over);
	if (rc == 1)
		shared_count(&sh->leases, 1);
	pthread_mutex_lock(&sh->lock);
	shared_run_claimed(&sh->runs, lkey, rc, mcfs_now_ns());
	pthread_cond_broadcast(&sh->changed);
	return rc;
}

/*
 * A STEP_LOOK at run @lkey: reads its lease, records what it held, and takes
 * the run over when it showed no progress. Below 0 when the take-over failed
 * (ask()'s: nobody can tell; the looker's block goes to the store, as an
 * ask's would, instead of claiming the run again at its next step); 0
 * otherwise. Called and returns with sh->lock held.
 */
static int look(struct cache_shared *sh, const char *lkey)
{
	struct shared_lease l;
	uint64_t age;
	bool over;
	int rc;

	pthread_mutex_unlock(&sh->lock);
	rc = read_lease(sh, lkey, &l, &age);
	pthread_mutex_lock(&sh->lock);
	over = shared_run_looked(&sh->runs, lkey, rc, &l, age, mcfs_now_ns());
	pthread_cond_broadcast(&sh->changed);
	if (over) {
		shared_count(&sh->wait_timeouts, 1);
		MCFS_DEBUG(
		    "shared cache %s%s: no progress (shared_wait %.1f s); taking the run over",
		    sh->name, lkey, (double)sh->wait_ns / 1e9);
		rc = ask(sh, lkey, true);
	}
	return rc < 0 && over ? rc : 0;
}

/* Parks block @index of run @lkey (@park, the caller's token) until @deadline.
 * 0, or -1 (stopping, or no memory: the block goes to the store). Lock held. */
static int park(struct cache_shared *sh, const char *lkey, uint64_t index, uint64_t deadline,
		void *park)
{
	struct shared_parked *p;

	if (sh->stopping)
		return -1;
	p = malloc(sizeof(*p));
	if (!p)
		return -1;
	snprintf(p->lkey, sizeof(p->lkey), "%s", lkey);
	p->index = index;
	p->deadline_ns = deadline;
	p->park = park;
	p->resume = CACHE_SHARED_FIRST;
	p->next = sh->parked;
	sh->parked = p;
	atomic_fetch_add(&sh->nparked, 1);
	pthread_cond_broadcast(&sh->changed); /* the parker: a new deadline */
	return 0;
}

/* After a miss of @blk (@key, its run @lkey): OWNED, HIT (waited for), MISS, BAD, FAILED, SKIP
 * or PARKED. */
static enum cache_shared_got leased(struct cache_shared *sh, const char *key, const char *lkey,
				    const struct cache_shared_block *blk, void *buf)
{
	uint64_t index = blk->index % sh->run_blocks, wait, now;
	/* a holder busy with other blocks of the run holds this one twice the bound, at most,
	 * counted from its first wait: one resumed and parked again keeps it */
	uint64_t deadline = blk->wait_until ? blk->wait_until : mcfs_now_ns() + 2 * sh->wait_ns;
	enum cache_shared_got got = CACHE_SHARED_MISS;
	enum shared_ticket t;

	pthread_mutex_lock(&sh->lock);
	while (!sh->stopping) {
		now = mcfs_now_ns();
		switch (shared_run_step(&sh->runs, lkey, index, now, &wait)) {
		case SHARED_STEP_WAIT:
			if (now >= deadline) {
				shared_count(&sh->wait_timeouts, 1);
				MCFS_DEBUG(
				    "shared cache %s%s: not written within twice shared_wait; "
				    "fetching it from the store",
				    sh->name, key);
				break;
			}
			if (park(sh, lkey, index, deadline, blk->park) == 0)
				got = CACHE_SHARED_PARKED;
			break; /* parked, or the store */
		case SHARED_STEP_ASK:
			if (ask(sh, lkey, false) < 0)
				break; /* the store */
			continue;
		case SHARED_STEP_LOOK:
			if (look(sh, lkey) < 0)
				break; /* the store */
			continue;
		case SHARED_STEP_FETCH:
			got = CACHE_SHARED_OWNED;
			break;
		case SHARED_STEP_STORE:
			break;
		case SHARED_STEP_GET:
			pthread_mutex_unlock(&sh->lock);
			t = cache_shared_ask(sh, SHARED_OP_READ);
			got = t == SHARED_T_NONE ? CACHE_SHARED_SKIP
						 : get_block(sh, t, key, blk, buf);
			if (got == CACHE_SHARED_HIT)
				shared_count(&sh->waits, 1);
			return got;
		}
		break;
	}
	pthread_mutex_unlock(&sh->lock);
	return got;
}

enum cache_shared_got cache_shared_get(struct cache_shared *sh,
				       const struct cache_shared_block *blk, void *buf)
{
	char key[CACHE_SHARED_KEY_MAX], lkey[SHARED_LEASE_KEY_MAX];
	enum cache_shared_got got;
	enum shared_ticket t;
	bool leasing;

	if (cache_shared_key(sh->store, sh->bs, blk, key, sizeof(key)) < 0)
		return CACHE_SHARED_SKIP;
	if (blk->resume == CACHE_SHARED_WAITED)
		return CACHE_SHARED_MISS; /* its wait is over: fetched, then written if absent */
	leasing = sh->wait_ns > 0 && atomic_load(&sh->state) == SHARED_UP &&
		  cache_shared_lease_key(sh, blk, lkey, sizeof(lkey)) == 0;
	/* a parked block whose run changed: the run's step says what now (the
	 * GET it missed before is not repeated) */
	if (blk->resume == CACHE_SHARED_RESUMED && leasing) {
		got = leased(sh, key, lkey, blk, buf);
		if (got == CACHE_SHARED_HIT)
			shared_count(&sh->hits, 1);
		return got;
	}
	t = cache_shared_ask(sh, SHARED_OP_READ);
	if (t == SHARED_T_NONE)
		return CACHE_SHARED_SKIP;
	got = get_block(sh, t, key, blk, buf);
	/* leases only while the tier takes writes: a run's waiters need its blocks written */
	if (got == CACHE_SHARED_MISS && leasing)
		got = leased(sh, key, lkey, blk, buf);
	if (got == CACHE_SHARED_HIT)
		shared_count(&sh->hits, 1);
	return got;
}

/* Takes @p off sh->parked (@pp points at it) onto *@woken with @resume. Lock held. */
static void unpark(struct cache_shared *sh, struct shared_parked **pp, struct shared_parked *p,
		   int resume, struct shared_parked **woken)
{
	*pp = p->next;
	p->resume = resume;
	p->next = *woken;
	*woken = p;
	atomic_fetch_sub(&sh->nparked, 1);
}

/*
 * One pass over the parked blocks at @now: takes off those that may be asked
 * again onto *@woken, and sets *@next to the earliest time a wait ends.
 * Returns true when it ran a request (a look or a claim: the lock was
 * dropped, the list may have grown); the caller passes again. Lock held.
 */
static bool park_pass(struct cache_shared *sh, uint64_t now, uint64_t *next,
		      struct shared_parked **woken)
{
	struct shared_parked **pp = &sh->parked, *p;
	uint64_t wait;

	while ((p = *pp)) {
		if (sh->stopping) {
			unpark(sh, pp, p, CACHE_SHARED_WAITED, woken);
			continue;
		}
		if (p->resume == CACHE_SHARED_WAITED) { /* its claim failed: the store */
			unpark(sh, pp, p, CACHE_SHARED_WAITED, woken);
			continue;
		}
		/* the run's state first: a block its run names (or that became
		 * ours) as its bound runs out is taken from there, as leased()
		 * does; only a block still waiting goes to the store */
		switch (shared_run_step(&sh->runs, p->lkey, p->index, now, &wait)) {
		case SHARED_STEP_WAIT:
			if (now >= p->deadline_ns) {
				shared_count(&sh->wait_timeouts, 1);
				MCFS_DEBUG("shared cache %s%s (block %" PRIu64 " of its run): not "
					   "written within twice shared_wait; fetching it from the "
					   "store",
					   sh->name, p->lkey, p->index);
				unpark(sh, pp, p, CACHE_SHARED_WAITED, woken);
				break;
			}
			*next = MCFS_MIN(*next, MCFS_MIN(now + wait, p->deadline_ns));
			pp = &p->next;
			break;
		case SHARED_STEP_ASK: /* the run was forgotten (stale): claimed as a waiter would */
			if (ask(sh, p->lkey, false) < 0)
				p->resume = CACHE_SHARED_WAITED; /* still parked: the next pass */
			return true;
		case SHARED_STEP_LOOK:
			if (look(sh, p->lkey) < 0) /* the take-over failed: the store */
				p->resume = CACHE_SHARED_WAITED;
			return true;
		default: /* named (GET), ours (FETCH), given back or no slot (STORE) */
			unpark(sh, pp, p, CACHE_SHARED_RESUMED, woken);
			break;
		}
	}
	return false;
}

void *cache_shared_parker(void *arg)
{
	struct cache_shared *sh = arg;
	struct shared_parked *woken, *p;
	uint64_t now, next;
	bool ran;

	pthread_setname_np(pthread_self(), "mcfs-shpark");
	pthread_mutex_lock(&sh->lock);
	for (;;) {
		woken = NULL;
		now = mcfs_now_ns();
		next = now + SHARED_RETRY_NS;
		ran = park_pass(sh, now, &next, &woken);
		if (woken) {
			/* the callbacks take the cache's lock: never under ours */
			pthread_mutex_unlock(&sh->lock);
			while ((p = woken)) {
				woken = p->next;
				sh->wake(sh->ctx, p->park, p->resume, p->deadline_ns);
				free(p);
			}
			pthread_mutex_lock(&sh->lock);
			continue;
		}
		if (ran)
			continue;
		if (sh->stopping)
			break; /* every block woken; no new one parks once stopping */
		cache_shared_sleep(sh, next - now);
	}
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}
