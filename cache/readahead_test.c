/*
 * readahead_test.c - unit test of readahead (readahead.c) over a real posix
 * store:
 *  - growth: a sequential reader's window doubles on entering each new block
 *    (1, 2, 4, 8) up to readahead_max, once per block however many requests
 *    it takes to read it, and the blocks up to current + window are asked
 *    for - no more, no fewer;
 *  - collapse: a read far from the stream drops the window to 0 and reads
 *    that are not a stream prefetch nothing; only a run of contiguous reads
 *    (RA_MIN_RUN, 4 MiB) opens the window again; a first read that is not at
 *    offset 0 proves nothing;
 *  - the memory budget: readahead never holds more than prefetch_mem of
 *    blocks nobody has read, however wide the window; when it is spent the
 *    stream stops asking, and goes on where it stopped once the reader has
 *    consumed blocks, so that no block is skipped;
 *  - waste: a random reader whose 4 MiB reads look like a stream prefetches
 *    once; when that block is evicted unread, reads of that size open no
 *    window again and fetch only what they read, while a long run still
 *    gets its readahead back; a sequential stream whose prefetched blocks
 *    are evicted unread halves its window and grows it back by one block
 *    per prefetched block read.
 *
 * Exits 0 (pass), 1 (fail) or 77 (skip: no scratch directory).
 */
#define _GNU_SOURCE
#include "mcfs_test.h"
#include "cache_test.h"
#include "cache.h"
#include "cache_ram.h"
#include "cache_readahead.h"
#include "cache_stats.h"

#define MAX_WINDOW 8 /* readahead_max, in blocks */
#define NBLOCKS 48
/* readahead.c's RA_MIN_RUN: contiguous bytes that make a stream mid-file */
#define MIN_RUN_BLOCKS ((4u << 20) / T_BS)

/* One whole-block access of block @i; returns the window after it. */
static unsigned access_block(struct cache_stream *s, uint64_t i)
{
	cache_stream_access(s, i * T_BS, T_BS);
	return cache_stream_window(s);
}

static void test_growth_and_collapse(void)
{
	static const unsigned want_window[] = {1, 2, 4, 8, 8, 8};
	struct cache_stats st0, st;
	struct cache_stream *s;
	struct cache_attr a;
	struct cache_file *f;
	struct t_env e;
	uint64_t i, asked;
	unsigned w;

	if (t_setup(&e, "readahead_test", 64, 4) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	e.cfg.readahead_max = (uint64_t)MAX_WINDOW * T_BS;
	e.cfg.prefetch_mem = 0; /* half of ram_cache: 32 blocks, never reached here */
	CHECK(t_write_file(&e, "s.bin", (uint64_t)NBLOCKS * T_BS, 7) == 0, "store file");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "s.bin", &a, &f) == 0, "open");
	CHECK(cache_stream_new(e.cache, f, &s) == 0, "stream");
	st0 = t_stats(&e);

	/* growth: 1, 2, 4, 8, then the cap; blocks up to i + 1 + window asked for */
	for (i = 0; i < MCFS_ARRAY_SIZE(want_window); i++) {
		w = access_block(s, i);
		st = t_stats(&e);
		asked = i + 1 + want_window[i] - 1; /* block 0 is the reader's own */
		CHECK(w == want_window[i], "block %llu: window %u (want %u)", (unsigned long long)i,
		      w, want_window[i]);
		CHECK(st.prefetches - st0.prefetches == asked,
		      "block %llu: %llu prefetches (want %llu)", (unsigned long long)i,
		      (unsigned long long)(st.prefetches - st0.prefetches),
		      (unsigned long long)asked);
		CHECK(!cache_stream_random(s), "block %llu: sequential", (unsigned long long)i);
	}
	/* requests inside one block (the kernel asks 128 KiB at a time): no growth,
	 * no new prefetch until the next block */
	st0 = t_stats(&e);
	for (i = 0; i < T_BS; i += 128 << 10)
		cache_stream_access(s, 6ull * T_BS + i, 128 << 10);
	st = t_stats(&e);
	CHECK(cache_stream_window(s) == MAX_WINDOW, "window %u", cache_stream_window(s));
	CHECK(st.prefetches - st0.prefetches == 1, "block 6 in pieces: %llu prefetches (want 1)",
	      (unsigned long long)(st.prefetches - st0.prefetches));

	/* collapse: a read far past the stream (more than 8 MiB from its end) */
	st0 = t_stats(&e);
	w = access_block(s, 40);
	CHECK(w == 0 && cache_stream_random(s), "far read: window %u, random %d", w,
	      cache_stream_random(s));
	w = access_block(s, 20);
	CHECK(w == 0 && cache_stream_random(s), "another far read: window %u", w);
	/* contiguous reads from there: not a stream until MIN_RUN_BLOCKS of them */
	for (i = 21; i < 20 + MIN_RUN_BLOCKS - 1; i++) {
		w = access_block(s, i);
		CHECK(w == 0 && cache_stream_random(s), "block %llu of a short run: window %u",
		      (unsigned long long)i, w);
	}
	st = t_stats(&e);
	CHECK(st.prefetches == st0.prefetches, "random reads prefetched %llu blocks",
	      (unsigned long long)(st.prefetches - st0.prefetches));
	w = access_block(s, 20 + MIN_RUN_BLOCKS - 1);
	st = t_stats(&e);
	CHECK(w == 1 && !cache_stream_random(s), "after a %u MiB run: window %u (want 1)",
	      MIN_RUN_BLOCKS, w);
	CHECK(st.prefetches - st0.prefetches == 1, "reopened window: %llu prefetches (want 1)",
	      (unsigned long long)(st.prefetches - st0.prefetches));
	cache_stream_free(s);

	/* a new stream whose first read is mid-file: not sequential, not random */
	CHECK(cache_stream_new(e.cache, f, &s) == 0, "second stream");
	w = access_block(s, 30);
	CHECK(w == 0 && !cache_stream_random(s), "first read mid-file: window %u, random %d", w,
	      cache_stream_random(s));
	cache_stream_free(s);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

#define BUDGET 3 /* prefetch_mem, in blocks */
#define BUDGET_BLOCKS 24

/* A cache whose readahead may hold BUDGET blocks, with a window of up to 16. */
static int budget_env(struct t_env *e, struct cache_file **f, struct cache_stream **s)
{
	struct cache_attr a;

	if (t_setup(e, "readahead_test", 32, 4) < 0)
		return -1;
	e->cfg.readahead_max = 16ull * T_BS;
	e->cfg.prefetch_mem = (uint64_t)BUDGET * T_BS;
	if (t_write_file(e, "b.bin", (uint64_t)BUDGET_BLOCKS * T_BS, 8) < 0 || t_start(e) < 0 ||
	    t_open_file(e, "b.bin", &a, f) < 0)
		return -1;
	return cache_stream_new(e->cache, *f, s);
}

/* A stream nobody reads: the window grows, the budget caps what it holds. */
static void test_budget_unread(void)
{
	struct cache_stats st;
	struct cache_stream *s = NULL;
	struct cache_file *f = NULL;
	struct t_env e;
	uint64_t i;

	if (budget_env(&e, &f, &s) < 0) {
		CHECK(0, "set-up");
		return;
	}
	for (i = 0; i < 10; i++) {
		access_block(s, i);
		st = t_stats(&e);
		CHECK(st.prefetch_bytes <= (uint64_t)BUDGET * T_BS,
		      "after block %llu: readahead holds %llu bytes (budget %llu)",
		      (unsigned long long)i, (unsigned long long)st.prefetch_bytes,
		      (unsigned long long)BUDGET * T_BS);
	}
	CHECK(cache_stream_window(s) == 16, "window %u (want 16)", cache_stream_window(s));
	st = t_stats(&e);
	CHECK(st.prefetches == BUDGET && st.prefetch_bytes == (uint64_t)BUDGET * T_BS,
	      "%llu prefetches holding %llu bytes (want %u, the budget)",
	      (unsigned long long)st.prefetches, (unsigned long long)st.prefetch_bytes, BUDGET);
	CHECK(cache_prefetch(e.cache, f, 20) == -EAGAIN, "a prefetch beyond the budget");
	cache_stream_free(s);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/*
 * A reader that reads what it accesses, as fs/ does: the budget stays the
 * bound, each block read frees room for one more, and the stream asks next
 * for the block it was refused, so every block but the first is prefetched
 * (none is a demand miss) and each is read from the store once.
 */
static void test_budget_reader(void)
{
	uint64_t i, most = 0;
	struct cache_stats st;
	struct cache_stream *s = NULL;
	struct cache_block *b;
	struct cache_file *f = NULL;
	struct t_env e;

	if (budget_env(&e, &f, &s) < 0) {
		CHECK(0, "set-up");
		return;
	}
	for (i = 0; i < BUDGET_BLOCKS; i++) {
		access_block(s, i);
		st = t_stats(&e);
		most = MCFS_MAX(most, st.prefetch_bytes);
		CHECK(cache_block_get(e.cache, f, i, &b) == 0 &&
			  t_same(cache_block_data(b), i * T_BS, T_BS, 8),
		      "read block %llu", (unsigned long long)i);
		cache_block_put(e.cache, b);
	}
	st = t_stats(&e);
	CHECK(most == (uint64_t)BUDGET * T_BS, "readahead held at most %llu bytes (want %llu)",
	      (unsigned long long)most, (unsigned long long)BUDGET * T_BS);
	CHECK(st.misses == 1 && st.prefetches == BUDGET_BLOCKS - 1,
	      "misses %llu (want 1: block 0), prefetches %llu (want %u)",
	      (unsigned long long)st.misses, (unsigned long long)st.prefetches, BUDGET_BLOCKS - 1);
	CHECK(st.store_reads == BUDGET_BLOCKS, "store reads %llu (want %u: each block once)",
	      (unsigned long long)st.store_reads, BUDGET_BLOCKS);
	CHECK(st.prefetch_bytes == 0, "all read: readahead holds %llu bytes",
	      (unsigned long long)st.prefetch_bytes);
	cache_stream_free(s);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- waste: prefetched blocks evicted unread ----------------------------- */

#define W_BLOCKS 64

static bool no_background_claims(struct t_env *e)
{
	struct cache_stats st = t_stats(e);

	return st.ram_background_slots == 0 && st.inflight == 0;
}

/*
 * A read as fs/ serves one: the stream sees it, then the block is read.
 * The prefetches asked so far land first: a prefetch holds a background
 * claim until it lands (budget.h), and one still in flight on a slow
 * machine would make the window asked for here go past half the slots,
 * which these tests do not test.
 */
static void read_block(struct t_env *e, struct cache_stream *s, struct cache_file *f, uint64_t i,
		       unsigned seed)
{
	struct cache_block *b;

	CHECK(t_wait_for(e, no_background_claims), "the fetches before block %llu landed",
	      (unsigned long long)i);
	cache_stream_access(s, i * T_BS, T_BS);
	CHECK(cache_block_get(e->cache, f, i, &b) == 0 &&
		  t_same(cache_block_data(b), i * T_BS, T_BS, seed),
	      "read block %llu", (unsigned long long)i);
	cache_block_put(e->cache, b);
}

/* Another reader's misses on blocks [from, from + n): they take the LRU slots. */
static void other_reads(struct t_env *e, struct cache_file *f, uint64_t from, unsigned n)
{
	struct cache_block *b;
	unsigned i;

	for (i = 0; i < n; i++) {
		CHECK(cache_block_get(e->cache, f, from + i, &b) == 0, "other read %llu",
		      (unsigned long long)(from + i));
		cache_block_put(e->cache, b);
	}
}

static uint64_t want_fetches;

/* Every fetch asked for so far has landed (and so sits in the LRU). */
static bool fetches_landed(struct t_env *e)
{
	struct cache_stats st = t_stats(e);

	return st.fetches >= want_fetches && st.inflight == 0;
}

/*
 * 4 MiB random reads in 1 MiB requests, as the kernel sends them: the first
 * reaches RA_MIN_RUN and prefetches one block; once that block is evicted
 * unread, the next reads of that size prefetch nothing and fetch only what
 * they read (random), and a long sequential run opens a window again.
 */
static void test_waste_random_reads(void)
{
	struct cache_stats st0, st;
	struct cache_stream *s = NULL;
	struct cache_attr a;
	struct cache_file *f = NULL;
	struct t_env e;
	uint64_t i, r;

	if (t_setup(&e, "readahead_test", 8, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	e.cfg.readahead_max = (uint64_t)MAX_WINDOW * T_BS;
	e.cfg.prefetch_mem = 0; /* half of ram_cache: 4 blocks */
	if (t_write_file(&e, "w.bin", (uint64_t)W_BLOCKS * T_BS, 9) < 0 || t_start(&e) < 0 ||
	    t_open_file(&e, "w.bin", &a, &f) < 0 || cache_stream_new(e.cache, f, &s) < 0) {
		CHECK(0, "set-up");
		goto out;
	}
	read_block(&e, s, f, 40, 9); /* a first read: proves nothing */
	/* the first 4 MiB read looks like a stream at its last MiB */
	for (i = 10; i < 14; i++)
		read_block(&e, s, f, i, 9);
	st = t_stats(&e);
	CHECK(st.prefetches == 1 && cache_stream_window(s) == 1,
	      "a 4 MiB read: %llu prefetches, window %u (want 1, 1)",
	      (unsigned long long)st.prefetches, cache_stream_window(s));
	want_fetches = 6; /* blocks 40, 10-13 and the prefetched 14 */
	CHECK(t_wait_for(&e, fetches_landed), "the prefetch of block 14 landed");
	other_reads(&e, f, 50, 8); /* 8 slots: block 14 goes, unread */
	st0 = t_stats(&e);
	CHECK(st0.prefetch_unused == 1, "prefetch_unused %llu (want 1)",
	      (unsigned long long)st0.prefetch_unused);

	/* more 4 MiB reads elsewhere (farther apart than RA_REORDER): no window,
	 * only what they read */
	for (r = 0; r < 3; r++) {
		for (i = 24 + 14 * r; i < 28 + 14 * r; i++) {
			read_block(&e, s, f, i, 9);
			CHECK(cache_stream_window(s) == 0 && cache_stream_random(s),
			      "4 MiB read %llu, block %llu: window %u, random %d (want 0, 1)",
			      (unsigned long long)r, (unsigned long long)i, cache_stream_window(s),
			      cache_stream_random(s));
		}
	}
	st = t_stats(&e);
	CHECK(st.prefetches == st0.prefetches, "4 MiB reads after the waste prefetched %llu blocks",
	      (unsigned long long)(st.prefetches - st0.prefetches));

	/* a real stream still gets readahead back: 24 contiguous blocks */
	for (i = 36; i < 60; i++)
		read_block(&e, s, f, i, 9);
	st = t_stats(&e);
	CHECK(cache_stream_window(s) >= 4 && !cache_stream_random(s) &&
		  st.prefetches > st0.prefetches,
	      "a long run after the waste: window %u, random %d, %llu prefetches",
	      cache_stream_window(s), cache_stream_random(s),
	      (unsigned long long)(st.prefetches - st0.prefetches));
out:
	cache_stream_free(s);
	if (f)
		cache_file_put(e.cache, f);
	t_teardown(&e);
}

/*
 * A sequential stream at its full window of 8 loses its 8 prefetched blocks
 * to another reader's misses before it reads them: it goes on with a window
 * of 4, asks again for what it lost, and grows back to 8 by one block per
 * prefetched block read.
 */
static void test_waste_sequential(void)
{
	static const unsigned want_window[] = {4, 4, 5, 6, 7, 8, 8};
	struct cache_stats st;
	struct cache_stream *s = NULL;
	struct cache_attr a;
	struct cache_file *f = NULL;
	struct t_env e;
	uint64_t i;

	if (t_setup(&e, "readahead_test", 16, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	e.cfg.readahead_max = (uint64_t)MAX_WINDOW * T_BS;
	e.cfg.prefetch_mem = 12ull * T_BS; /* room for blocks 3-11 unread at once */
	if (t_write_file(&e, "q.bin", (uint64_t)W_BLOCKS * T_BS, 10) < 0 || t_start(&e) < 0 ||
	    t_open_file(&e, "q.bin", &a, &f) < 0 || cache_stream_new(e.cache, f, &s) < 0) {
		CHECK(0, "set-up");
		goto out;
	}
	for (i = 0; i < 4; i++) /* windows 1, 2, 4, 8: blocks 4-11 prefetched */
		read_block(&e, s, f, i, 10);
	CHECK(cache_stream_window(s) == MAX_WINDOW, "window %u (want %u)", cache_stream_window(s),
	      MAX_WINDOW);
	want_fetches = 12;
	CHECK(t_wait_for(&e, fetches_landed), "the prefetches landed");
	other_reads(&e, f, 40, 16); /* every slot: the 8 prefetched blocks go unread */
	st = t_stats(&e);
	CHECK(st.prefetch_unused == 8, "prefetch_unused %llu (want 8)",
	      (unsigned long long)st.prefetch_unused);

	for (i = 0; i < MCFS_ARRAY_SIZE(want_window); i++) {
		read_block(&e, s, f, 4 + i, 10);
		CHECK(cache_stream_window(s) == want_window[i] && !cache_stream_random(s),
		      "block %llu after the waste: window %u (want %u), random %d",
		      (unsigned long long)(4 + i), cache_stream_window(s), want_window[i],
		      cache_stream_random(s));
	}
	st = t_stats(&e);
	/* block 4 was the only one missed: 5-8 were asked for again at block 4 */
	CHECK(st.misses == 1 + 16 + 1, "misses %llu (want 18: blocks 0 and 4, 16 others)",
	      (unsigned long long)st.misses);
out:
	cache_stream_free(s);
	if (f)
		cache_file_put(e.cache, f);
	t_teardown(&e);
}

int main(void)
{
	char probe[] = "/tmp/readahead_test.XXXXXX";

	mcfs_log_setup(getenv("V") ? MCFS_LOG_DEBUG : MCFS_LOG_ERR, false);
	if (!mkdtemp(probe)) {
		fprintf(stderr, "readahead_test: no scratch directory in /tmp: skip\n");
		return T_EXIT_SKIP;
	}
	rmdir(probe);
	test_growth_and_collapse();
	test_budget_unread();
	test_budget_reader();
	test_waste_random_reads();
	test_waste_sequential();
	if (failures)
		fprintf(stderr, "readahead_test: %d failures\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
