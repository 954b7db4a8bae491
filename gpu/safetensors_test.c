/*
 * safetensors_test.c - the header parser against good headers and a table of
 * malformed ones (each must be refused with -EBADMSG and a message naming the
 * fault), plus a mutation fuzz: random byte flips, truncations and
 * insertions of a valid header must never crash, and anything accepted must
 * still satisfy the invariants (tiling, sizes). Exits 0 on pass, 1 on fail.
 */
#define _GNU_SOURCE
#include "safetensors.h"
#include "mcfs_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
	const char *json;
	uint64_t data_len;
	const char *expect; /* substring of the message */
} bad[] = {
    {"", 0, "not valid JSON"},
    {"{", 0, "not valid JSON"},
    {"{\"a\":", 0, "not valid JSON"},
    {"[1,2]", 0, "not a JSON object"},
    {"null", 0, "not a JSON object"},
    {"{} x", 0, "data after its JSON"},
    {"{\"a\":1}", 0, "not an object"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
    {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
    {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "shape"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
     "\"data_offsets\":[0,4]}}",
     4, "dimensions"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
     "\"data_offsets\":[0,4]}}",
     4, "overflows"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "non-negative"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4,
     "non-negative integers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2, "past the data"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "needs 8 bytes"},
    {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "whole bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
     8, "overlap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, "gap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     8, "overlap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4 bytes"},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
     0, "twice"},
    {"{\"__metadata__\":[1]}", 0, "__metadata__"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice"},
};

static void test_bad(void)
{
	struct mcfs_st_header *h = NULL;
	char err[256];
	size_t i;
	int rc;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rc = mcfs_st_parse(bad[i].json, strlen(bad[i].json), bad[i].data_len, &h, err,
				   sizeof(err));
		CHECK(rc == -EBADMSG, "case %zu (%s): rc %d, want -EBADMSG", i, bad[i].json, rc);
		CHECK(strstr(err, bad[i].expect), "case %zu (%s): message '%s' lacks '%s'", i,
		      bad[i].json, err, bad[i].expect);
		if (rc == 0)
			mcfs_st_free(h);
	}
	rc = mcfs_st_parse("{}", MCFS_ST_MAX_HEADER + 1, 0, &h, err, sizeof(err));
	CHECK(rc == -EBADMSG && strstr(err, "limit"), "huge header: rc %d '%s'", rc, err);
}

static void test_good(void)
{
	const char *j = "{\"__metadata__\":{\"format\":\"pt\"},"
			"\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[5,17]},"
			"\"z\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[5,5]},"
			"\"b\":{\"dtype\":\"BOOL\",\"shape\":[5],\"data_offsets\":[0,5]},"
			"\"f\":{\"dtype\":\"F4\",\"shape\":[2,2],\"data_offsets\":[17,19]},"
			"\"s\":{\"dtype\":\"F8_E4M3\",\"shape\":[],\"data_offsets\":[19,20]}}   ";
	struct mcfs_st_header *h = NULL;
	char err[256];
	int rc;

	rc = mcfs_st_parse(j, strlen(j), 20, &h, err, sizeof(err));
	CHECK(rc == 0, "good header refused: %s", err);
	if (rc)
		return;
	CHECK(h->ntensors == 5, "ntensors %zu", h->ntensors);
	CHECK(strcmp(h->tensors[0].name, "b") == 0, "first by offset: %s", h->tensors[0].name);
	CHECK(strcmp(h->tensors[1].name, "z") == 0 && h->tensors[1].ndim == 2, "zero-size");
	CHECK(h->tensors[2].dtype == MCFS_ST_BF16 && h->tensors[2].shape[1] == 3, "bf16 shape");
	CHECK(h->tensors[4].ndim == 0 && h->tensors[4].end == 20, "scalar");
	CHECK(h->metadata_json && strstr(h->metadata_json, "\"format\":\"pt\""), "metadata");
	CHECK(h->data_offset == 8 + strlen(j), "data_offset");
	mcfs_st_free(h);

	rc = mcfs_st_parse("{}", 2, 0, &h, err, sizeof(err));
	CHECK(rc == 0 && h->ntensors == 0, "empty header");
	if (rc == 0)
		mcfs_st_free(h);
}

static void test_prefix(void)
{
	unsigned char p[8] = {16, 0, 0, 0, 0, 0, 0, 0};
	uint64_t off = 0;

	CHECK(mcfs_st_data_offset(p, 24, &off) == 0 && off == 24, "prefix ok");
	CHECK(mcfs_st_data_offset(p, 23, &off) == -EBADMSG, "prefix past file");
	CHECK(mcfs_st_data_offset(p, 4, &off) == -EBADMSG, "file too short");
	memset(p, 0xff, sizeof(p));
	CHECK(mcfs_st_data_offset(p, ~0ull, &off) == -EBADMSG, "huge length");
}

/* Mutations of a valid header: must not crash; accepted results must be sane. */
static void test_fuzz(void)
{
	const char *j = "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
			"\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
	const char alphabet[] = "{}[]\",:0123456789-.eE \\ab";
	size_t len = strlen(j), n, i, k;
	struct mcfs_st_header *h;
	char buf[512], err[256];
	uint64_t at;
	int iter, rc, accepted = 0;

	srand(12345);
	for (iter = 0; iter < 20000; iter++) {
		memcpy(buf, j, len);
		n = len;
		for (k = 0; k < 1 + (size_t)(rand() % 3); k++) {
			i = (size_t)rand() % n;
			switch (rand() % 3) {
			case 0:
				buf[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
				break;
			case 1:
				n = i + 1;
				break;
			default:
				if (n + 1 < sizeof(buf)) {
					memmove(buf + i + 1, buf + i, n - i);
					buf[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
					n++;
				}
			}
		}
		h = NULL;
		rc = mcfs_st_parse(buf, n, 16, &h, err, sizeof(err));
		CHECK(rc == 0 || rc == -EBADMSG, "fuzz rc %d", rc);
		if (rc == -EBADMSG)
			CHECK(err[0], "fuzz: refusal without a message");
		if (rc)
			continue;
		accepted++;
		for (i = 0, at = 0; i < h->ntensors; i++) {
			CHECK(h->tensors[i].begin == at, "fuzz: accepted a gap or overlap");
			at = h->tensors[i].end;
		}
		CHECK(at == 16, "fuzz: accepted a partial cover");
		mcfs_st_free(h);
	}
	printf("fuzz: %d mutations, %d accepted\n", iter, accepted);
}

/* mcfs_st_read_fd on a real file. */
static void test_fd(const char *dir)
{
	const char *j = "{\"x\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
	unsigned char prefix[8] = {0};
	struct mcfs_st_header *h;
	char path[4096], err[256];
	uint64_t n = strlen(j);
	int fd, rc, i;

	snprintf(path, sizeof(path), "%s/st_test.safetensors", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0, "open %s", path);
	if (fd < 0)
		return;
	for (i = 0; i < 8; i++)
		prefix[i] = (unsigned char)(n >> (8 * i));
	CHECK(write(fd, prefix, 8) == 8 && write(fd, j, n) == (ssize_t)n &&
		  write(fd, "abcd", 4) == 4,
	      "write");
	rc = mcfs_st_read_fd(fd, &h, err, sizeof(err));
	CHECK(rc == 0, "read_fd: %d %s", rc, err);
	if (rc == 0) {
		CHECK(h->data_offset == 8 + n && h->data_len == 4, "read_fd offsets");
		mcfs_st_free(h);
	}
	CHECK(ftruncate(fd, 8 + (off_t)n + 2) == 0, "truncate");
	rc = mcfs_st_read_fd(fd, &h, err, sizeof(err));
	CHECK(rc == -EBADMSG && strstr(err, "past the data"), "truncated file: %d %s", rc, err);
	close(fd);
	unlink(path);
}

int main(int argc, char **argv)
{
	test_bad();
	test_good();
	test_prefix();
	test_fuzz();
	test_fd(argc > 1 ? argv[1] : "/tmp");
	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	printf("safetensors_test: pass\n");
	return 0;
}
