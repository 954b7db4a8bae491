/*
 * disk_test.c - unit test of cache/disk: write-behind into one sparse file
 * per version (each block at its own offset) and verified reads, LRU
 * eviction when the tier is full (the victim punched out, an emptied file
 * unlinked), a corrupted block is dropped (never served) and counted,
 * eviction by path, a version pinned as a backing file (verified at its first
 * pin, refused with a flipped byte, never evicted while pinned), the index
 * and every block surviving a reopen, the start-up sweep of bytes no entry
 * claims, and an old slot file discarded.
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
#include <sys/stat.h>
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

	cache_meta_block_key(i < 100   ? "m/a.bin"
			     : i < 200 ? "m/b.bin"
				       : "m/c.bin",
			     "v1", i % 100, &k);
	return k;
}

/* Writes block @i (seed i) and waits until it is indexed. */
static void put(struct cache_disk *d, char *buf, unsigned i, uint32_t len)
{
	struct cache_meta_key k = key(i);

	fill(buf, i, len);
	CHECK(cache_disk_write(d, &k, buf, len, NULL, true) == 0, "queue block %u", i);
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
	if (cache_disk_open(dir, NSLOTS * BS, BS, *m, 8, true, 2, done, NULL, d) < 0) {
		cache_meta_close(*m);
		return -1;
	}
	return 0;
}

/* The version file of block @i (see key()). */
static void file_of(const char *dir, unsigned i, char *p, size_t len)
{
	struct cache_meta_key k = key(i);
	size_t n = (size_t)snprintf(p, len, "%s/blocks/", dir);
	unsigned j;

	for (j = 0; j < 24; j++, n += 2)
		snprintf(p + n, 3, "%02x", k.b[j]);
}

/* Allocated bytes of block @i's version file (-1: no file). */
static long long allocated(const char *dir, unsigned i)
{
	char p[4200];
	struct stat st;

	file_of(dir, i, p, sizeof(p));
	return stat(p, &st) == 0 ? (long long)st.st_blocks * 512 : -1;
}

/* Flips bytes of block @i in its version file, at its own offset. */
static void corrupt(const char *dir, unsigned i)
{
	char p[4200], junk[512];
	int fd;

	file_of(dir, i, p, sizeof(p));
	fd = open(p, O_WRONLY);
	memset(junk, 0xee, sizeof(junk));
	CHECK(fd >= 0 && pwrite(fd, junk, sizeof(junk), (off_t)(i % 100) * BS + 700) ==
			     (ssize_t)sizeof(junk),
	      "scribble on block %u", i);
	if (fd >= 0) {
		fsync(fd);
		/* the tier reads with O_DIRECT: no stale page cache in the way */
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* b.bin: blocks 100 (whole) and 101 (whole) and 102 (short): a 3-block version. */
#define B_SIZE (2ull * BS + 5000)

/* A second version of b.bin: one block, so that the tier's four slots hold
 * it beside a pinned b.bin. */
#define B2_SIZE 5000u

/* Pins @version of b.bin, closing the file it opens. */
static int pin_b(struct cache_disk *d, const char *version, uint64_t size)
{
	int fd, rc = cache_disk_pin_file(d, "m/b.bin", version, size, &fd);

	if (fd >= 0)
		close(fd);
	return rc;
}

/* The versions verified whole now (mcfs status's backing_files). */
static uint64_t backing_files(struct cache_disk *d)
{
	struct cache_disk_verified v;

	cache_disk_verify_stats(d, &v);
	return v.files;
}

/* Writes the second version of b.bin (seed 110) and waits until it is indexed. */
static void put_b2(struct cache_disk *d, char *buf)
{
	struct cache_meta_key k;

	cache_meta_block_key("m/b.bin", "v2", 0, &k);
	fill(buf, 110, B2_SIZE);
	CHECK(cache_disk_write(d, &k, buf, B2_SIZE, NULL, true) == 0, "queue v2's block");
	cache_disk_flush(d);
}

static void put_b(struct cache_disk *d, char *buf)
{
	struct cache_meta_key k = key(100);

	if (cache_disk_held(d, &k) == 0)
		put(d, buf, 100, BS);
	k = key(101);
	if (cache_disk_held(d, &k) == 0)
		put(d, buf, 101, BS);
	k = key(102);
	if (cache_disk_held(d, &k) == 0)
		put(d, buf, 102, 5000);
}

/* The backing-file door: pin (verify), refuse a flipped byte, no eviction of pinned blocks. */
static void pin_checks(const char *dir, struct cache_disk *d, char *buf, char *rd, char *want)
{
	struct cache_disk_verified v;
	struct cache_meta_key k;
	struct stat st;
	unsigned i;
	char *got;
	int fd = -1;

	CHECK(cache_disk_pin_file(d, "m/b.bin", "v1", B_SIZE, &fd) == -ENOENT,
	      "not whole: no backing file");
	put_b(d, buf);
	/* a flipped byte: the pin verifies, refuses and drops that block */
	corrupt(dir, 101);
	CHECK(cache_disk_pin_file(d, "m/b.bin", "v1", B_SIZE, &fd) == -EIO, "refused: bad block");
	k = key(101);
	CHECK(cache_disk_held(d, &k) == 0, "the bad block is dropped");
	cache_disk_verify_stats(d, &v);
	CHECK(v.errors == 1 && v.verifies == 0 && v.files == 0, "one failed verification");
	put_b(d, buf); /* fetched again */
	CHECK(cache_disk_pin_file(d, "m/b.bin", "v1", B_SIZE, &fd) == 0, "pinned, verified");
	cache_disk_verify_stats(d, &v);
	CHECK(v.verifies == 1 && v.files == 1 && v.bytes == B_SIZE, "verified once (%llu)",
	      (unsigned long long)v.verifies);
	got = malloc(B_SIZE);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == B_SIZE,
	      "the backing file has the version's size");
	CHECK(got && fd >= 0 && pread(fd, got, B_SIZE, 0) == (ssize_t)B_SIZE, "read it whole");
	for (i = 0; got && i < 3; i++) {
		fill(want, 100 + i, i < 2 ? BS : 5000);
		CHECK(memcmp(got + (size_t)i * BS, want, i < 2 ? BS : 5000) == 0,
		      "backing file block %u", i);
	}
	free(got);
	if (fd >= 0)
		close(fd);
	/* pinned: filling the tier evicts nothing of b.bin; eviction by path skips it */
	for (i = 200; i < 200 + NSLOTS; i++) {
		k = key(i);
		fill(buf, i, BS);
		if (cache_disk_write(d, &k, buf, BS, NULL, true) == 0)
			cache_disk_flush(d);
	}
	CHECK(cache_disk_evict_path(d, "m/b.bin") == 0, "pinned blocks are not evicted by path");
	for (i = 0; i < 3; i++)
		CHECK(get(d, rd, want, 100 + i, i < 2 ? BS : 5000) == 0, "pinned block %u stays",
		      i);
	/* the second pin is not verified again */
	CHECK(cache_disk_pin_file(d, "m/b.bin", "v1", B_SIZE, &fd) == 0, "second pin");
	if (fd >= 0)
		close(fd);
	cache_disk_verify_stats(d, &v);
	CHECK(v.verifies == 1, "verified once per mount (%llu)", (unsigned long long)v.verifies);
	cache_disk_unpin_file(d, "m/b.bin", "v1", B_SIZE);
	cache_disk_unpin_file(d, "m/b.bin", "v1", B_SIZE);
	CHECK(cache_disk_evict_path(d, "m/b.bin") == 2 * BS + 5000, "unpinned: evicted");
	CHECK(allocated(dir, 100) == -1, "b.bin's file is gone");
	/* superseded while pinned twice: its blocks go at the last unpin, not before */
	put_b(d, buf);
	CHECK(pin_b(d, "v1", B_SIZE) == 0, "pinned again");
	CHECK(pin_b(d, "v1", B_SIZE) == 0, "pinned twice");
	put_b2(d, buf);
	CHECK(pin_b(d, "v2", B2_SIZE) == 0, "the new version pinned");
	CHECK(backing_files(d) == 2, "both versions pinned: two backing files");
	cache_disk_unpin_file(d, "m/b.bin", "v1", B_SIZE);
	k = key(100);
	CHECK(cache_disk_held(d, &k) == BS, "still pinned once: kept");
	cache_disk_unpin_file(d, "m/b.bin", "v1", B_SIZE);
	for (i = 0; i < 3; i++) {
		k = key(100 + i);
		CHECK(cache_disk_held(d, &k) == 0, "superseded block %u dropped at the last unpin",
		      i);
	}
	CHECK(backing_files(d) == 1, "the dropped version counts no more, before its punch");
	/* an unpin that comes before the new version's pin: that pin drops it */
	cache_disk_unpin_file(d, "m/b.bin", "v2", B2_SIZE);
	put_b(d, buf);
	CHECK(pin_b(d, "v1", B_SIZE) == 0, "v1 back, pinned");
	CHECK(backing_files(d) == 1, "the unpinned v2 went at v1's pin");
	cache_disk_unpin_file(d, "m/b.bin", "v1", B_SIZE);
	CHECK(cache_disk_evict_path(d, "m/b.bin") == B_SIZE, "v1 left, unpinned: evicted");
	for (i = 0; i < 10000 && allocated(dir, 100) != -1; i++)
		usleep(1000); /* the writer punches and removes it behind */
	CHECK(allocated(dir, 100) == -1, "the superseded version's file is gone");
}

/* Bytes no entry claims (a kill between a write and its entry) are punched at
 * start-up; an old layout's slot file is discarded. */
static void sweep_checks(const char *dir, char *buf, char *rd, char *want)
{
	struct cache_meta *m = NULL;
	struct cache_disk *d = NULL;
	char p[4200];
	long long before;
	int fd;

	CHECK(open_tier(dir, &m, &d) == 0, "reopen for the sweep");
	if (!d)
		return;
	put(d, buf, 0, BS);
	cache_disk_close(d);
	cache_meta_close(m);
	/* as if a kill came after block 1's write, before its entry */
	file_of(dir, 0, p, sizeof(p));
	fd = open(p, O_WRONLY);
	fill(buf, 1, BS);
	CHECK(fd >= 0 && pwrite(fd, buf, BS, BS) == (ssize_t)BS, "stray block 1");
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	before = allocated(dir, 0);
	CHECK(open_tier(dir, &m, &d) == 0, "reopen after the stray write");
	if (!d)
		return;
	CHECK(allocated(dir, 0) <= before - BS, "the stray block is punched (%lld -> %lld)", before,
	      allocated(dir, 0));
	CHECK(get(d, rd, want, 0, BS) == 0, "block 0 is kept");
	CHECK(get(d, rd, want, 1, BS) == -ENOENT, "block 1 has no entry");
	cache_disk_close(d);
	cache_meta_close(m);
	/* an old layout: its slot file is discarded, and so are its blocks */
	snprintf(p, sizeof(p), "%s/blocks/slots", dir);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0 && pwrite(fd, buf, BS, 0) == (ssize_t)BS, "an old slot file");
	if (fd >= 0)
		close(fd);
	CHECK(open_tier(dir, &m, &d) == 0, "reopen over an old layout");
	if (!d)
		return;
	CHECK(access(p, F_OK) != 0, "the slot file is gone");
	CHECK(get(d, rd, want, 0, BS) == -ENOENT, "and the tier starts empty");
	cache_disk_close(d);
	cache_meta_close(m);
}

int main(void)
{
	char dir[] = "/tmp/disk_test.XXXXXX", cmd[64];
	struct cache_disk_stats st;
	struct cache_meta *m = NULL;
	struct cache_disk *d = NULL;
	char *buf, *rd, *want;

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
		CHECK(cache_disk_write(d, &k, buf, 1000, NULL, true) == -EEXIST,
		      "no duplicate writes");
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

	/* one file per version, block i at offset i * BS; 1 was punched out */
	CHECK(allocated(dir, 0) >= 3 * BS && allocated(dir, 0) <= 4 * BS,
	      "a.bin holds blocks 0, 2, 3, 4 (%lld bytes)", allocated(dir, 0));

	/* a rotten block is dropped and never served */
	corrupt(dir, 4);
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
	CHECK(allocated(dir, 0) == -1, "a.bin's emptied file is unlinked");
	CHECK(open_tier(dir, &m, &d) == 0, "reopen");
	if (d) {
		CHECK(get(d, rd, want, 101, BS) == 0, "b.bin block survives a reopen");
		CHECK(get(d, rd, want, 0, BS) == -ENOENT, "evicted stays evicted");
		pin_checks(dir, d, buf, rd, want);
		cache_disk_close(d);
		cache_meta_close(m);
	}
	sweep_checks(dir, buf, rd, want);
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
