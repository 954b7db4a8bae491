/*
 * shared_test.c - unit test of how the shared block tier names and seals a
 * block (shared_key.c, shared_seal.c) and judges a lease's age
 * (shared_lease.c): one block, one name, on every node and every run;
 * another store, file, version, size, block size or index, another name; a
 * name that is a safe S3 key of bounded length whatever the path holds; a
 * trailer that accepts its own block and refuses a flipped byte, a truncated
 * block, another block's trailer, another key's seal and bytes that are not
 * a trailer; HMAC-SHA256 as computed apart; a key file refused unless its
 * owner's alone and long enough; and a lease's age taken from the service's
 * clock whatever the nodes' clocks say. Exits 0 (pass) or 1 (fail).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "mcfs_test.h"
#include "shared_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE "http-127.0.0.1_8080_models-0123456789abcdef"
#define BS (8u << 20)
#define NAME_START "mcfs2/" STORE "/model-00001-of-00002.safetensors-"

static const char *key_of(const char *store, uint64_t bs, const char *path, const char *version,
			  uint64_t size, uint64_t index, char *out)
{
	struct cache_shared_block blk = {
	    .path = path, .version = version, .size = size, .index = index, .len = 1};

	if (cache_shared_key(store, bs, &blk, out, CACHE_SHARED_KEY_MAX) < 0)
		out[0] = '\0';
	return out;
}

/* Only [A-Za-z0-9._-/]: nothing to percent-encode, no "..", no "//". */
static bool s3_safe(const char *k)
{
	return k[0] &&
	       strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "0123456789._-/") == strlen(k) &&
	       !strstr(k, "//") && !strstr(k, "/../") && !strstr(k, "/./") && k[0] != '/';
}

static void test_names(void)
{
	char a[CACHE_SHARED_KEY_MAX], b[CACHE_SHARED_KEY_MAX];

	key_of(STORE, BS, "org/model-00001-of-00002.safetensors", "\"5f3a-40000000\"", 1 << 30, 12,
	       a);
	CHECK(strncmp(a, NAME_START, strlen(NAME_START)) == 0 &&
		  strspn(a + strlen(NAME_START), "0123456789abcdef") == 32,
	      "name '%s'", a);
	CHECK(strlen(a) > 32 && strcmp(a + strlen(a) - 6, "/8M-12") == 0, "tail of '%s'", a);
	CHECK(s3_safe(a), "'%s' is not a safe S3 key", a);
	/* the same block on another node or in another run: the same name */
	key_of(STORE, BS, "org/model-00001-of-00002.safetensors", "\"5f3a-40000000\"", 1 << 30, 12,
	       b);
	CHECK(strcmp(a, b) == 0, "'%s' then '%s'", a, b);
	/* everything that makes a block another one makes another name */
	key_of(STORE, BS, "org/model-00001-of-00002.safetensors", "\"5f3a-40000001\"", 1 << 30, 12,
	       b);
	CHECK(strcmp(a, b) != 0, "a new version kept the name '%s'", b);
	key_of(STORE, BS, "org/model-00001-of-00002.safetensors", "\"5f3a-40000000\"",
	       (1 << 30) + 1, 12, b);
	CHECK(strcmp(a, b) != 0, "another size kept the name '%s'", b);
	key_of(STORE, BS, "other/model-00001-of-00002.safetensors", "\"5f3a-40000000\"", 1 << 30,
	       12, b);
	CHECK(strcmp(a, b) != 0, "another directory kept the name '%s'", b);
	key_of("posix-srv_models-fedcba9876543210", BS, "org/model-00001-of-00002.safetensors",
	       "\"5f3a-40000000\"", 1 << 30, 12, b);
	CHECK(strcmp(a, b) != 0, "another store kept the name '%s'", b);
	key_of(STORE, BS / 2, "org/model-00001-of-00002.safetensors", "\"5f3a-40000000\"", 1 << 30,
	       12, b);
	CHECK(strcmp(a, b) != 0 && strstr(b, "/4M-12"), "another block size: '%s'", b);
	key_of(STORE, BS, "org/model-00001-of-00002.safetensors", "\"5f3a-40000000\"", 1 << 30, 13,
	       b);
	CHECK(strcmp(a, b) != 0 && strstr(b, "/8M-13"), "another index: '%s'", b);
	/* NUL-separated fields: ("ab", "c") and ("a", "bc") are not one file */
	key_of(STORE, BS, "ab", "c", 10, 0, a);
	key_of(STORE, BS, "a", "bc", 10, 0, b);
	CHECK(strcmp(a, b) != 0, "'%s' twice", a);
}

static void test_odd_paths(void)
{
	char k[CACHE_SHARED_KEY_MAX], *path;
	size_t n = 4000;

	/* spaces, '+', '%', non-ASCII, "..": hashed, and slugged to '_' */
	key_of(STORE, BS, "dir one/a+b=c%20 ü.bin", "v", 5, 0, k);
	CHECK(s3_safe(k) && strstr(k, "/a_b_c_20___.bin-"), "'%s'", k);
	key_of(STORE, BS, "x/..", "v", 5, 0, k);
	CHECK(s3_safe(k), "'%s'", k);
	key_of(STORE, BS, "", "", 0, 0, k);
	CHECK(s3_safe(k), "'%s' for an empty path", k);
	/* a long path and a long version: a name of bounded length all the same */
	path = malloc(n + 1);
	memset(path, 'p', n);
	path[n] = '\0';
	key_of(STORE, 64u << 20, path, path, UINT64_MAX, UINT64_MAX, k);
	CHECK(s3_safe(k) && strlen(k) < 200, "%zu bytes: '%s'", strlen(k), k);
	free(path);
	/* too little room: an error, not a cut name */
	{
		struct cache_shared_block blk = {.path = "a", .version = "v", .size = 1};

		CHECK(cache_shared_key(STORE, BS, &blk, k, 20) == -ENAMETOOLONG, "no error");
	}
}

#define KEY32 "0123456789abcdef0123456789abcdef"

static void test_trailer(void)
{
	const char *key = "mcfs2/" STORE "/m.bin-00/8M-3", *why = NULL;
	unsigned char tr[CACHE_SHARED_TRAILER], bad[CACHE_SHARED_TRAILER];
	struct cache_shared_seal *s = NULL, *other = NULL;
	uint32_t len = 1000003;
	char *data = malloc(len);
	uint32_t i;

	CHECK(cache_shared_seal_new(KEY32, 31, &s) == -EINVAL, "a 31-byte key accepted");
	if (cache_shared_seal_new(KEY32, 32, &s) < 0 ||
	    cache_shared_seal_new(KEY32 "!", 33, &other) < 0) {
		CHECK(false, "no seal");
		return;
	}
	for (i = 0; i < len; i++)
		data[i] = (char)(i * 2654435761u >> 24);
	CHECK(cache_shared_trailer(s, key, data, len, tr) == 0, "no trailer");
	CHECK(memcmp(tr, "MCFSBLK2", 8) == 0, "magic");
	CHECK(cache_shared_verify(s, key, data, len, tr, &why) == 0, "its own block refused: %s",
	      why ? why : "-");
	/* one flipped bit anywhere in the block */
	data[len / 2] ^= 1;
	why = NULL;
	CHECK(cache_shared_verify(s, key, data, len, tr, &why) == -EKEYREJECTED && why &&
		  strstr(why, "shared_key_file"),
	      "flipped bit: %s", why ? why : "accepted");
	data[len / 2] ^= 1;
	data[len - 1] ^= (char)0x80;
	CHECK(cache_shared_verify(s, key, data, len, tr, &why) == -EKEYREJECTED,
	      "last byte flipped");
	data[len - 1] ^= (char)0x80;
	/* the same block sealed with another key (another cluster, or an attacker's) */
	CHECK(cache_shared_trailer(other, key, data, len, bad) == 0, "no trailer");
	CHECK(memcmp(bad, tr, sizeof(tr)) != 0, "two keys, one seal");
	CHECK(cache_shared_verify(s, key, data, len, bad, &why) == -EKEYREJECTED,
	      "another key's seal accepted");
	CHECK(cache_shared_verify(other, key, data, len, tr, &why) == -EKEYREJECTED,
	      "a seal accepted under another key");
	/* the block cut short: the trailer says another length */
	why = NULL;
	CHECK(cache_shared_verify(s, key, data, len - 1, tr, &why) == -EBADMSG && why &&
		  strstr(why, "length"),
	      "short block: %s", why ? why : "accepted");
	/* right bytes, right length, but sealed as another block (copied object) */
	CHECK(cache_shared_verify(s, "mcfs2/" STORE "/m.bin-00/8M-4", data, len, tr, &why) ==
		  -EKEYREJECTED,
	      "sealed as another block, accepted");
	/* the trailer's own bytes damaged, or not a trailer at all */
	memcpy(bad, tr, sizeof(bad));
	bad[40] ^= 4;
	CHECK(cache_shared_verify(s, key, data, len, bad, &why) == -EKEYREJECTED, "damaged MAC");
	memcpy(bad, tr, sizeof(bad));
	bad[0] = 'X';
	why = NULL;
	CHECK(cache_shared_verify(s, key, data, len, bad, &why) == -EBADMSG && why &&
		  strstr(why, "trailer"),
	      "no magic: %s", why ? why : "accepted");
	/* the last bytes of a plain block (an object someone else wrote) */
	CHECK(cache_shared_verify(s, key, data, len - CACHE_SHARED_TRAILER,
				  (unsigned char *)data + len - CACHE_SHARED_TRAILER,
				  &why) == -EBADMSG,
	      "plain bytes taken for a trailer");
	/* an empty block seals and checks too */
	CHECK(cache_shared_trailer(s, key, data, 0, tr) == 0 &&
		  cache_shared_verify(s, key, data, 0, tr, &why) == 0,
	      "empty block");
	cache_shared_seal_free(s);
	cache_shared_seal_free(other);
	free(data);
}

/*
 * The seal is HMAC-SHA256 as RFC 4231 defines it, over the name and its NUL,
 * the length (8 bytes, little-endian) and the bytes: a known answer,
 * computed apart (Python: hmac.new(key, b"mcfs2/k\0" + (3).to_bytes(8,
 * "little") + b"abc", "sha256")), so that another implementation can check
 * our blocks and tests can seal one.
 */
static void test_known_seal(void)
{
	static const unsigned char want[32] = {0xbe, 0x4a, 0xae, 0x34, 0x82, 0xa3, 0xc1, 0x9e,
					       0x05, 0x0b, 0xc9, 0x19, 0xd7, 0x4b, 0x77, 0x0d,
					       0xc5, 0xd1, 0x15, 0xac, 0x83, 0x0a, 0x6f, 0x0d,
					       0x4a, 0xef, 0x13, 0xc4, 0xbe, 0xe7, 0x47, 0x5a};
	unsigned char tr[CACHE_SHARED_TRAILER];
	struct cache_shared_seal *s = NULL;

	if (cache_shared_seal_new(KEY32, 32, &s) < 0) {
		CHECK(false, "no seal");
		return;
	}
	CHECK(cache_shared_trailer(s, "mcfs2/k", "abc", 3, tr) == 0, "no trailer");
	CHECK(memcmp(tr, "MCFSBLK2\3\0\0\0\0\0\0\0", 16) == 0, "magic and length");
	CHECK(memcmp(tr + 16, want, 32) == 0, "not HMAC-SHA256 of name, length and bytes");
	cache_shared_seal_free(s);
}

/* The key file: refused unless its owner's alone and long enough; trailing newlines are no key. */
static void test_key_file(void)
{
	char path[] = "/tmp/shared_test_key_XXXXXX";
	struct cache_shared_seal *s = NULL, *t = NULL;
	unsigned char a[CACHE_SHARED_TRAILER], b[CACHE_SHARED_TRAILER];
	int fd = mkstemp(path);

	if (fd < 0) {
		CHECK(false, "mkstemp: %s", strerror(errno));
		return;
	}
	CHECK(write(fd, KEY32 "\n", 33) == 33, "write");
	CHECK(fchmod(fd, 0644) == 0, "chmod");
	CHECK(cache_shared_seal_load(path, &s) == -EPERM, "a key others may read accepted");
	CHECK(fchmod(fd, 0600) == 0, "chmod");
	CHECK(cache_shared_seal_load(path, &s) == 0, "a good key file refused");
	/* the newline is not part of the key: a file written by echo seals as one without */
	CHECK(cache_shared_seal_new(KEY32, 32, &t) == 0, "no seal");
	if (s && t) {
		CHECK(cache_shared_trailer(s, "k", "x", 1, a) == 0 &&
			  cache_shared_trailer(t, "k", "x", 1, b) == 0 &&
			  memcmp(a, b, sizeof(a)) == 0,
		      "the newline changed the key");
	}
	cache_shared_seal_free(s);
	cache_shared_seal_free(t);
	s = NULL;
	CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, "short key\n\n", 11, 0) == 11, "rewrite");
	CHECK(cache_shared_seal_load(path, &s) == -EINVAL && !s, "a short key accepted");
	close(fd);
	unlink(path);
	CHECK(cache_shared_seal_load(path, &s) == -ENOENT, "a missing key file");
	CHECK(cache_shared_seal_load("/tmp", &s) == -EINVAL, "a directory as key file");
}

/*
 * A lease's age is the service's Date less its Last-Modified, whatever the
 * nodes' clocks say: nodes whose clocks are an hour apart judge one lease
 * alike (no node's clock enters). Without the service's clock, the age is
 * unknown and the lease held: a waiter's no-progress clock ends it
 * (shared_lease_test.c).
 */
static void test_lease_age(void)
{
	const int64_t s = 1000000000;	   /* ns */
	const int64_t lm = 1767225600 * s; /* the lease's Last-Modified: 2026-01-01 */
	const uint64_t wait = 10 * (uint64_t)s;
	struct shared_lease l = {.node = "other"};

	CHECK(shared_lease_age(lm + 3 * s, lm) == 3 * (uint64_t)s);
	CHECK(shared_lease_holder(0, &l, shared_lease_age(lm + 3 * s, lm), "me", wait) == 0,
	      "3 s old: taken for expired");
	/* to the second: shared_wait and a second's rounding held, beyond that not */
	CHECK(shared_lease_holder(0, &l, shared_lease_age(lm + 11 * s, lm), "me", wait) == 0,
	      "11 s of 10");
	CHECK(shared_lease_holder(0, &l, shared_lease_age(lm + 12 * s, lm), "me", wait) == -ENOENT,
	      "12 s of 10");
	CHECK(shared_lease_holder(0, &l, shared_lease_age(lm - 1 * s, lm), "me", wait) == 0,
	      "a second early (rounding)");
	/* no Date or no Last-Modified: held; ours is ours */
	CHECK(shared_lease_age(0, lm) == UINT64_MAX && shared_lease_age(lm, 0) == UINT64_MAX);
	CHECK(shared_lease_holder(0, &l, UINT64_MAX, "me", wait) == 0);
	CHECK(shared_lease_holder(0, &l, UINT64_MAX, "other", wait) == 1);
}

int main(void)
{
	test_names();
	test_odd_paths();
	test_trailer();
	test_known_seal();
	test_key_file();
	test_lease_age();
	if (failures) {
		fprintf(stderr, "shared_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
