/*
 * meta_test.c - unit test of cache/meta: attributes (present, missing,
 * forgotten, long paths), listings with their children's attributes, the
 * block index (update, scan, clear), persistence across reopen, that a
 * corrupt environment is rebuilt at open rather than failing it, and that a
 * small map under a churning store drops old records, never a write
 * (generations: meta.h).
 *
 * Exits 0 (pass), 1 (fail) or 77 (skip: no scratch directory).
 */
#define _GNU_SOURCE
#include "meta.h"
#include "mcfs_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct cache_attr attr(uint64_t size, const char *version)
{
	struct cache_attr a;

	memset(&a, 0, sizeof(a));
	a.size = size;
	a.mode = 0100644;
	a.mtime_ns = 1234567890123;
	snprintf(a.version, sizeof(a.version), "%s", version);
	return a;
}

static void test_attrs(struct cache_meta *m)
{
	struct cache_attr a = attr(42, "v1"), got;
	char longpath[2000];
	bool exists;
	int64_t t;

	CHECK(cache_meta_get_attr(m, "nope", &got, &exists, &t) == -ENOENT, "unknown path");
	CHECK(cache_meta_put_attr(m, "dir/file", &a, 77) == 0, "put");
	CHECK(cache_meta_get_attr(m, "dir/file", &got, &exists, &t) == 0, "get");
	CHECK(exists && t == 77 && got.size == 42 && strcmp(got.version, "v1") == 0,
	      "round trip: exists %d t %lld size %llu", exists, (long long)t,
	      (unsigned long long)got.size);
	CHECK(cache_meta_put_attr(m, "gone", NULL, 5) == 0, "put missing");
	CHECK(cache_meta_get_attr(m, "gone", &got, &exists, &t) == 0 && !exists && t == 5,
	      "missing recorded");
	CHECK(cache_meta_put_attr(m, "", &a, 1) == 0, "the root (empty path)");
	CHECK(cache_meta_get_attr(m, "", &got, &exists, &t) == 0 && t == 1, "root back");
	CHECK(cache_meta_del_attr(m, "dir/file") == 0, "del");
	CHECK(cache_meta_get_attr(m, "dir/file", &got, &exists, &t) == -ENOENT, "deleted");
	CHECK(cache_meta_del_attr(m, "dir/file") == 0, "del of a missing one is fine");
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	CHECK(cache_meta_put_attr(m, longpath, &a, 9) == 0, "long path");
	CHECK(cache_meta_get_attr(m, longpath, &got, &exists, &t) == 0 && t == 9, "long back");
}

static void test_lists(struct cache_meta *m)
{
	struct cache_dirent ents[3], *got = NULL;
	struct cache_attr a;
	bool exists;
	size_t n = 0;
	int64_t t;
	int i;

	for (i = 0; i < 3; i++) {
		snprintf(ents[i].name, sizeof(ents[i].name), "f%d", i);
		ents[i].attr = attr((uint64_t)i * 10, "e");
	}
	CHECK(cache_meta_get_list(m, "models", &got, &n, &t) == -ENOENT, "no listing yet");
	CHECK(cache_meta_put_list(m, "models", ents, 3, 100) == 0, "put list");
	CHECK(cache_meta_get_list(m, "models", &got, &n, &t) == 0, "get list");
	CHECK(n == 3 && t == 100 && got && strcmp(got[2].name, "f2") == 0 && got[2].attr.size == 20,
	      "list round trip (n %zu)", n);
	free(got);
	CHECK(cache_meta_get_attr(m, "models/f1", &a, &exists, &t) == 0 && exists && a.size == 10 &&
		  t == 100,
	      "a listing records its children's attributes");
	CHECK(cache_meta_put_list(m, "", NULL, 0, 3) == 0, "empty root listing");
	got = NULL;
	CHECK(cache_meta_get_list(m, "", &got, &n, &t) == 0 && n == 0, "empty listing back");
	free(got);
}

struct scan {
	size_t n;
	uint64_t slots;
};

static int count(void *arg, const struct cache_meta_key *k, const struct cache_meta_block *v)
{
	struct scan *s = arg;

	(void)k;
	s->n++;
	s->slots += v->slot;
	return 0;
}

static void test_blocks(struct cache_meta *m)
{
	struct cache_meta_key k[3], other;
	struct cache_meta_block v[3];
	struct scan sc = {0, 0};
	int i;

	for (i = 0; i < 3; i++) {
		cache_meta_block_key("a/model.bin", "v1", (uint64_t)i, &k[i]);
		v[i] = (struct cache_meta_block){.slot = (uint32_t)i + 1, .len = 4096, .csum = 7};
	}
	cache_meta_block_key("a/model.bin", "v2", 0, &other);
	CHECK(memcmp(&k[0], &other, sizeof(other)) != 0, "versions give other keys");
	CHECK(cache_meta_key_has_path(&other, "a/model.bin"), "key knows its path");
	CHECK(!cache_meta_key_has_path(&other, "a/model.bim"), "and not another");
	CHECK(cache_meta_blocks_update(m, NULL, 0, k, v, 3) == 0, "put 3");
	CHECK(cache_meta_blocks_scan(m, count, &sc) == 0 && sc.n == 3 && sc.slots == 6,
	      "scan sees 3 (n %zu)", sc.n);
	CHECK(cache_meta_blocks_update(m, &k[1], 1, NULL, NULL, 0) == 0, "delete 1");
	sc = (struct scan){0, 0};
	CHECK(cache_meta_blocks_scan(m, count, &sc) == 0 && sc.n == 2 && sc.slots == 4,
	      "scan sees 2");
	CHECK(cache_meta_blocks_update(m, &k[1], 1, NULL, NULL, 0) == 0, "delete missing: ok");
	CHECK(cache_meta_put_u64(m, "block_size", 65536) == 0, "put u64");
}

static void test_reopen(const char *dir)
{
	struct cache_meta *m = NULL;
	struct scan sc = {0, 0};
	struct cache_attr a;
	bool exists;
	uint64_t v = 0;
	int64_t t;

	CHECK(cache_meta_open(dir, 64ull << 20, &m) == 0, "reopen");
	if (!m)
		return;
	CHECK(cache_meta_get_attr(m, "", &a, &exists, &t) == 0, "attrs persist");
	CHECK(cache_meta_blocks_scan(m, count, &sc) == 0 && sc.n == 2, "blocks persist");
	CHECK(cache_meta_get_u64(m, "block_size", &v) == 0 && v == 65536, "u64 persists");
	CHECK(cache_meta_blocks_clear(m) == 0, "clear");
	sc = (struct scan){0, 0};
	CHECK(cache_meta_blocks_scan(m, count, &sc) == 0 && sc.n == 0, "cleared");
	cache_meta_close(m);
}

static void test_corrupt(const char *dir)
{
	struct cache_meta *m = NULL;
	char p[4200], junk[8192];
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0, "open data.mdb");
	memset(junk, 0x5a, sizeof(junk));
	CHECK(fd < 0 || write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk), "scribble");
	if (fd >= 0)
		close(fd);
	CHECK(cache_meta_open(dir, 64ull << 20, &m) == 0,
	      "a corrupt environment is rebuilt, not fatal");
	if (m)
		cache_meta_close(m);
}

static uint64_t prunes_of(struct cache_meta *m)
{
	uint64_t map, used, prunes;

	cache_meta_usage(m, &map, &used, &prunes);
	return prunes;
}

/* Records "no such name" answers for churn/n<i> from *next on until @prunes generations
 * were dropped; every write must succeed. */
static void churn_until(struct cache_meta *m, unsigned *next, uint64_t prunes)
{
	char path[64];
	int fails = 0;

	while (prunes_of(m) < prunes && *next < 1000000) {
		snprintf(path, sizeof(path), "churn/n%07u", (*next)++);
		fails += cache_meta_put_attr(m, path, NULL, 1000 + *next) != 0;
	}
	CHECK(fails == 0 && prunes_of(m) == prunes, "%d writes failed before %llu prunes", fails,
	      (unsigned long long)prunes);
}

/* A 1 MiB map (256 pages) and a store that keeps showing new names. */
static void test_small_map(const char *dir)
{
	struct cache_dirent *ents = calloc(900, sizeof(*ents)), *got = NULL;
	struct cache_meta_key k[64];
	struct cache_meta_block v[64];
	struct scan sc = {0, 0};
	struct cache_meta *m = NULL;
	struct cache_attr a = attr(1, "keep");
	uint64_t map, used, prunes;
	unsigned next = 0, i;
	bool exists;
	size_t n;
	int64_t t;

	CHECK(ents && cache_meta_open(dir, 1ull << 20, &m) == 0, "open with a 1 MiB map");
	if (!m || !ents) {
		free(ents);
		return;
	}
	for (i = 0; i < 64; i++) {
		cache_meta_block_key("m/big.bin", "v1", i, &k[i]);
		v[i] = (struct cache_meta_block){.slot = i, .len = 4096, .csum = i};
	}
	CHECK(cache_meta_blocks_update(m, NULL, 0, k, v, 64) == 0, "a block index of 64");
	CHECK(cache_meta_put_attr(m, "kept", &a, 1) == 0, "put");
	churn_until(m, &next, 1);
	CHECK(cache_meta_get_attr(m, "kept", &a, &exists, &t) == 0 && exists,
	      "a record of the last generation is kept (after %u writes)", next);
	churn_until(m, &next, 2);
	CHECK(cache_meta_get_attr(m, "kept", &a, &exists, &t) == -ENOENT,
	      "a record two generations old is dropped");
	/* A listing over a third of the map (about 110 pages with its children's
	 * records) does not fit beside the two generations: the write drops them. */
	for (i = 0; i < 900; i++) {
		snprintf(ents[i].name, sizeof(ents[i].name), "f%u", i);
		ents[i].attr = attr(i, "e");
	}
	churn_until(m, &next, 4);
	CHECK(cache_meta_put_list(m, "big", ents, 900, 5) == 0, "a large listing is recorded");
	CHECK(cache_meta_get_list(m, "big", &got, &n, &t) == 0 && n == 900, "and read back");
	free(got);
	churn_until(m, &next, prunes_of(m) + 200);
	CHECK(cache_meta_blocks_update(m, k, 1, NULL, NULL, 0) == 0, "the index takes a delete");
	for (i = 0; i < 64; i++) /* the disk tier's next blocks, with the map in use */
		cache_meta_block_key("m/big.bin", "v2", i, &k[i]);
	CHECK(cache_meta_blocks_update(m, NULL, 0, k, v, 64) == 0, "and 64 more blocks");
	CHECK(cache_meta_blocks_scan(m, count, &sc) == 0 && sc.n == 127,
	      "the block index is never dropped (%zu of 127)", sc.n);
	cache_meta_usage(m, &map, &used, &prunes);
	CHECK(map == 1ull << 20 && used <= map / 2, "records use %llu of the %llu byte map",
	      (unsigned long long)used, (unsigned long long)map);
	cache_meta_close(m);
	free(ents);
}

int main(void)
{
	char dir[] = "/tmp/meta_test.XXXXXX", sub[64];
	struct cache_meta *m = NULL;

	mcfs_log_setup(MCFS_LOG_ERR, false);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 77;
	}
	snprintf(sub, sizeof(sub), "%s/meta", dir);
	CHECK(cache_meta_open(sub, 64ull << 20, &m) == 0, "open");
	if (m) {
		test_attrs(m);
		test_lists(m);
		test_blocks(m);
		cache_meta_close(m);
		test_reopen(sub);
		test_corrupt(sub);
	}
	snprintf(sub, sizeof(sub), "%s/small", dir);
	test_small_map(sub);
	snprintf(sub, sizeof(sub), "rm -rf %s", dir);
	if (system(sub) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	if (failures)
		fprintf(stderr, "meta_test: %d failures\n", failures);
	return failures ? 1 : 0;
}
