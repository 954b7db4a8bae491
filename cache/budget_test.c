/*
 * budget_test.c - unit test of the RAM tier's one budget (budget.h): its
 * arithmetic step by step, then two scenarios on a real cache over a
 * directory store.
 *
 * Starvation: background fetches that never end (a FIFO in the store, whose
 * open() blocks until the test opens it for writing) are asked for every
 * slot, with prefetch_mem as big as the tier; the budget admits half, and a
 * reader of another file gets a slot and its bytes while the gate is still
 * closed. Without the budget every slot went to the gate and the reader
 * slept forever (ctest's timeout says so).
 *
 * No deadlock: more GPU-style loads than the slots allow (each holds a ring
 * of blocks while it asks for the next) all complete with the right bytes,
 * because they take windows from the budget and wait their turn. The test
 * holds the whole GPU share first, so that every load is seen waiting (no
 * timing decides it), then lets them go.
 */
#define _GNU_SOURCE
#include "mcfs_test.h"
#include "cache_test.h"
#include "cache_int.h"
#include "cache.h"
#include "cache_ram.h"

#include <pthread.h>
#include <sys/stat.h>

/* ---- the arithmetic ---------------------------------------------------- */

static void test_background_share(void)
{
	struct cache_budget b;
	int i;

	cache_budget_init(&b, 8);
	CHECK(b.bg_cap == 4 && b.gpu_cap == 2);
	for (i = 0; i < 4; i++)
		CHECK(cache_budget_take(&b, CACHE_CLAIM_PREFETCH), "prefetch %d", i);
	CHECK(!cache_budget_take(&b, CACHE_CLAIM_PREFETCH), "past half the slots");
	CHECK(b.refusals == 1);
	cache_budget_put(&b, CACHE_CLAIM_PREFETCH);
	CHECK(cache_budget_take(&b, CACHE_CLAIM_PREFETCH), "room again");
	/* write-behind is never refused, and counts against prefetch */
	cache_budget_put(&b, CACHE_CLAIM_PREFETCH);
	cache_budget_put(&b, CACHE_CLAIM_PREFETCH);
	CHECK(cache_budget_take(&b, CACHE_CLAIM_BEHIND) &&
	      cache_budget_take(&b, CACHE_CLAIM_BEHIND));
	CHECK(cache_budget_take(&b, CACHE_CLAIM_BEHIND), "behind past the cap too");
	CHECK(!cache_budget_take(&b, CACHE_CLAIM_PREFETCH), "2 prefetches and 3 writes");
	while (b.held[CACHE_CLAIM_BEHIND])
		cache_budget_put(&b, CACHE_CLAIM_BEHIND);
	/* a reader waiting for a slot holds up every new background claim */
	b.readers_waiting = 1;
	CHECK(!cache_budget_take(&b, CACHE_CLAIM_PREFETCH), "a reader waits");
	b.readers_waiting = 0;
	CHECK(cache_budget_take(&b, CACHE_CLAIM_PREFETCH));
	/* a one-slot tier still admits one of each */
	cache_budget_init(&b, 1);
	CHECK(b.bg_cap == 1 && b.gpu_cap == 1);
}

static void test_gpu_turns(void)
{
	struct cache_gpu_wait w[4] = {{.want = 2}, {.want = 2}, {.want = 1}, {.want = 64}};
	struct cache_budget b;

	cache_budget_init(&b, 8); /* gpu_cap 2 */
	CHECK(cache_budget_gpu_enqueue(&b, &w[0]) && w[0].granted == 2);
	CHECK(!cache_budget_gpu_enqueue(&b, &w[1]) && w[1].granted == 0);
	CHECK(!cache_budget_gpu_enqueue(&b, &w[2]),
	      "first come first served: 1 fits, not its turn");
	CHECK(!cache_budget_gpu_enqueue(&b, &w[3]));
	CHECK(b.gpu_waits == 3);
	cache_budget_gpu_put(&b, w[0].granted);
	CHECK(w[1].granted == 2 && w[2].granted == 0, "the oldest waiter first");
	cache_budget_gpu_cancel(&b, &w[2]); /* interrupted while waiting */
	CHECK(w[2].granted == 0 && b.gpu_queue == &w[3]);
	cache_budget_gpu_put(&b, w[1].granted);
	CHECK(w[3].granted == 2, "a window is at most gpu_cap: %u", w[3].granted);
	CHECK(b.gpu_queue == NULL && b.gpu_held == 2);
	cache_budget_gpu_cancel(&b, &w[3]); /* granted, then interrupted: given back */
	CHECK(b.gpu_held == 0);
}

/* ---- starvation --------------------------------------------------------- */

#define S_SLOTS 8
#define S_THREADS 6 /* 4 stuck on the gate, 2 for the reader */

static bool four_stuck(struct t_env *e)
{
	return t_stats(e).inflight == S_SLOTS / 2;
}

static void test_reader_not_starved(void)
{
	struct cache_attr a, ga = {.size = S_SLOTS * (uint64_t)T_BS, .mode = S_IFIFO | 0600};
	struct cache_file *f, *gate;
	struct cache_block *b;
	struct t_env e;
	char fifo[160];
	int i, admitted = 0, rc, fd;

	if (t_setup(&e, "budget_test", S_SLOTS, S_THREADS) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	e.cfg.prefetch_mem = e.cfg.ram_cache; /* readahead's own cap: every slot */
	snprintf(fifo, sizeof(fifo), "%s/gate", e.store);
	CHECK(t_write_file(&e, "a.bin", 2ull * T_BS, 3) == 0 && mkfifo(fifo, 0600) == 0);
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "a.bin", &a, &f) == 0, "open a.bin");
	CHECK(cache_file_get(e.cache, "gate", &ga, &gate) == 0, "gate identity");
	for (i = 0; i < S_SLOTS; i++) {
		rc = cache_prefetch(e.cache, gate, (uint64_t)i);
		CHECK(rc == 0 || rc == -EAGAIN, "prefetch %d: %d", i, rc);
		admitted += rc == 0;
	}
	CHECK(admitted == S_SLOTS / 2, "background admitted %d of %d slots", admitted, S_SLOTS);
	CHECK(t_wait_for(&e, four_stuck), "the fetch threads took the gate's jobs");
	CHECK(t_stats(&e).ram_background_slots == S_SLOTS / 2);
	/* the gate is still closed: this returns only if the reader got a slot */
	rc = cache_block_get(e.cache, f, 1, &b);
	CHECK(rc == 0, "reader: %d", rc);
	if (rc == 0) {
		CHECK(t_same(cache_block_data(b), T_BS, T_BS, 3), "reader's bytes");
		cache_block_put(e.cache, b);
	}
	fprintf(stderr, "budget_test: expected errors follow (the gate: a FIFO can't pread)\n");
	fd = open(fifo, O_WRONLY); /* lets the stuck fetch threads' open() return */
	CHECK(fd >= 0, "open the gate: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	cache_file_put(e.cache, gate);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- GPU loads beyond the slots ----------------------------------------- */

#define L_LOADS 6
#define L_BLOCKS 24
#define L_WANT 4 /* 6 loads x 4 blocks: three times the 8 slots */

struct loader {
	struct t_env *e;
	struct cache_file *f;
	int rc;
	bool bytes_ok;
	unsigned refused; /* prefetches the budget refused */
};

/* One load: a window from the budget, then a ring of held blocks over the
 * whole file, each released once the ring is full (as gpu/copy.c does). */
static void *load(void *arg)
{
	struct loader *l = arg;
	struct cache *c = l->e->cache;
	struct cache_block *ring[L_WANT];
	unsigned window = 0, head = 0, n = 0;
	uint64_t i;

	l->bytes_ok = true;
	l->rc = cache_gpu_window(c, L_WANT, NULL, NULL, &window);
	for (i = 0; l->rc == 0 && i < L_BLOCKS; i++) {
		if (n == window) {
			cache_block_put(c, ring[head]);
			head = (head + 1) % window;
			n--;
		}
		/* a lead, as a load has; -EAGAIN when the budget says no */
		if (i + 2 < L_BLOCKS && cache_prefetch(c, l->f, i + 2) < 0)
			l->refused++;
		l->rc = cache_block_get(c, l->f, i, &ring[(head + n) % window]);
		if (l->rc == 0 &&
		    !t_same(cache_block_data(ring[(head + n) % window]), i * T_BS, T_BS, 5))
			l->bytes_ok = false;
		n += l->rc == 0;
	}
	for (; n; n--, head = (head + 1) % window)
		cache_block_put(c, ring[head]);
	if (window)
		cache_gpu_window_put(c, window);
	return NULL;
}

static bool all_waiting(struct t_env *e)
{
	return t_stats(e).gpu_window_waits == L_LOADS;
}

static void test_loads_beyond_slots(void)
{
	struct loader l[L_LOADS];
	pthread_t th[L_LOADS];
	struct cache_attr a;
	struct cache_file *f;
	unsigned mine = 0;
	struct t_env e;
	int i;

	if (t_setup(&e, "budget_test", S_SLOTS, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	CHECK(t_write_file(&e, "m.bin", L_BLOCKS * (uint64_t)T_BS, 5) == 0);
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "m.bin", &a, &f) == 0, "open m.bin");
	/* the whole GPU share first: every load below must wait its turn */
	CHECK(cache_gpu_window(e.cache, S_SLOTS, NULL, NULL, &mine) == 0 && mine == S_SLOTS / 4,
	      "window %u", mine);
	for (i = 0; i < L_LOADS; i++) {
		l[i] = (struct loader){.e = &e, .f = f};
		pthread_create(&th[i], NULL, load, &l[i]);
	}
	CHECK(t_wait_for(&e, all_waiting), "every load waits for a window");
	cache_gpu_window_put(e.cache, mine);
	for (i = 0; i < L_LOADS; i++) {
		pthread_join(th[i], NULL);
		CHECK(l[i].rc == 0 && l[i].bytes_ok, "load %d: rc %d, bytes %s", i, l[i].rc,
		      l[i].bytes_ok ? "right" : "wrong");
	}
	pthread_mutex_lock(&e.cache->lock);
	CHECK(e.cache->budget.gpu_held == 0 && e.cache->budget.gpu_queue == NULL);
	pthread_mutex_unlock(&e.cache->lock);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

int main(void)
{
	test_background_share();
	test_gpu_turns();
	test_reader_not_starved();
	test_loads_beyond_slots();
	if (failures)
		fprintf(stderr, "budget_test: %d check(s) failed\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
