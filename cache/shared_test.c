/*
 * shared_test.c - unit test of how the shared block tier names and seals a
 * block (shared_key.c): one block, one name, on every node and every run;
 * another store, file, version, size, block size or index, another name; a
 * name that is a safe S3 key of bounded length whatever the path holds; and
 * a trailer that accepts its own block and refuses a flipped byte, a
 * truncated block, another block's trailer and bytes that are not a trailer.
 * Exits 0 (pass) or 1 (fail).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE "http-127.0.0.1_8080_models-0123456789abcdef"
#define BS (8u << 20)
#define NAME_START "mcfs1/" STORE "/model-00001-of-00002.safetensors-"

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

static void test_trailer(void)
{
	const char *key = "mcfs1/" STORE "/m.bin-00/8M-3", *why = NULL;
	unsigned char tr[CACHE_SHARED_TRAILER], bad[CACHE_SHARED_TRAILER];
	uint32_t len = 1000003;
	char *data = malloc(len);
	uint32_t i;

	for (i = 0; i < len; i++)
		data[i] = (char)(i * 2654435761u >> 24);
	cache_shared_trailer(key, data, len, tr);
	CHECK(memcmp(tr, "MCFSBLK1", 8) == 0, "magic");
	CHECK(cache_shared_verify(key, data, len, tr, &why) == 0, "its own block refused: %s",
	      why ? why : "-");
	/* one flipped bit anywhere in the block */
	data[len / 2] ^= 1;
	why = NULL;
	CHECK(cache_shared_verify(key, data, len, tr, &why) == -EBADMSG && why &&
		  strstr(why, "checksum"),
	      "flipped bit: %s", why ? why : "accepted");
	data[len / 2] ^= 1;
	data[len - 1] ^= (char)0x80;
	CHECK(cache_shared_verify(key, data, len, tr, &why) == -EBADMSG, "last byte flipped");
	data[len - 1] ^= (char)0x80;
	/* the block cut short: the trailer says another length */
	why = NULL;
	CHECK(cache_shared_verify(key, data, len - 1, tr, &why) == -EBADMSG && why &&
		  strstr(why, "length"),
	      "short block: %s", why ? why : "accepted");
	/* right bytes, right length, but sealed as another block (copied object) */
	why = NULL;
	CHECK(cache_shared_verify("mcfs1/" STORE "/m.bin-00/8M-4", data, len, tr, &why) ==
		      -EBADMSG &&
		  why && strstr(why, "another block"),
	      "other name: %s", why ? why : "accepted");
	/* the trailer's own bytes damaged, or not a trailer at all */
	memcpy(bad, tr, sizeof(bad));
	bad[29] ^= 4;
	CHECK(cache_shared_verify(key, data, len, bad, &why) == -EBADMSG, "damaged checksum");
	memcpy(bad, tr, sizeof(bad));
	bad[0] = 'X';
	why = NULL;
	CHECK(cache_shared_verify(key, data, len, bad, &why) == -EBADMSG && why &&
		  strstr(why, "trailer"),
	      "no magic: %s", why ? why : "accepted");
	/* the last 32 bytes of a plain block (an object someone else wrote) */
	CHECK(cache_shared_verify(key, data, len - 32, (unsigned char *)data + len - 32, &why) ==
		  -EBADMSG,
	      "plain bytes taken for a trailer");
	/* an empty block seals and checks too */
	cache_shared_trailer(key, data, 0, tr);
	CHECK(cache_shared_verify(key, data, 0, tr, &why) == 0, "empty block");
	free(data);
}

int main(void)
{
	test_names();
	test_odd_paths();
	test_trailer();
	if (failures) {
		fprintf(stderr, "shared_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
