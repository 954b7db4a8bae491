/*
 * blocks_test.c - unit test of the RAM tier (blocks.c) over a real posix
 * store, counting store reads exactly:
 *  - single flight: 16 threads miss on one block at once; the store is read
 *    once, all 16 get the same slot and the right bytes;
 *  - a referenced block is never evicted: with three of four slots held,
 *    thirteen other blocks stream through the fourth; the held blocks keep
 *    their slots and bytes;
 *  - partial pages grow to a full block: [lo, hi) fetches only its pages, a
 *    larger range only the pages missing, the whole block the rest: every
 *    byte fetched once, the bytes equal to the file's at each step;
 *  - two versions of a file never share a block: same path, new version,
 *    new identity, other slot, other bytes; the old identity never gets the
 *    new bytes;
 *  - many readers over a small tier (for the sanitizer builds): always the
 *    file's bytes;
 *  - file identities live while referenced: a closed file's identity lasts
 *    while one of its blocks is in the RAM tier, and is freed with the last.
 *
 * Exits 0 (pass), 1 (fail) or 77 (skip: no scratch directory).
 */
#define _GNU_SOURCE
#include "mcfs_test.h"
#include "cache_test.h"
#include "cache.h"
#include "cache_ram.h"
#include "cache_stats.h"

#include <pthread.h>
#include <sys/stat.h>

#define PAGE 4096u

/* ---- single flight ------------------------------------------------------- */

/*
 * The cache has one fetch thread, and a slot for each reader (so that even a
 * cache without single flight would not wait for one). A prefetch of "gate", a FIFO, occupies it:
 * the posix store's open() of a FIFO blocks until a writer opens it. While it
 * is stuck, 16 readers miss on block 3 of a.bin: one queues the fetch, the
 * others must join it. Only then is the gate opened (its read fails: a FIFO
 * can't pread) and the one fetch thread reads block 3. Were single flight
 * broken, the queue would hold 16 fetches of block 3, and the count of store
 * reads says so whatever the timing.
 */
#define SF_READERS 16
#define SF_BLOCK 3

struct reader {
	struct t_env *e;
	struct cache_file *f;
	const char *data; /* the slot the reader got */
	int rc;
	bool bytes_ok;
};

static void *sf_reader(void *arg)
{
	struct reader *r = arg;
	struct cache_block *b;

	r->rc = cache_block_get(r->e->cache, r->f, SF_BLOCK, &b);
	if (r->rc == 0) {
		r->data = cache_block_data(b);
		r->bytes_ok = cache_block_len(b) == T_BS &&
			      t_same(r->data, (uint64_t)SF_BLOCK * T_BS, T_BS, 1);
		cache_block_put(r->e->cache, b);
	}
	return NULL;
}

static bool gate_taken(struct t_env *e)
{
	return t_stats(e).inflight == 1;
}

static struct cache_stats sf_base;

static bool all_readers_in(struct t_env *e)
{
	struct cache_stats st = t_stats(e);

	return st.misses - sf_base.misses + st.waits - sf_base.waits == SF_READERS;
}

static void test_single_flight(void)
{
	struct reader r[SF_READERS];
	pthread_t th[SF_READERS];
	struct cache_attr a, ga = {.size = T_BS, .mode = S_IFIFO | 0600};
	struct cache_file *f, *gate;
	struct cache_stats st;
	char fifo[160];
	int i, fd;
	struct t_env e;

	if (t_setup(&e, "blocks_test", SF_READERS + 8, 1) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	snprintf(fifo, sizeof(fifo), "%s/gate", e.store);
	CHECK(t_write_file(&e, "a.bin", 6ull * T_BS, 1) == 0 && mkfifo(fifo, 0600) == 0,
	      "store files");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "a.bin", &a, &f) == 0, "open a.bin");
	/* the store gives a FIFO no version: "" */
	CHECK(cache_file_get(e.cache, "gate", &ga, &gate) == 0, "gate identity");

	sf_base = t_stats(&e);
	CHECK(cache_prefetch(e.cache, gate, 0) == 0, "prefetch the gate");
	CHECK(t_wait_for(&e, gate_taken), "the fetch thread took the gate's job");
	for (i = 0; i < SF_READERS; i++) {
		r[i] = (struct reader){.e = &e, .f = f};
		pthread_create(&th[i], NULL, sf_reader, &r[i]);
	}
	CHECK(t_wait_for(&e, all_readers_in), "all %d readers asked for block %d", SF_READERS,
	      SF_BLOCK);
	fprintf(stderr, "blocks_test: an expected error follows (the gate: a FIFO can't pread)\n");
	fd = open(fifo, O_WRONLY); /* lets the fetch thread's open() return */
	CHECK(fd >= 0, "open the gate: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	for (i = 0; i < SF_READERS; i++) {
		pthread_join(th[i], NULL);
		CHECK(r[i].rc == 0 && r[i].bytes_ok, "reader %d: rc %d, bytes %s", i, r[i].rc,
		      r[i].bytes_ok ? "right" : "wrong");
		CHECK(r[i].data == r[0].data, "reader %d got another slot", i);
	}
	st = t_stats(&e);
	CHECK(st.store_reads - sf_base.store_reads == 2,
	      "store reads: %llu (want 2: the gate's, then block %d once)",
	      (unsigned long long)(st.store_reads - sf_base.store_reads), SF_BLOCK);
	CHECK(st.store_bytes - sf_base.store_bytes == T_BS, "store bytes %llu",
	      (unsigned long long)(st.store_bytes - sf_base.store_bytes));
	CHECK(st.misses - sf_base.misses == 1 && st.waits - sf_base.waits == SF_READERS - 1,
	      "misses %llu (want 1), waits %llu (want %d)",
	      (unsigned long long)(st.misses - sf_base.misses),
	      (unsigned long long)(st.waits - sf_base.waits), SF_READERS - 1);
	CHECK(st.fetches - sf_base.fetches == 2 && st.fetch_errors - sf_base.fetch_errors == 1,
	      "fetches %llu, errors %llu", (unsigned long long)(st.fetches - sf_base.fetches),
	      (unsigned long long)(st.fetch_errors - sf_base.fetch_errors));

	/* now READY: 16 more readers are hits, and the store is not asked again */
	sf_base = st;
	for (i = 0; i < SF_READERS; i++) {
		r[i] = (struct reader){.e = &e, .f = f};
		pthread_create(&th[i], NULL, sf_reader, &r[i]);
	}
	for (i = 0; i < SF_READERS; i++) {
		pthread_join(th[i], NULL);
		CHECK(r[i].rc == 0 && r[i].bytes_ok && r[i].data == r[0].data, "hit %d", i);
	}
	st = t_stats(&e);
	CHECK(st.hits - sf_base.hits == SF_READERS && st.store_reads == sf_base.store_reads,
	      "hits %llu, store reads %llu", (unsigned long long)(st.hits - sf_base.hits),
	      (unsigned long long)(st.store_reads - sf_base.store_reads));
	cache_file_put(e.cache, gate);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- a referenced block is never evicted --------------------------------- */

#define EV_SLOTS 4
#define EV_BLOCKS 16
#define EV_HELD 3

static void test_held_never_evicted(void)
{
	struct cache_block *held[EV_HELD], *b;
	const char *slot[EV_HELD];
	struct cache_stats st0, st;
	struct cache_attr a;
	struct cache_file *f;
	struct t_env e;
	unsigned i, pass;

	if (t_setup(&e, "blocks_test", EV_SLOTS, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	CHECK(t_write_file(&e, "big.bin", (uint64_t)EV_BLOCKS * T_BS, 2) == 0, "store file");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "big.bin", &a, &f) == 0, "open");
	st0 = t_stats(&e);
	for (i = 0; i < EV_HELD; i++) {
		CHECK(cache_block_get(e.cache, f, i, &held[i]) == 0, "get %u", i);
		slot[i] = cache_block_data(held[i]);
	}
	/* blocks EV_HELD.. stream through the one slot left, twice over */
	for (pass = 0; pass < 2; pass++) {
		for (i = EV_HELD; i < EV_BLOCKS; i++) {
			CHECK(cache_block_get(e.cache, f, i, &b) == 0, "get %u", i);
			CHECK(t_same(cache_block_data(b), (uint64_t)i * T_BS, T_BS, 2),
			      "block %u bytes", i);
			cache_block_put(e.cache, b);
		}
	}
	st = t_stats(&e);
	/* the first of them took the free slot; each later one evicted its predecessor */
	CHECK(st.evictions - st0.evictions == 2 * (EV_BLOCKS - EV_HELD) - 1,
	      "evictions %llu (want %u)", (unsigned long long)(st.evictions - st0.evictions),
	      2 * (EV_BLOCKS - EV_HELD) - 1);
	for (i = 0; i < EV_HELD; i++) {
		CHECK(cache_block_data(held[i]) == slot[i] &&
			  t_same(slot[i], (uint64_t)i * T_BS, T_BS, 2),
		      "held block %u kept its slot and bytes", i);
		cache_block_put(e.cache, held[i]);
	}
	/* let go, they are still cached where they were: hits, no store read */
	st0 = t_stats(&e);
	for (i = 0; i < EV_HELD; i++) {
		CHECK(cache_block_get(e.cache, f, i, &b) == 0, "get %u again", i);
		CHECK(cache_block_data(b) == slot[i], "block %u in its slot", i);
		cache_block_put(e.cache, b);
	}
	st = t_stats(&e);
	CHECK(st.hits - st0.hits == EV_HELD && st.store_reads == st0.store_reads,
	      "hits %llu, store reads %llu", (unsigned long long)(st.hits - st0.hits),
	      (unsigned long long)(st.store_reads - st0.store_reads));
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- partial pages grow to a full block ---------------------------------- */

/* Gets [lo, hi) of block @index; checks its bytes and what the store sent. */
static void grow_step(struct t_env *e, struct cache_file *f, uint64_t index, uint32_t lo,
		      uint32_t hi, uint64_t want_bytes, uint64_t want_reads)
{
	struct cache_stats st0 = t_stats(e), st;
	struct cache_block *b;
	int rc;

	rc = cache_block_get_range(e->cache, f, index, lo, hi, &b);
	CHECK(rc == 0, "block %llu [%u, %u): %d", (unsigned long long)index, lo, hi, rc);
	if (rc < 0)
		return;
	CHECK(t_same(cache_block_data(b) + lo, index * T_BS + lo, hi - lo, 3),
	      "block %llu [%u, %u) bytes", (unsigned long long)index, lo, hi);
	cache_block_put(e->cache, b);
	st = t_stats(e);
	CHECK(st.store_bytes - st0.store_bytes == want_bytes &&
		  st.store_reads - st0.store_reads == want_reads,
	      "block %llu [%u, %u): store sent %llu bytes in %llu reads (want %llu in %llu)",
	      (unsigned long long)index, lo, hi,
	      (unsigned long long)(st.store_bytes - st0.store_bytes),
	      (unsigned long long)(st.store_reads - st0.store_reads),
	      (unsigned long long)want_bytes, (unsigned long long)want_reads);
}

static void test_partial_growth(void)
{
	const uint32_t last = T_BS / 2 + 100; /* the short last block: its last page too */
	struct cache_attr a;
	struct cache_file *f;
	struct t_env e;

	if (t_setup(&e, "blocks_test", 8, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	CHECK(t_write_file(&e, "p.bin", 2ull * T_BS + last, 3) == 0, "store file");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "p.bin", &a, &f) == 0, "open");

	/* 5000 bytes from page 2: pages 2 and 3 */
	grow_step(&e, f, 1, 2 * PAGE, 2 * PAGE + 5000, 2 * PAGE, 1);
	/* [0, 40000): pages 0-9; 2 and 3 are held, so two runs: 0-1 and 4-9 */
	grow_step(&e, f, 1, 0, 40000, 8 * PAGE, 2);
	/* inside what is held: no store read */
	grow_step(&e, f, 1, PAGE + 7, 3 * PAGE, 0, 0);
	/* the whole block: only pages 10-255 */
	grow_step(&e, f, 1, 0, T_BS, T_BS - 10 * PAGE, 1);
	/* now full: any range is a hit */
	grow_step(&e, f, 1, T_BS - 100, T_BS, 0, 0);

	/* the file's short last block: its last page is cut at EOF */
	grow_step(&e, f, 2, last - 10, last, last - (last / PAGE) * PAGE, 1);
	grow_step(&e, f, 2, 0, last, (last / PAGE) * PAGE, 1);
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- two versions never share a block ------------------------------------ */

static void test_versions(void)
{
	struct cache_file *f1, *f1b, *f2;
	struct cache_block *b1, *b2, *b;
	struct cache_attr a1, a2;
	struct t_env e;
	int rc;

	if (t_setup(&e, "blocks_test", 8, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	CHECK(t_write_file(&e, "v.bin", 2ull * T_BS, 4) == 0, "version 1");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "v.bin", &a1, &f1) == 0, "open version 1");
	CHECK(cache_block_get(e.cache, f1, 0, &b1) == 0, "v1 block 0");

	/* same path, same size, other bytes (and another inode: a new version) */
	CHECK(t_write_file(&e, "v.bin", 2ull * T_BS, 5) == 0, "version 2");
	CHECK(t_open_file(&e, "v.bin", &a2, &f2) == 0, "open version 2");
	CHECK(strcmp(a1.version, a2.version) != 0, "versions differ: %s %s", a1.version,
	      a2.version);
	CHECK(f1 != f2, "a new version gets a new identity");
	CHECK(cache_file_get(e.cache, "v.bin", &a1, &f1b) == 0 && f1b == f1,
	      "the old version keeps its identity");
	cache_file_put(e.cache, f1b);

	CHECK(cache_block_get(e.cache, f2, 0, &b2) == 0, "v2 block 0");
	CHECK(cache_block_data(b2) != cache_block_data(b1), "v1 and v2 share a slot");
	CHECK(t_same(cache_block_data(b2), 0, T_BS, 5), "v2 block 0 has v2's bytes");
	CHECK(t_same(cache_block_data(b1), 0, T_BS, 4), "v1 block 0 still has v1's bytes");
	cache_block_put(e.cache, b1);
	cache_block_put(e.cache, b2);

	/* v1's cached block is still v1's; its uncached block can't be had any more */
	CHECK(cache_block_get(e.cache, f1, 0, &b) == 0 && t_same(cache_block_data(b), 0, T_BS, 4),
	      "v1 block 0 again");
	cache_block_put(e.cache, b);
	fprintf(stderr, "blocks_test: an expected error follows (v1 is gone from the store)\n");
	rc = cache_block_get(e.cache, f1, 1, &b);
	CHECK(rc == -ESTALE, "v1 block 1 after v2 replaced it: %d (want -ESTALE)", rc);
	if (rc == 0)
		cache_block_put(e.cache, b);
	CHECK(cache_block_get(e.cache, f2, 1, &b) == 0 &&
		  t_same(cache_block_data(b), T_BS, T_BS, 5),
	      "v2 block 1");
	cache_block_put(e.cache, b);
	cache_file_put(e.cache, f1);
	cache_file_put(e.cache, f2);
	t_teardown(&e);
}

/* ---- many readers over a small tier --------------------------------------- */

#define MR_THREADS 8
#define MR_GETS 48
#define MR_BLOCKS 12

struct mr_arg {
	struct t_env *e;
	struct cache_file *f;
	unsigned seed;
	int bad;
};

/* Random blocks and ranges (some whole, some partial) of the file: bytes checked. */
static void *mr_reader(void *arg)
{
	struct mr_arg *m = arg;
	struct cache_block *b;
	unsigned i, x = m->seed;

	for (i = 0; i < MR_GETS; i++) {
		uint64_t index;
		uint32_t lo, hi;

		x = x * 1103515245 + 12345;
		index = (x >> 8) % MR_BLOCKS;
		lo = (x >> 4) % 4 == 0 ? 0 : ((x >> 12) % 200) * PAGE;
		hi = lo + PAGE + ((x >> 20) % 64) * PAGE;
		if (hi > T_BS || (x >> 4) % 4 == 0)
			hi = T_BS;
		if (cache_block_get_range(m->e->cache, m->f, index, lo, hi, &b) < 0) {
			m->bad++;
			continue;
		}
		if (!t_same(cache_block_data(b) + lo, index * T_BS + lo, hi - lo, 6))
			m->bad++;
		cache_block_put(m->e->cache, b);
	}
	return NULL;
}

static void test_many_readers(void)
{
	struct mr_arg m[MR_THREADS];
	pthread_t th[MR_THREADS];
	struct cache_attr a;
	struct cache_file *f;
	struct t_env e;
	unsigned i;

	if (t_setup(&e, "blocks_test", 4, 3) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	CHECK(t_write_file(&e, "m.bin", (uint64_t)MR_BLOCKS * T_BS, 6) == 0, "store file");
	CHECK(t_start(&e) == 0, "cache");
	CHECK(t_open_file(&e, "m.bin", &a, &f) == 0, "open");
	for (i = 0; i < MR_THREADS; i++) {
		m[i] = (struct mr_arg){.e = &e, .f = f, .seed = i + 1};
		pthread_create(&th[i], NULL, mr_reader, &m[i]);
	}
	for (i = 0; i < MR_THREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK(m[i].bad == 0, "reader %u: %d bad gets", i, m[i].bad);
	}
	cache_file_put(e.cache, f);
	t_teardown(&e);
}

/* ---- identities are freed with their last reference ----------------------- */

static void test_identities_freed(void)
{
	struct cache_file *f, *again;
	struct cache_block *b;
	struct cache_evicted ev;
	struct cache_attr a;
	struct cache_stats st;
	char name[16];
	struct t_env e;
	unsigned i;

	if (t_setup(&e, "blocks_test", 4, 2) < 0) {
		CHECK(0, "scratch directory");
		return;
	}
	for (i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "id%u", i);
		CHECK(t_write_file(&e, name, T_BS, 10 + i) == 0, "store file %s", name);
	}
	CHECK(t_start(&e) == 0, "cache");
	for (i = 0; i < 10; i++) { /* open, read one block, close: as a reader of many files */
		snprintf(name, sizeof(name), "id%u", i);
		CHECK(t_open_file(&e, name, &a, &f) == 0, "open %s", name);
		CHECK(cache_block_get(e.cache, f, 0, &b) == 0, "%s block 0", name);
		cache_block_put(e.cache, b);
		cache_file_put(e.cache, f);
	}
	st = t_stats(&e);
	CHECK(st.file_identities == 4, "identities of closed files: %llu, want 4 (one per slot)",
	      (unsigned long long)st.file_identities);
	/* The newest is still in RAM under its identity: a hit, no store read. */
	CHECK(t_open_file(&e, "id9", &a, &again) == 0, "reopen id9");
	CHECK(cache_block_get(e.cache, again, 0, &b) == 0 &&
		  t_same(cache_block_data(b), 0, T_BS, 19),
	      "id9 block 0 from RAM");
	cache_block_put(e.cache, b);
	CHECK(t_stats(&e).hits == st.hits + 1 && t_stats(&e).store_reads == st.store_reads,
	      "a reopen finds the block read before");
	cache_evict_file(e.cache, again, &ev);
	cache_file_put(e.cache, again);
	CHECK(t_stats(&e).file_identities == 3, "evicted and closed: its identity freed (%llu)",
	      (unsigned long long)t_stats(&e).file_identities);
	t_teardown(&e);
}

int main(void)
{
	char probe[] = "/tmp/blocks_test.XXXXXX";

	mcfs_log_setup(getenv("V") ? MCFS_LOG_DEBUG : MCFS_LOG_ERR, false);
	if (!mkdtemp(probe)) {
		fprintf(stderr, "blocks_test: no scratch directory in /tmp: skip\n");
		return T_EXIT_SKIP;
	}
	rmdir(probe);
	test_single_flight();
	test_held_never_evicted();
	test_partial_growth();
	test_versions();
	test_many_readers();
	test_identities_freed();
	if (failures)
		fprintf(stderr, "blocks_test: %d failures\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
