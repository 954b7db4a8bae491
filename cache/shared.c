/*
 * shared.c - the shared block tier's writes, health and life (shared.h; the
 * reads are shared_read.c's, the decisions shared_lease.c's).
 *
 * Writes: the fetch thread queues a block after its store fetch; writer
 * threads PUT it, with a HEAD first when a racing node may have written it
 * (not for a block of a run this node holds: nobody else writes that one),
 * and for a leased block write the run's lease again with the block's bit,
 * which is what waiters watch. The queue is bounded, since each job pins a
 * RAM slot; a leased block waits for room rather than be dropped, since
 * dropping it would send every waiting node to the store (why as long as
 * shared_wait: docs/benchmarks.md, "The shared tier's clocks").
 *
 * Health: every request asks cache_shared_ask() first and reports with
 * cache_shared_tell(), which logs each change of state in one line.
 *
 * Refuses: to serve bytes it could not authenticate; to hold a reader for a
 * write; to log credentials or the key.
 */
#define _GNU_SOURCE
#include "shared.h"
#include "shared_int.h"

#include "blob.h"
#include "cache_stats.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define RETRY_S (SHARED_RETRY_NS / 1000000000ull)

/* ---- health ------------------------------------------------------------- */

void cache_shared_sleep(struct cache_shared *sh, uint64_t ns)
{
	struct timespec ts;
	uint64_t t;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + ns;
	ts.tv_sec = (time_t)(t / 1000000000ull);
	ts.tv_nsec = (long)(t % 1000000000ull);
	if (!sh->stopping)
		(void)pthread_cond_timedwait(&sh->changed, &sh->lock, &ts);
}

enum shared_ticket cache_shared_ask(struct cache_shared *sh, enum shared_op op)
{
	enum shared_ticket t;

	pthread_mutex_lock(&sh->lock);
	t = shared_health_ask(&sh->health, op, mcfs_now_ns());
	pthread_mutex_unlock(&sh->lock);
	return t;
}

void cache_shared_tell(struct cache_shared *sh, enum shared_ticket t, enum shared_op op, int rc,
		       const char *what, const char *key, const struct remote_blob_res *res)
{
	uint64_t now = mcfs_now_ns(), heard = remote_blob_heard(sh->blob);
	/* saturated: another thread may have heard a byte since we read the clock */
	enum shared_outcome o =
	    shared_outcome(op, rc, res->status, res->busy, res->quiet, res->unanswered,
			   heard ? mcfs_since_ns(now, heard) : UINT64_MAX, sh->timeout_ns);
	const char *why = res->error[0] ? res->error : "failed";
	enum shared_state was, is;
	uint64_t since;
	bool changed;

	if (o != SHARED_O_OK)
		shared_count(&sh->errors, 1);
	pthread_mutex_lock(&sh->lock);
	was = sh->health.state;
	since = sh->health.since_ns;
	changed = shared_health_tell(&sh->health, t, op, o, now);
	is = sh->health.state;
	atomic_store(&sh->state, is);
	pthread_mutex_unlock(&sh->lock);
	if (!changed) {
		if (o != SHARED_O_OK)
			MCFS_DEBUG("shared cache %s: %s %s: %s", sh->name, what, key, why);
		return;
	}
	if (is == SHARED_UP)
		MCFS_INFO("shared cache %s: %s up again after %.1f s", sh->name,
			  was == SHARED_DOWN ? "reads" : "writes", (double)(now - since) / 1e9);
	else if (is == SHARED_DOWN)
		MCFS_WARN("shared cache %s: down (%s %s: %s); reads go to the store, trying it "
			  "again every %llu s",
			  sh->name, what, key, why, RETRY_S);
	else
		MCFS_WARN("shared cache %s: refuses writes (%s %s: %s); blocks are read from it "
			  "but not added, trying again every %llu s",
			  sh->name, what, key, why, RETRY_S);
}

/* Ends ticket @t with no answer from the service (no request went, or it
 * said nothing of writes): a probe stays a question. */
static void release(struct cache_shared *sh, enum shared_ticket t)
{
	pthread_mutex_lock(&sh->lock);
	(void)shared_health_tell(&sh->health, t, SHARED_OP_WRITE, SHARED_O_BUSY, mcfs_now_ns());
	pthread_mutex_unlock(&sh->lock);
}

/* ---- writes ------------------------------------------------------------- */

/*
 * Block @j of our run is written (@ok) or dropped: the run's lease written
 * again, with its bit or given back (shared_lease.c says when; the writes of
 * one run go one at a time, the last carrying every bit).
 */
static void progress(struct cache_shared *sh, const struct put_job *j, bool ok)
{
	struct remote_blob_res res;
	struct shared_lease l;
	bool more;

	pthread_mutex_lock(&sh->lock);
	more = shared_run_wrote(&sh->runs, j->lkey, j->index, ok, sh->node, mcfs_now_ns(), &l);
	while (more) {
		pthread_mutex_unlock(&sh->lock);
		(void)cache_shared_put_lease(sh, j->lkey, &l, false, &res);
		pthread_mutex_lock(&sh->lock);
		more = !l.released && shared_run_published(&sh->runs, j->lkey, sh->node, &l);
	}
	pthread_mutex_unlock(&sh->lock);
}

/* Job @j is not written: counted, and its run given back if ours. */
static void drop(struct cache_shared *sh, const struct put_job *j)
{
	shared_count(&sh->put_drops, 1);
	if (j->owned)
		progress(sh, j, false);
}

static void write_one(struct cache_shared *sh, const struct put_job *j)
{
	unsigned char tr[CACHE_SHARED_TRAILER];
	struct remote_blob_res res;
	enum shared_ticket t = cache_shared_ask(sh, SHARED_OP_WRITE);
	uint64_t size = 0;
	int rc;

	if (t == SHARED_T_NONE) {
		drop(sh, j);
		return;
	}
	if (j->check) {
		rc = remote_blob_head(sh->blob, j->key, &size, &res);
		if (rc == 0 && size == (uint64_t)j->len + CACHE_SHARED_TRAILER) {
			/* Nothing was written: a probe of refused writes stays a
			 * question, not an answer (a read-only bucket went "up" on
			 * this, and down at the next PUT, every retry). */
			shared_count(&sh->put_skips, 1);
			release(sh, t);
			return;
		}
	}
	if (cache_shared_trailer(sh->seal, j->key, j->data, j->len, tr) < 0) {
		shared_count(&sh->errors, 1);
		release(sh, t);
		drop(sh, j);
		return;
	}
	rc = remote_blob_put(sh->blob, j->key, j->data, j->len, tr, sizeof(tr), &res);
	if (rc < 0 && t == SHARED_T_GO && (res.busy || res.quiet)) {
		/* Cut by a busy service, seen in CI: a PUT of a loaded Swift silent
		 * for shared_timeout. Sent once more while the tier stays up:
		 * dropping it would send the next node, or this run's waiters, to
		 * the store for the block. */
		cache_shared_tell(sh, t, SHARED_OP_WRITE, rc, "PUT", j->key, &res);
		if (atomic_load(&sh->state) != SHARED_UP) {
			drop(sh, j);
			return;
		}
		rc = remote_blob_put(sh->blob, j->key, j->data, j->len, tr, sizeof(tr), &res);
	}
	cache_shared_tell(sh, t, SHARED_OP_WRITE, rc, "PUT", j->key, &res);
	if (rc < 0) {
		drop(sh, j);
		return;
	}
	shared_count(&sh->puts, 1);
	shared_count(&sh->put_bytes, j->len);
	if (j->owned)
		progress(sh, j, true);
}

static void *writer_thread(void *arg)
{
	struct cache_shared *sh = arg;
	struct put_job j; /* the job, copied out of the ring before the lock is dropped */

	pthread_setname_np(pthread_self(), "mcfs-shput");
	pthread_mutex_lock(&sh->lock);
	for (;;) {
		/* Sleeps on sh->work (sh->lock) until a job is queued or closing. */
		while (!sh->closing && sh->qn == 0)
			pthread_cond_wait(&sh->work, &sh->lock);
		if (sh->qn == 0)
			break; /* closing, and the queue is written */
		j = sh->q[sh->qhead];
		sh->qhead = (sh->qhead + 1) % sh->qmax;
		sh->qn--;
		sh->writing++;
		pthread_cond_signal(&sh->room);
		pthread_mutex_unlock(&sh->lock);
		write_one(sh, &j);
		sh->done(sh->ctx, j.arg);
		pthread_mutex_lock(&sh->lock);
		sh->writing--;
	}
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

/* Takes writes now, or may probe them? (lock held) */
static bool writable(const struct cache_shared *sh)
{
	const struct shared_health *h = &sh->health;

	return h->state == SHARED_UP ||
	       (h->state == SHARED_READ_ONLY && !h->probing && mcfs_now_ns() >= h->probe_ns);
}

int cache_shared_put(struct cache_shared *sh, const struct cache_shared_block *blk,
		     const void *data, enum cache_shared_got got, void *arg)
{
	struct put_job job = {.data = data, .len = blk->len, .arg = arg};
	struct timespec ts;
	int rc = 0;

	job.owned = got == CACHE_SHARED_OWNED;
	job.check = got == CACHE_SHARED_MISS;
	job.index = blk->index % sh->run_blocks;
	if (cache_shared_key(sh->store, sh->bs, blk, job.key, sizeof(job.key)) < 0 ||
	    (job.owned && cache_shared_lease_key(sh, blk, job.lkey, sizeof(job.lkey)) < 0)) {
		shared_count(&sh->put_drops, 1);
		return -ENOTCONN;
	}
	pthread_mutex_lock(&sh->lock);
	if (job.owned && sh->qn == sh->qmax && writable(sh)) {
		/* other nodes wait for this block: wait for room, as long as they would */
		shared_count(&sh->put_waits, 1);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)(sh->wait_ns / 1000000000ull);
		while (!sh->closing && sh->qn == sh->qmax &&
		       pthread_cond_timedwait(&sh->room, &sh->lock, &ts) == 0)
			;
	}
	if (!writable(sh))
		rc = -ENOTCONN;
	else if (sh->closing || sh->qn == sh->qmax)
		rc = -EAGAIN;
	if (rc == 0) {
		sh->q[(sh->qhead + sh->qn) % sh->qmax] = job;
		sh->qn++;
		pthread_cond_signal(&sh->work);
	}
	pthread_mutex_unlock(&sh->lock);
	if (rc < 0)
		drop(sh, &job);
	return rc;
}

/* ---- life --------------------------------------------------------------- */

/* "host-0123456789abcdef": tells this daemon from others, also on one host. */
static void make_node_id(char *out, size_t len)
{
	char host[64] = "node";
	uint64_t r;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = mcfs_now_ns() ^ ((uint64_t)getpid() << 32);
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "node");
	host[sizeof(host) - 1] = '\0';
	snprintf(out, len, "%.60s-%016" PRIx64, host, r);
}

/* Checks the service at mount: an error fails the mount, no answer leaves it down. */
static int probe(struct cache_shared *sh, const struct cfg *cfg)
{
	struct remote_blob_res res;
	int rc = remote_blob_probe(sh->blob, &res);

	if (rc == -EACCES) {
		MCFS_ERR("shared cache %s refused our requests (%s): check shared_access_key and "
			 "shared_secret_key (or shared_profile, or the AWS environment), and that "
			 "they may read and write the bucket; or mount without shared_cache",
			 sh->name, res.error[0] ? res.error : "HTTP 403");
		return rc;
	}
	if (rc == -ENOENT) {
		MCFS_ERR("shared cache %s: no such bucket at %s (create it, or fix shared_cache "
			 "or shared_endpoint)",
			 sh->name, cfg->shared_endpoint[0] ? cfg->shared_endpoint : "the endpoint");
		return rc;
	}
	if (rc < 0) {
		MCFS_WARN("shared cache %s: not reachable (%s); reads go to the store, trying it "
			  "again every %llu s",
			  sh->name, res.error[0] ? res.error : "no answer", RETRY_S);
		(void)shared_health_tell(&sh->health, SHARED_T_GO, SHARED_OP_READ, SHARED_O_DOWN,
					 mcfs_now_ns());
		atomic_store(&sh->state, sh->health.state);
		return 0;
	}
	MCFS_INFO("shared cache %s: up (%u writes queued at most; waits for blocks other nodes "
		  "fetch while their leases show progress within %g s)",
		  sh->name, sh->qmax, cfg->shared_wait);
	return 0;
}

static void free_shared(struct cache_shared *sh)
{
	remote_blob_close(sh->blob);
	cache_shared_seal_free(sh->seal);
	pthread_mutex_destroy(&sh->lock);
	pthread_mutex_destroy(&sh->stop_lock);
	pthread_cond_destroy(&sh->work);
	pthread_cond_destroy(&sh->changed);
	pthread_cond_destroy(&sh->room);
	free(sh->q);
	free(sh);
}

int cache_shared_open(const struct cfg *cfg, const char *store, uint64_t bs, unsigned queue_max,
		      void (*done)(void *ctx, void *arg),
		      void (*wake)(void *ctx, void *park, int resume, uint64_t wait_until),
		      void *ctx, struct cache_shared **out)
{
	struct cache_shared *sh = calloc(1, sizeof(*sh));
	pthread_condattr_t ca;
	unsigned i;
	int rc;

	if (!sh)
		return -ENOMEM;
	snprintf(sh->store, sizeof(sh->store), "%s", store);
	sh->bs = bs;
	sh->wait_ns = (uint64_t)(cfg->shared_wait * 1e9);
	sh->run_blocks = MCFS_MAX(1, MCFS_MIN(SHARED_RUN_MAX, cfg->shared_run / bs));
	sh->timeout_ns = (uint64_t)(cfg->shared_timeout * 1e9);
	sh->done = done;
	sh->wake = wake;
	sh->ctx = ctx;
	sh->qmax = MCFS_MAX(1, queue_max);
	shared_health_init(&sh->health, mcfs_now_ns());
	atomic_store(&sh->state, SHARED_UP);
	/* a waiter looks at a held lease four times per shared_wait, at least */
	shared_runs_init(&sh->runs, sh->wait_ns, MCFS_MIN(SHARED_LOOK_NS, sh->wait_ns / 4));
	make_node_id(sh->node, sizeof(sh->node));
	pthread_mutex_init(&sh->lock, NULL);
	pthread_mutex_init(&sh->stop_lock, NULL);
	pthread_cond_init(&sh->work, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sh->changed, &ca);
	pthread_cond_init(&sh->room, &ca);
	pthread_condattr_destroy(&ca);
	sh->q = calloc(sh->qmax, sizeof(*sh->q));
	rc = sh->q ? cache_shared_seal_load(cfg->shared_key_file, &sh->seal) : -ENOMEM;
	if (rc == 0)
		rc = remote_blob_open(cfg, &sh->blob);
	if (rc == 0) {
		sh->name = remote_blob_name(sh->blob);
		rc = probe(sh, cfg);
	}
	for (i = 0; rc == 0 && i < MCFS_MIN(SHARED_WRITERS, sh->qmax); i++) {
		rc = -pthread_create(&sh->writers[i], NULL, writer_thread, sh);
		if (rc == 0)
			sh->nwriters++;
	}
	if (rc == 0 && sh->wait_ns > 0) {
		rc = -pthread_create(&sh->parker, NULL, cache_shared_parker, sh);
		sh->parker_on = rc == 0;
	}
	if (rc < 0) {
		cache_shared_close(sh);
		return rc;
	}
	*out = sh;
	return 0;
}

void cache_shared_stop(struct cache_shared *sh)
{
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	sh->stopping = true;
	pthread_cond_broadcast(&sh->changed);
	pthread_mutex_unlock(&sh->lock);
	/* the parker wakes every parked block, then ends: no wake after this,
	 * whichever thread stops first (the signal thread, then cache_free) */
	pthread_mutex_lock(&sh->stop_lock);
	if (sh->parker_on) {
		pthread_join(sh->parker, NULL);
		sh->parker_on = false;
	}
	pthread_mutex_unlock(&sh->stop_lock);
}

void cache_shared_close(struct cache_shared *sh)
{
	unsigned i;

	if (!sh)
		return;
	cache_shared_stop(sh);
	pthread_mutex_lock(&sh->lock);
	sh->closing = true;
	pthread_cond_broadcast(&sh->work);
	pthread_cond_broadcast(&sh->room);
	pthread_mutex_unlock(&sh->lock);
	for (i = 0; i < sh->nwriters; i++)
		pthread_join(sh->writers[i], NULL);
	free_shared(sh);
}

static uint64_t load(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

void cache_shared_get_stats(struct cache_shared *sh, struct cache_stats *out)
{
	if (!sh) {
		out->shared_state = 0;
		return;
	}
	out->shared_state = (uint64_t)atomic_load(&sh->state);
	out->shared_hits = load(&sh->hits);
	out->shared_misses = load(&sh->misses);
	out->shared_read_bytes = load(&sh->read_bytes);
	out->shared_waits = load(&sh->waits);
	out->shared_wait_timeouts = load(&sh->wait_timeouts);
	out->shared_puts = load(&sh->puts);
	out->shared_put_bytes = load(&sh->put_bytes);
	out->shared_put_skips = load(&sh->put_skips);
	out->shared_put_drops = load(&sh->put_drops);
	out->shared_leases = load(&sh->leases);
	out->shared_put_waits = load(&sh->put_waits);
	out->shared_corrupt = load(&sh->corrupt);
	out->shared_unauthentic = load(&sh->unauthentic);
	out->shared_errors = load(&sh->errors);
	pthread_mutex_lock(&sh->lock);
	out->shared_queued = sh->qn + sh->writing;
	out->shared_parked = atomic_load(&sh->nparked);
	pthread_mutex_unlock(&sh->lock);
}
