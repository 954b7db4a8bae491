/*
 * select_test.c - libmcfs's tensor selection without a mount or a GPU: names
 * and globs, the error that names every pattern selecting nothing, runs of
 * adjacent tensors coalesced into one range, the alignment a run keeps, and
 * the whole-file layout when everything is selected, and slices (explicit,
 * a tensor-parallel plan, and their errors). Exits 0 on pass, 1 on
 * fail. tests/test_gpu_select.py checks that the Python package lays out the
 * same selections the same way.
 */
#define _GNU_SOURCE
#include "mcfs_client.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Data section (bytes): a 0-10, b 10-18, c.0 18-50, c.1 50-82, e 82-82 (empty),
 * c.2 82-100, d 100-104. */
static const char JSON[] = "{\"__metadata__\":{\"format\":\"pt\"},"
			   "\"a\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
			   "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[10,18]},"
			   "\"c.0\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[18,50]},"
			   "\"c.1\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[50,82]},"
			   "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[82,82]},"
			   "\"c.2\":{\"dtype\":\"I16\",\"shape\":[9],\"data_offsets\":[82,100]},"
			   "\"d[0]\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[100,104]}}";

static struct mcfs_st_header *parse(void)
{
	struct mcfs_st_header *h = NULL;
	char err[256];
	int rc = mcfs_st_parse(JSON, sizeof(JSON) - 1, 104, &h, err, sizeof(err));

	CHECK(rc == 0, "parse: %s", err);
	return h;
}

static const char *name_of(const struct mcfs_selection *s, size_t i)
{
	return i < s->n ? s->tensors[i]->name : "(none)";
}

static void test_all(const struct mcfs_st_header *h)
{
	struct mcfs_selection *s;
	int rc = mcfs_select(h, NULL, 0, &s, NULL, 0);

	CHECK(rc == 0, "%d", rc);
	if (rc)
		return;
	CHECK(s->n == 7 && s->nranges == 1, "n %zu ranges %zu", s->n, s->nranges);
	CHECK(s->ranges[0].file_off == h->data_offset && s->ranges[0].len == 104 &&
	      s->ranges[0].dst_off == 0);
	CHECK(s->bytes == 104 && s->copy_bytes == 104);
	for (size_t i = 0; i < s->n; i++)
		CHECK(s->dst[i] == s->tensors[i]->begin, "%s at %llu", name_of(s, i),
		      (unsigned long long)s->dst[i]);
	mcfs_selection_free(s);
}

static void test_runs_and_alignment(const struct mcfs_st_header *h)
{
	const char *pats[] = {"b", "c.*"};
	struct mcfs_selection *s;
	int rc = mcfs_select(h, pats, 2, &s, NULL, 0);

	CHECK(rc == 0, "%d", rc);
	if (rc)
		return;
	/* b, c.0, c.1, c.2 are adjacent (e, empty, between them is not selected and
	 * cuts nothing): one run from 10 to 100, at 10 (10 mod 256) */
	CHECK(s->n == 4 && s->nranges == 1, "n %zu ranges %zu", s->n, s->nranges);
	CHECK(strcmp(name_of(s, 0), "b") == 0 && strcmp(name_of(s, 3), "c.2") == 0);
	CHECK(s->ranges[0].file_off == h->data_offset + 10 && s->ranges[0].len == 90 &&
	      s->ranges[0].dst_off == 10);
	CHECK(s->dst[1] == 18 && s->bytes == 100 && s->copy_bytes == 90);
	mcfs_selection_free(s);

	/* a and c.1: two runs; c.1 (data offset 50) goes to the first offset >= 10
	 * that is 50 mod 256, so F32 keeps its 4-byte (and 256-byte) residue */
	const char *two[] = {"c.1", "a"};
	rc = mcfs_select(h, two, 2, &s, NULL, 0);
	CHECK(rc == 0, "%d", rc);
	if (rc)
		return;
	CHECK(s->n == 2 && s->nranges == 2, "n %zu ranges %zu", s->n, s->nranges);
	CHECK(s->ranges[0].dst_off == 0 && s->ranges[0].len == 10);
	CHECK(s->ranges[1].file_off == h->data_offset + 50 && s->ranges[1].dst_off == 50 &&
	      s->ranges[1].len == 32);
	CHECK(s->dst[0] == 0 && s->dst[1] == 50 && s->bytes == 82 && s->copy_bytes == 42);
	mcfs_selection_free(s);

	/* d[0] alone: at 100 mod 256 = 100 */
	const char *d[] = {"d[0]"};
	rc = mcfs_select(h, d, 1, &s, NULL, 0);
	CHECK(rc == 0 && s->n == 1 && s->dst[0] == 100 && s->bytes == 104, "%d", rc);
	mcfs_selection_free(s);
}

static void test_names_and_errors(const struct mcfs_st_header *h)
{
	const char *pats[] = {"nope", "c.?", "x*", "a"};
	const char *glob_only[] = {"d[0-9]"}; /* a glob that selects nothing: 'd[0]' is a name */
	const char *bad[] = {"a", NULL};
	struct mcfs_selection *s = (void *)1;
	char err[256];
	int rc;

	rc = mcfs_select(h, pats, 4, &s, err, sizeof(err));
	CHECK(rc == -ENOENT && s == NULL, "%d", rc);
	CHECK(strstr(err, "'nope'") && strstr(err, "'x*'") && !strstr(err, "'a'") &&
		  !strstr(err, "c.?"),
	      "message: %s", err);
	rc = mcfs_select(h, glob_only, 1, &s, err, sizeof(err));
	CHECK(rc == -ENOENT && strstr(err, "'d[0-9]'"), "%d %s", rc, err);
	rc = mcfs_select(h, bad, 2, &s, err, sizeof(err));
	CHECK(rc == -EINVAL, "%d", rc);
	/* an empty list selects nothing, which is no error */
	rc = mcfs_select(h, pats, 0, &s, err, sizeof(err));
	CHECK(rc == 0 && s->n == 0 && s->nranges == 0 && s->bytes == 0, "%d", rc);
	mcfs_selection_free(s);
	/* a message too long for the buffer is cut, never overrun */
	rc = mcfs_select(h, pats, 3, &s, err, 20);
	CHECK(rc == -ENOENT && strlen(err) < 20, "%d", rc);
}

/* Slices (struct mcfs_slice): w is F32 [4, 6] at 0-96, n F16 [6] at 96-108. */
static void test_slices(void)
{
	static const char J[] =
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,6],\"data_offsets\":[0,96]},"
	    "\"n\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[96,108]}}";
	struct mcfs_slice cols = {.pattern = "w", .dim = 1, .start = 2, .stop = 5};
	struct mcfs_slice plan = {.pattern = "*", .dim = 0, .world = 3, .rank = 2};
	struct mcfs_slice bad[] = {{.pattern = "w", .dim = 2, .stop = 1},
				   {.pattern = "zz", .dim = 0, .stop = 1},
				   {.pattern = "*", .dim = 0, .world = 3, .rank = 3}};
	struct mcfs_st_header *h = NULL;
	struct mcfs_selection *s;
	uint64_t a, b;
	char err[256];
	int rc;

	CHECK(mcfs_st_parse(J, sizeof(J) - 1, 108, &h, err, sizeof(err)) == 0, "%s", err);
	if (!h)
		return;
	/* columns 2-4 of w: 4 rows of 12 bytes, 24 apart; n whole after it */
	rc = mcfs_select_slices(h, NULL, 0, &cols, 1, &s, err, sizeof(err));
	CHECK(rc == 0, "%d %s", rc, err);
	if (rc == 0) {
		CHECK(s->n == 2 && s->nranges == 2 && s->bytes == 108 && s->copy_bytes == 60);
		CHECK(s->ranges[0].file_off == h->data_offset + 8 && s->ranges[0].len == 12 &&
		      s->ranges[0].count == 4 && s->ranges[0].src_stride == 24 &&
		      s->ranges[0].dst_off == 0);
		CHECK(s->cuts[0].dim == 1 && s->cuts[0].start == 2 && s->cuts[0].stop == 5 &&
		      s->cuts[0].bytes == 48);
		CHECK(s->ranges[1].file_off == h->data_offset + 96 && s->ranges[1].len == 12 &&
		      s->ranges[1].count == 0 && s->dst[1] == 96 && s->cuts[1].dim == -1);
		mcfs_selection_free(s);
	}
	/* rank 2 of 3 along dim 0: w's 4 rows give 2, 2, 0 (empty: no range); n's
	 * 6 elements give 2 each, rank 2 the last two at 104 */
	rc = mcfs_select_slices(h, NULL, 0, &plan, 1, &s, err, sizeof(err));
	CHECK(rc == 0, "%d %s", rc, err);
	if (rc == 0) {
		CHECK(s->nranges == 1 && s->ranges[0].file_off == h->data_offset + 104 &&
		      s->ranges[0].len == 4 && s->ranges[0].dst_off == 0 && s->copy_bytes == 4);
		CHECK(s->cuts[0].dim == 0 && s->cuts[0].start == 4 && s->cuts[0].stop == 4 &&
		      s->cuts[0].bytes == 0);
		mcfs_selection_free(s);
	}
	rc = mcfs_select_slices(h, NULL, 0, &bad[0], 1, &s, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "2 dimensions"), "%d %s", rc, err);
	rc = mcfs_select_slices(h, NULL, 0, &bad[1], 1, &s, err, sizeof(err));
	CHECK(rc == -ENOENT && strstr(err, "'zz'"), "%d %s", rc, err);
	rc = mcfs_select_slices(h, NULL, 0, &bad[2], 1, &s, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "rank 3"), "%d %s", rc, err);
	mcfs_shard_bounds(10, 3, 4, &a, &b);
	CHECK(a == 9 && b == 10, "%llu %llu", (unsigned long long)a, (unsigned long long)b);
	mcfs_shard_bounds(2, 3, 4, &a, &b);
	CHECK(a == 2 && b == 2);
	mcfs_st_free(h);
}

int main(void)
{
	struct mcfs_st_header *h = parse();

	if (!h)
		return T_EXIT_FAIL;
	test_all(h);
	test_runs_and_alignment(h);
	test_names_and_errors(h);
	test_slices();
	mcfs_st_free(h);
	if (failures)
		return T_EXIT_FAIL;
	printf("select_test: pass\n");
	return T_EXIT_PASS;
}
