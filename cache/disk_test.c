/*
 * disk_test.c - unit test of cache/disk: write-behind and verified reads,
 * LRU eviction when the tier is full, a corrupted slot is dropped (never
 * served) and counted, eviction by path, and the index surviving a reopen.
 *
 * Small blocks (64 KiB) and a four-slot tier keep it fast. Exits 0 (pass),
 * 1 (fail) or 77 (skip: no scratch directory or no io_uring).
 */
#define _GNU_SOURCE
#include "disk.h"
#include "mcfs_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS (64u * 1024)
#define NSLOTS 4

static atomic_int dones;

static void done(void *ctx, void *arg)
{
	(void)ctx, (void)arg;
	atomic_fetch_add(&dones, 1);
}

static void fill(char *buf, unsigned seed, uint32_t len)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)((i * 31 + seed * 7 + (i >> 9)) & 0xff);
}

static struct cache_meta_key key(unsigned i)
{
	struct cache_meta_key k;

	cache_meta_block_key(i < 100 ? "m/a.bin" : "m/b.bin", "v1", i % 100, &k);
	return k;
}

/* Writes block @i (seed i) and waits until it is indexed. */
static void put(struct cache_disk *d, char *buf, unsigned i, uint32_t len)
{
	struct cache_meta_key k = key(i);

	fill(buf, i, len);
	CHECK(cache_disk_write(d, &k, buf, len, NULL) == 0, "queue block %u", i);
	cache_disk_flush(d);
}

/* Reads block @i back: 0 and right bytes, or the read's error. */
static int get(struct cache_disk *d, char *buf, char *want, unsigned i, uint32_t len)
{
	struct cache_meta_key k = key(i);
	uint32_t n = 0;
	int rc;

	memset(buf, 0, BS);
	rc = cache_disk_read(d, &k, buf, BS, &n);
	if (rc == 0) {
		fill(want, i, len);
		CHECK(n == len && memcmp(buf, want, len) == 0, "block %u bytes (len %u)", i, n);
	}
	return rc;
}

static int open_tier(const char *dir, struct cache_meta **m, struct cache_disk **d)
{
	char sub[4200];

	snprintf(sub, sizeof(sub), "%s/meta", dir);
	if (cache_meta_open(sub, 64ull << 20, m) < 0)
		return -1;
	if (cache_disk_open(dir, NSLOTS * BS, BS, *m, 8, done, NULL, d) < 0) {
		cache_meta_close(*m);
		return -1;
	}
	return 0;
}

static void corrupt_slot(const char *dir, unsigned slot)
{
	char p[4200], junk[512];
	int fd;

	snprintf(p, sizeof(p), "%s/blocks/slots", dir);
	fd = open(p, O_WRONLY);
	memset(junk, 0xee, sizeof(junk));
	CHECK(fd >= 0 &&
		  pwrite(fd, junk, sizeof(junk), (off_t)slot * BS + 1000) == (ssize_t)sizeof(junk),
	      "scribble on slot %u", slot);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	/* the tier reads with O_DIRECT: make sure no stale page cache is in the way */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

int main(void)
{
	char dir[] = "/tmp/disk_test.XXXXXX", cmd[64];
	struct cache_disk_stats st;
	struct cache_meta *m = NULL;
	struct cache_disk *d = NULL;
	char *buf, *rd, *want;
	unsigned i;

	mcfs_log_setup(MCFS_LOG_ERR + (getenv("V") ? 3 : 0), false);
	if (!mkdtemp(dir) || posix_memalign((void **)&buf, 4096, BS) ||
	    posix_memalign((void **)&rd, 4096, BS) || posix_memalign((void **)&want, 4096, BS))
		return 77;
	if (open_tier(dir, &m, &d) < 0) {
		fprintf(stderr, "disk_test: cannot open a tier in %s (io_uring?): skip\n", dir);
		return 77;
	}
	/* write and read back, incl. a short last block */
	put(d, buf, 0, BS);
	put(d, buf, 1, 1000);
	CHECK(get(d, rd, want, 0, BS) == 0, "read 0");
	CHECK(get(d, rd, want, 1, 1000) == 0, "read short 1");
	CHECK(get(d, rd, want, 2, BS) == -ENOENT, "2 was never written");
	CHECK(cache_disk_held(d, &(struct cache_meta_key){0}) == 0, "held of nothing");
	{
		struct cache_meta_key k = key(1);

		CHECK(cache_disk_held(d, &k) == 1000, "held bytes");
		CHECK(cache_disk_write(d, &k, buf, 1000, NULL) == -EEXIST, "no duplicate writes");
	}
	/* fill the tier, then one more: the least recently used (1: 0 was read after) goes */
	put(d, buf, 2, BS);
	put(d, buf, 3, BS);
	CHECK(get(d, rd, want, 0, BS) == 0, "touch 0");
	put(d, buf, 4, BS);
	CHECK(get(d, rd, want, 1, 1000) == -ENOENT, "LRU victim 1 is gone");
	CHECK(get(d, rd, want, 0, BS) == 0, "0 stays");
	CHECK(get(d, rd, want, 4, BS) == 0, "4 is there");
	cache_disk_get_stats(d, &st);
	CHECK(st.slots == NSLOTS && st.slots_used == NSLOTS && st.evictions == 1,
	      "stats: slots %llu used %llu evictions %llu", (unsigned long long)st.slots,
	      (unsigned long long)st.slots_used, (unsigned long long)st.evictions);

	/* a rotten slot is dropped and never served */
	for (i = 0; i < NSLOTS; i++)
		corrupt_slot(dir, i);
	CHECK(get(d, rd, want, 4, BS) == -ENOENT, "corrupt block 4 not served");
	CHECK(get(d, rd, want, 4, BS) == -ENOENT, "and it is gone");
	cache_disk_get_stats(d, &st);
	CHECK(st.csum_errors == 1, "one checksum error (%llu)", (unsigned long long)st.csum_errors);

	/* evict by path, then reopen: the index survives, evicted blocks do not */
	put(d, buf, 101, BS);
	CHECK(cache_disk_evict_path(d, "m/a.bin") > 0, "evict a.bin");
	CHECK(get(d, rd, want, 0, BS) == -ENOENT, "a.bin evicted");
	cache_disk_close(d);
	cache_meta_close(m);
	CHECK(atomic_load(&dones) == 6, "one done per queued job (%d)", atomic_load(&dones));
	CHECK(open_tier(dir, &m, &d) == 0, "reopen");
	if (d) {
		CHECK(get(d, rd, want, 101, BS) == 0, "b.bin block survives a reopen");
		CHECK(get(d, rd, want, 0, BS) == -ENOENT, "evicted stays evicted");
		cache_disk_close(d);
		cache_meta_close(m);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	free(buf);
	free(rd);
	free(want);
	if (failures)
		fprintf(stderr, "disk_test: %d failures\n", failures);
	return failures ? 1 : 0;
}
