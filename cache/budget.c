/*
 * budget.c - the RAM tier's one budget (budget.h says the rules and why
 * they keep every claimant moving). The arithmetic is pure: no lock is
 * taken and nothing sleeps in it; blocks.c calls it under cache->lock, and
 * budget_test.c drives it step by step. At the end, the GPU loads' entry
 * points (cache_ram.h), which take cache->lock and sleep for a window.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_ram.h"

#include <errno.h>
#include <time.h>

void cache_budget_init(struct cache_budget *b, size_t slots)
{
	*b = (struct cache_budget){.slots = (unsigned)slots};
	/* Half for background: readahead needs a window's worth ahead of a
	 * reader to keep the store busy, and the readers keep the other half. */
	b->bg_cap = (unsigned)MCFS_MAX(1, slots / 2);
	/* A quarter for GPU windows: one load's window is slots / 8 (gpu/copy.c),
	 * so two loads copy at once on the smallest tier, and more on a big one. */
	b->gpu_cap = (unsigned)MCFS_MAX(1, slots / 4);
}

bool cache_budget_take(struct cache_budget *b, enum cache_claim k)
{
	if (k == CACHE_CLAIM_PREFETCH &&
	    (b->readers_waiting > 0 ||
	     b->held[CACHE_CLAIM_PREFETCH] + b->held[CACHE_CLAIM_BEHIND] >= b->bg_cap)) {
		b->refusals++;
		return false;
	}
	b->held[k]++;
	return true;
}

void cache_budget_put(struct cache_budget *b, enum cache_claim k)
{
	if (b->held[k] > 0)
		b->held[k]--;
}

bool cache_budget_gpu_grant(struct cache_budget *b)
{
	struct cache_gpu_wait *w;
	bool any = false;
	unsigned n;

	/* First come first served: a load that does not fit stops those behind it. */
	while ((w = b->gpu_queue)) {
		n = MCFS_MIN(w->want, b->gpu_cap);
		if (b->gpu_held + n > b->gpu_cap)
			break;
		b->gpu_held += n;
		w->granted = n;
		b->gpu_queue = w->next;
		w->next = NULL;
		any = true;
	}
	return any;
}

bool cache_budget_gpu_enqueue(struct cache_budget *b, struct cache_gpu_wait *w)
{
	struct cache_gpu_wait **pp = &b->gpu_queue;

	w->want = MCFS_MAX(1, w->want);
	w->granted = 0;
	w->next = NULL;
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
	cache_budget_gpu_grant(b);
	if (!w->granted)
		b->gpu_waits++;
	return w->granted > 0;
}

void cache_budget_gpu_cancel(struct cache_budget *b, struct cache_gpu_wait *w)
{
	struct cache_gpu_wait **pp;

	if (w->granted) {
		cache_budget_gpu_put(b, w->granted);
		w->granted = 0;
		return;
	}
	for (pp = &b->gpu_queue; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			w->next = NULL;
			break;
		}
	}
	cache_budget_gpu_grant(b); /* those behind it may fit now */
}

void cache_budget_gpu_put(struct cache_budget *b, unsigned n)
{
	b->gpu_held -= MCFS_MIN(n, b->gpu_held);
	cache_budget_gpu_grant(b);
}

/* ---- GPU loads' windows (cache_ram.h) --------------------------------- */

int cache_gpu_window(struct cache *c, unsigned want, int (*stop)(void *), void *arg,
		     unsigned *granted)
{
	struct cache_gpu_wait w = {.want = want};
	struct timespec ts;
	int rc = 0, s;

	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_budget_gpu_enqueue(&c->budget, &w);
	while (!w.granted) {
		/* Sleeps on c->gpu_turn (c->lock) until a window is granted to w;
		 * every 100 ms it asks @stop, without the lock, whether to give up. */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c->gpu_turn, &c->lock, &ts);
		if (w.granted || !stop)
			continue;
		pthread_mutex_unlock(&c->lock);
		s = stop(arg);
		pthread_mutex_lock(&c->lock);
		if (s && !w.granted) {
			cache_budget_gpu_cancel(&c->budget, &w);
			pthread_cond_broadcast(&c->gpu_turn); /* those behind may fit now */
			rc = -EINTR;
			break;
		}
	}
	*granted = w.granted;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void cache_gpu_window_put(struct cache *c, unsigned n)
{
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_budget_gpu_put(&c->budget, n);
	pthread_cond_broadcast(&c->gpu_turn);
	pthread_mutex_unlock(&c->lock);
}
