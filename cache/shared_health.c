/*
 * shared_health.c - the shared tier's two up/down states (shared_int.h):
 * reads (the whole tier) and writes.
 *
 * A request that fails (no answer, a timeout, a 5xx; for reads also 403)
 * takes its state down with one log line; while down, requests are not sent
 * (reads go to the store, writes are dropped) but one probe every
 * SHARED_RETRY_S seconds, whose success brings it up with one line (for
 * writes, a write the service took: shared.c's write_one()).
 * Requests that were in flight when it went down change nothing: only a
 * probe brings it back, so a slow service does not flap.
 *
 * A busy service is no down one (cache/remote/blob.c has the clocks): a
 * request cut while the service answered others sends its read to the store
 * and changes no state; one cut by the service's silence does the same the
 * first time, and takes the tier down when the silence lasted another
 * shared_timeout (quiet_long()).
 */
#define _GNU_SOURCE
#include "shared_int.h"

#include "cache.h"

#include <errno.h>
#include <stdatomic.h>

enum ticket cache_shared_begin(struct health *h)
{
	bool no = false;

	if (atomic_load(&h->state) == H_UP)
		return T_NORMAL;
	if (mcfs_now_ns() < atomic_load(&h->retry_ns))
		return T_NONE;
	if (!atomic_compare_exchange_strong(&h->probing, &no, true))
		return T_NONE;
	return T_PROBE;
}

/* A request of ticket @t went well: a probe brings its state up. */
void cache_shared_went_well(struct cache_shared *sh, struct health *h, enum ticket t)
{
	if (t != T_PROBE)
		return;
	pthread_mutex_lock(&sh->lock);
	if (atomic_load(&h->state) == H_DOWN) {
		atomic_store(&h->state, H_UP);
		MCFS_INFO("shared cache %s: %s up again after %.1f s", sh->name, h->what,
			  (double)(mcfs_now_ns() - h->since_ns) / 1e9);
	}
	atomic_store(&h->probing, false);
	pthread_mutex_unlock(&sh->lock);
}

/* Ends a probe ticket of @h whose failure another state answers for. */
void cache_shared_release(struct health *h, enum ticket t)
{
	if (t == T_PROBE) {
		atomic_store(&h->retry_ns, mcfs_now_ns() + SHARED_RETRY_S * NS_PER_S);
		atomic_store(&h->probing, false);
	}
}

/*
 * A request was cut because the service sent nothing for shared_timeout. Has
 * that silence lasted another shared_timeout since the first request it cut
 * (down), or did it just begin? A busy service falls silent for seconds at
 * times (measured with 8 nodes on one Swift on 2 CPUs: one node heard
 * nothing for 2 s once in a 2 GiB load, and going down for SHARED_RETRY_S
 * sent 1.9 times the model to the origin); a stopped one stays silent. So the
 * first cut only sends its read to the store, and the tier goes down when the
 * service is still silent a shared_timeout later: a reader waits at most
 * about shared_timeout either way.
 */
static bool quiet_long(struct cache_shared *sh)
{
	uint64_t now = mcfs_now_ns(), first = atomic_load(&sh->quiet_ns);

	if (first == 0 || remote_blob_heard(sh->blob) > first) {
		atomic_store(&sh->quiet_ns, now);
		return false;
	}
	return now - first >= (uint64_t)(sh->timeout_s * 1e9);
}

/* A request of ticket @t (@op on @key) failed: an up state goes down, logged once. */
void cache_shared_went_wrong(struct cache_shared *sh, struct health *h, enum ticket t,
			     const char *op, const char *key, const struct remote_blob_res *res)
{
	unsigned long long now = mcfs_now_ns();

	shared_count(&sh->errors, 1);
	if (h == &sh->rd && t == T_NORMAL && (res->busy || (res->quiet && !quiet_long(sh)))) {
		/* a busy service, not a gone one: this read goes to the store */
		MCFS_DEBUG("shared cache %s: %s %s: %s; busy, not down", sh->name, op, key,
			   res->error);
		return;
	}
	pthread_mutex_lock(&sh->lock);
	if (atomic_load(&h->state) == H_UP && t != T_NONE) {
		atomic_store(&h->state, H_DOWN);
		h->since_ns = now;
		atomic_store(&h->retry_ns, now + SHARED_RETRY_S * NS_PER_S);
		if (h == &sh->rd)
			MCFS_WARN("shared cache %s: down (%s %s: %s); reads go to the store, "
				  "trying it again every %d s",
				  sh->name, op, key, res->error[0] ? res->error : "failed",
				  SHARED_RETRY_S);
		else
			MCFS_WARN("shared cache %s: refuses writes (%s %s: %s); blocks are read "
				  "from it but not added, trying again every %d s",
				  sh->name, op, key, res->error[0] ? res->error : "failed",
				  SHARED_RETRY_S);
	} else if (t == T_PROBE) {
		atomic_store(&h->retry_ns, now + SHARED_RETRY_S * NS_PER_S);
		MCFS_DEBUG("shared cache %s: %s still down (%s %s: %s)", sh->name, h->what, op, key,
			   res->error);
	}
	if (t == T_PROBE)
		atomic_store(&h->probing, false);
	pthread_mutex_unlock(&sh->lock);
}

/*
 * The service itself failed (no answer, a timeout, a 5xx), not refused one
 * request. A request cut by the service's silence, or while it answered
 * others, is a matter of the whole service: the read state's rules
 * (cache_shared_went_wrong()) say whether it is down or busy, whatever the status line
 * that came before the silence (a busy Swift once sent one, then nothing for
 * 2 s, and its writes were counted as refused). A block PUT that it took
 * whole and did not answer in time is slow to store, not down: its reads may
 * be fine.
 */
static bool service_down(int rc, const struct remote_blob_res *res)
{
	if (res->quiet || res->busy)
		return true;
	/* no final status: nothing, or only "100 Continue", came back */
	return rc == -EIO && !res->unanswered &&
	       (res->status < 200 || (res->status >= 500 && res->status != 507));
}

/* A write (@op on @key) failed: the whole tier down, or its writes refused. */
void cache_shared_write_failed(struct cache_shared *sh, enum ticket wt, int rc, const char *op,
			       const char *key, const struct remote_blob_res *res)
{
	if (service_down(rc, res)) {
		cache_shared_went_wrong(sh, &sh->rd, T_NORMAL, op, key, res);
		cache_shared_release(&sh->wr, wt);
	} else {
		cache_shared_went_wrong(sh, &sh->wr, wt, op, key, res);
	}
}
