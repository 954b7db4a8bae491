/*
 * shared.c - the shared block tier (shared.h): blocks in an S3 bucket that a
 * cluster's nodes share, between the local tiers and the store.
 *
 * Reads (shared_read.c): a local miss (a fetch thread, through tiers.c) GETs
 * the block's object; a verified object fills the RAM slot (a hit). A
 * missing one, with shared_wait > 0, asks who fetches it (the lease of its
 * run): this node fetches it from the store and writes it, or waits for the
 * node that does. A corrupt or truncated object is refused (never served),
 * logged, fetched from the store and written over.
 *
 * Writes (here): after the store fetch the fetch thread queues the write
 * (cache_shared_put()); writer threads PUT it, first asking with a HEAD
 * whether a racing node wrote it already (not for a block this node holds
 * the lease of: no other node writes it).
 *
 * The write queue is bounded (each job pins a RAM slot) and a full one drops
 * the write, but for a block this node holds the lease of: other nodes wait
 * for that one, and dropping it would send each of them to the store, so
 * the fetch thread (its readers already answered) waits for room up to
 * shared_wait, as long as the other nodes wait for the block, and gives the
 * lease back if it must drop it after all. On a cluster whose shared cache
 * takes writes slower than the store gives blocks, that wait is what keeps
 * the store's traffic near one copy: measured with 8 nodes on one Swift on 2
 * CPUs (tests/bench/bench_shared.py, 2 GiB), whose PUTs took up to 2.8 s to
 * answer, a wait of shared_timeout (2 s) dropped 41 leased blocks, each read
 * from the store again by a waiter (1.16 times the model); so did a wait that
 * gave up when no writer took a job for shared_timeout (37, 1.17 times).
 *
 * Health: two up/down states, reads (the whole tier) and writes, kept by
 * shared_health.c; every request asks cache_shared_begin() first and reports
 * how it went.
 *
 * Refuses: to serve bytes it could not authenticate (shared_seal.c: a MAC
 * keyed by the cluster's shared_key_file, which bucket credentials alone do
 * not give); to hold a reader for a write; to log credentials or the key.
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

/* ---- writes ------------------------------------------------------------- */

/* Job @j is not written: counted, and its run given back if ours. */
static void drop(struct cache_shared *sh, const struct put_job *j)
{
	shared_count(&sh->put_drops, 1);
	if (j->owned)
		cache_shared_give_back(sh, j->lkey);
}

static void write_one(struct cache_shared *sh, const struct put_job *j)
{
	unsigned char tr[CACHE_SHARED_TRAILER];
	struct remote_blob_res res;
	uint64_t size = 0;
	enum ticket t;
	int rc;

	t = atomic_load(&sh->rd.state) == H_UP ? cache_shared_begin(&sh->wr) : T_NONE;
	if (t == T_NONE) {
		drop(sh, j);
		return;
	}
	if (j->check) {
		rc = remote_blob_head(sh->blob, j->key, &size, &res);
		if (rc == 0 && size == (uint64_t)j->len + CACHE_SHARED_TRAILER) {
			/* Nothing was written: a probe of refused writes stays a
			 * question, not an answer (a read-only bucket went "up"
			 * here, and down at the next PUT, every SHARED_RETRY_S). */
			shared_count(&sh->put_skips, 1);
			cache_shared_release(&sh->wr, t);
			return;
		}
		/* a HEAD that failed only leaves the question open: the PUT's
		 * answer (a busy service's HEAD may be late where its PUT is not)
		 * says whether the service is down */
		if (rc < 0 && rc != -ENOENT)
			shared_count(&sh->errors, 1);
	}
	if (cache_shared_trailer(sh->seal, j->key, j->data, j->len, tr) < 0) {
		shared_count(&sh->errors, 1);
		cache_shared_release(&sh->wr, t);
		drop(sh, j);
		return;
	}
	rc = remote_blob_put(sh->blob, j->key, j->data, j->len, tr, sizeof(tr), &res);
	if (rc < 0 && t == T_NORMAL && (res.busy || res.quiet)) {
		/* Cut by a busy service (shared_health.c), seen in CI: a PUT of a
		 * loaded Swift silent for shared_timeout. Counted, and sent once
		 * more while the tier stays up: dropping it would send the next
		 * node, or this run's waiters, to the store for the block. */
		cache_shared_write_failed(sh, t, rc, "PUT", j->key, &res);
		if (atomic_load(&sh->rd.state) != H_UP || atomic_load(&sh->stopping)) {
			drop(sh, j);
			return;
		}
		rc = remote_blob_put(sh->blob, j->key, j->data, j->len, tr, sizeof(tr), &res);
	}
	if (rc < 0) {
		cache_shared_write_failed(sh, t, rc, "PUT", j->key, &res);
		drop(sh, j);
		return;
	}
	shared_count(&sh->puts, 1);
	shared_count(&sh->put_bytes, j->len);
	cache_shared_went_well(sh, &sh->wr, t);
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

/*
 * Waits for room in the queue, up to shared_wait: for a block whose lease
 * this node holds, other nodes are waiting, that long; dropping it would send
 * each of them to the store. Called (and returns) with sh->lock held; the
 * caller's readers were answered before. Sleeps on sh->room (sh->lock) until
 * a writer takes a job, the tier closes, or the time is up.
 */
static void wait_for_room(struct cache_shared *sh)
{
	struct timespec ts = cache_shared_deadline(sh->wait_s);

	while (!sh->closing && sh->qn == sh->qmax &&
	       pthread_cond_timedwait(&sh->room, &sh->lock, &ts) == 0)
		;
}

int cache_shared_put(struct cache_shared *sh, const struct cache_shared_block *blk,
		     const void *data, enum cache_shared_got got, void *arg)
{
	char key[CACHE_SHARED_KEY_MAX], lkey[SHARED_LEASE_KEY_MAX] = "";
	bool owned = got == CACHE_SHARED_OWNED, early = false;
	bool leased_miss = got == CACHE_SHARED_MISS && sh->wait_s > 0; /* its run may be ours */
	struct put_job *j;

	if (cache_shared_key(sh->store, sh->bs, blk, key, sizeof(key)) < 0 ||
	    ((owned || leased_miss) && cache_shared_lease_key(sh, blk, lkey, sizeof(lkey)) < 0)) {
		shared_count(&sh->put_drops, 1);
		return -ENOTCONN;
	}
	/* fetched while this node claimed its run (early): written as the run's
	 * lease says, once it is ours; until the claim's answer, as likely ours
	 * (waits for room), but with a HEAD first */
	pthread_mutex_lock(&sh->lock);
	if (leased_miss) {
		enum run_state st = cache_shared_run_now(sh, lkey);

		owned = st == RUN_OURS;
		early = st == RUN_CLAIMING;
		if (owned)
			got = CACHE_SHARED_OWNED;
	}
	if (!owned)
		lkey[0] = '\0';
	if (atomic_load(&sh->rd.state) != H_UP || (atomic_load(&sh->wr.state) == H_DOWN &&
						   mcfs_now_ns() < atomic_load(&sh->wr.retry_ns))) {
		pthread_mutex_unlock(&sh->lock);
		shared_count(&sh->put_drops, 1);
		if (owned)
			cache_shared_give_back(sh, lkey);
		return -ENOTCONN;
	}
	if ((owned || early) && sh->qn == sh->qmax) {
		shared_count(&sh->put_waits, 1);
		wait_for_room(sh);
	}
	if (sh->closing || sh->qn == sh->qmax) {
		pthread_mutex_unlock(&sh->lock);
		shared_count(&sh->put_drops, 1);
		if (owned)
			cache_shared_give_back(sh, lkey);
		return -EAGAIN;
	}
	j = &sh->q[(sh->qhead + sh->qn) % sh->qmax];
	memcpy(j->key, key, sizeof(key));
	memcpy(j->lkey, lkey, sizeof(lkey));
	j->data = data;
	j->len = blk->len;
	j->check = got == CACHE_SHARED_MISS;
	j->owned = owned;
	j->arg = arg;
	sh->qn++;
	pthread_cond_signal(&sh->work);
	pthread_mutex_unlock(&sh->lock);
	return 0;
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
			  "again every %d s",
			  sh->name, res.error[0] ? res.error : "no answer", SHARED_RETRY_S);
		atomic_store(&sh->rd.state, H_DOWN);
		sh->rd.since_ns = mcfs_now_ns();
		atomic_store(&sh->rd.retry_ns, sh->rd.since_ns + SHARED_RETRY_S * NS_PER_S);
		return 0;
	}
	MCFS_INFO("shared cache %s: up (%u writes queued at most; waits up to %g s for blocks "
		  "other nodes fetch)",
		  sh->name, sh->qmax, sh->wait_s);
	return 0;
}

static void free_shared(struct cache_shared *sh)
{
	remote_blob_close(sh->blob);
	cache_shared_seal_free(sh->seal);
	pthread_mutex_destroy(&sh->lock);
	pthread_cond_destroy(&sh->work);
	pthread_cond_destroy(&sh->runs_changed);
	pthread_cond_destroy(&sh->claims);
	pthread_cond_destroy(&sh->stop_cond);
	pthread_cond_destroy(&sh->room);
	free(sh->q);
	free(sh);
}

int cache_shared_open(const struct cfg *cfg, const char *store, uint64_t bs, unsigned queue_max,
		      void (*done)(void *ctx, void *arg), void *ctx, struct cache_shared **out)
{
	struct cache_shared *sh = calloc(1, sizeof(*sh));
	pthread_condattr_t ca;
	unsigned i;
	int rc;

	if (!sh)
		return -ENOMEM;
	snprintf(sh->store, sizeof(sh->store), "%s", store);
	sh->bs = bs;
	sh->wait_s = cfg->shared_wait;
	sh->run_blocks = MCFS_MAX(1, cfg->shared_run / bs);
	sh->timeout_s = cfg->shared_timeout;
	sh->done = done;
	sh->ctx = ctx;
	sh->qmax = MCFS_MAX(1, queue_max);
	sh->rd.what = "reads";
	sh->wr.what = "writes";
	cache_shared_lease_init(sh);
	make_node_id(sh->node, sizeof(sh->node));
	pthread_mutex_init(&sh->lock, NULL);
	pthread_cond_init(&sh->work, NULL);
	pthread_cond_init(&sh->runs_changed, NULL);
	pthread_cond_init(&sh->claims, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sh->stop_cond, &ca);
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
	if (rc == 0 && sh->wait_s > 0) {
		rc = -pthread_create(&sh->claimer, NULL, cache_shared_claimer, sh);
		sh->claimer_on = rc == 0;
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
	atomic_store(&sh->stopping, true);
	pthread_cond_broadcast(&sh->stop_cond);
	pthread_mutex_unlock(&sh->lock);
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
	pthread_cond_broadcast(&sh->claims);
	pthread_mutex_unlock(&sh->lock);
	for (i = 0; i < sh->nwriters; i++)
		pthread_join(sh->writers[i], NULL);
	if (sh->claimer_on)
		pthread_join(sh->claimer, NULL);
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
	out->shared_state = atomic_load(&sh->rd.state) == H_DOWN   ? 2
			    : atomic_load(&sh->wr.state) == H_DOWN ? 3
								   : 1;
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
	out->shared_early = load(&sh->early);
	out->shared_unasked = load(&sh->unasked);
	out->shared_corrupt = load(&sh->corrupt);
	out->shared_unauthentic = load(&sh->unauthentic);
	out->shared_errors = load(&sh->errors);
	pthread_mutex_lock(&sh->lock);
	out->shared_queued = sh->qn + sh->writing;
	pthread_mutex_unlock(&sh->lock);
}
