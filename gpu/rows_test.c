/*
 * rows_test.c - the copy engine's arithmetic (gpu/request.c) without a GPU:
 * gpu_range_check() on good and bad ranges, and gpu_walk_next() replayed
 * over a byte array standing for a file cut into blocks. Each walk must give
 * pieces that each lie in one block, copy every byte of the slice exactly
 * once to its packed place, and cut a row that straddles a block boundary
 * into its two parts. A table of fixed cases (rows that straddle, rows that
 * end exactly on a boundary, strides larger than a block, tensor-parallel
 * shapes) is followed by seeded random ranges. Exits 0 on pass, 1 on fail.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Walks @r over a "file" whose byte i is byte(i), in blocks of @bs bytes,
 * as copy.c does, and checks every piece. Returns the number of pieces. */
static uint64_t replay(const struct gpu_range *r, uint64_t bs, const char *what)
{
	uint64_t rows = gpu_range_rows(r), total = rows * r->len, pieces = 0, i, j, fend, dend;
	unsigned char *dst = calloc(1, total + 1), *seen = calloc(1, total + 1);
	struct gpu_walk w = {0, 0};
	struct gpu_rows p;
	int bad = 0;

	CHECK(gpu_range_check(r, UINT64_MAX, &fend, &dend) == 0, "%s", what);
	CHECK(dend == r->dst_off + total, "%s: dst end", what);
	while (!bad) {
		uint64_t pos = gpu_walk_pos(r, &w), span;

		if (gpu_walk_next(r, &w, bs - pos % bs, &p) != 1)
			break;
		pieces++;
		span = (p.height - 1) * p.src_pitch + p.width;
		if (p.file_off != pos || p.width == 0 || p.height == 0 ||
		    p.file_off / bs != (p.file_off + span - 1) / bs || p.file_off + span > fend ||
		    p.dst < r->dst_off || p.dst + p.width * p.height > r->dst_off + total ||
		    (p.height > 1 && (p.width != r->len || p.src_pitch != r->src_stride))) {
			CHECK(
			    0,
			    "%s: piece %llu bad (file_off %llu, %llu x %llu, pitch %llu, dst %llu)",
			    what, (unsigned long long)pieces, (unsigned long long)p.file_off,
			    (unsigned long long)p.height, (unsigned long long)p.width,
			    (unsigned long long)p.src_pitch, (unsigned long long)p.dst);
			bad = 1;
			break;
		}
		for (i = 0; i < p.height; i++)
			for (j = 0; j < p.width; j++) {
				uint64_t d = p.dst - r->dst_off + i * p.width + j;

				dst[d] =
				    (unsigned char)((p.file_off + i * p.src_pitch + j) * 131 >> 3);
				seen[d]++;
			}
	}
	CHECK(w.row == rows || r->len == 0, "%s: walk ended at row %llu of %llu", what,
	      (unsigned long long)w.row, (unsigned long long)rows);
	for (i = 0; i < rows && !bad; i++)
		for (j = 0; j < r->len; j++) {
			uint64_t d = i * r->len + j, src = r->file_off + i * r->src_stride + j;

			if (seen[d] != 1 || dst[d] != (unsigned char)(src * 131 >> 3)) {
				CHECK(0, "%s: byte %llu of row %llu copied %d times or wrong", what,
				      (unsigned long long)j, (unsigned long long)i, seen[d]);
				bad = 1;
				break;
			}
		}
	free(dst);
	free(seen);
	return pieces;
}

static void test_check(void)
{
	struct gpu_range r = {
	    .file_off = 100, .len = 8, .dst_off = 4, .count = 3, .src_stride = 16};
	uint64_t fe = 0, de = 0;

	CHECK(gpu_range_check(&r, 1000, &fe, &de) == 0 && fe == 100 + 2 * 16 + 8 && de == 4 + 24);
	CHECK(gpu_range_check(&r, 140, NULL, NULL) == 0, "last byte is the file's last");
	CHECK(gpu_range_check(&r, 139, NULL, NULL) == -ERANGE);
	r.src_stride = 7;
	CHECK(gpu_range_check(&r, 1000, NULL, NULL) == -EINVAL, "stride below len");
	r.src_stride = UINT64_MAX / 2;
	CHECK(gpu_range_check(&r, UINT64_MAX, NULL, NULL) == -EINVAL, "file end overflows");
	r = (struct gpu_range){
	    .file_off = 0, .len = 1ull << 62, .dst_off = 0, .count = 5, .src_stride = 1ull << 62};
	CHECK(gpu_range_check(&r, UINT64_MAX, NULL, NULL) == -EINVAL, "overflow");
	/* count 0 and 1 are a plain range; the stride is ignored */
	r = (struct gpu_range){
	    .file_off = 10, .len = 20, .dst_off = 0, .count = 0, .src_stride = 3};
	CHECK(gpu_range_check(&r, 30, &fe, &de) == 0 && fe == 30 && de == 20);
	r.count = 1;
	CHECK(gpu_range_check(&r, 29, NULL, NULL) == -ERANGE);
	r.len = 0;
	CHECK(gpu_range_check(&r, 0, NULL, NULL) == 0, "an empty range is valid anywhere");
}

/* Fixed cases, with the pieces each must take where that is the point. */
static void test_fixed(void)
{
	const uint64_t M = 1 << 20;
	struct gpu_range r;
	struct gpu_walk w = {0, 0};
	struct gpu_rows p;

	/* 64-byte blocks; rows of 12 bytes 16 apart from 10: rows 0-2 lie in
	 * block 0, row 3 (58..69) straddles 64, rows 4-5 lie in block 1 */
	r = (struct gpu_range){
	    .file_off = 10, .len = 12, .dst_off = 0, .count = 6, .src_stride = 16};
	CHECK(gpu_walk_next(&r, &w, 54, &p) == 1 && p.height == 3 && p.width == 12 &&
	      p.file_off == 10 && p.src_pitch == 16 && p.dst == 0);
	CHECK(w.row == 3 && w.col == 0 && gpu_walk_pos(&r, &w) == 58);
	CHECK(gpu_walk_next(&r, &w, 6, &p) == 1 && p.height == 1 && p.width == 6 &&
		  p.file_off == 58 && p.dst == 36,
	      "row 3 up to the boundary");
	CHECK(w.row == 3 && w.col == 6 && gpu_walk_pos(&r, &w) == 64);
	CHECK(gpu_walk_next(&r, &w, 64, &p) == 1 && p.height == 1 && p.width == 6 &&
		  p.file_off == 64 && p.dst == 42,
	      "the rest of row 3");
	CHECK(w.row == 4 && w.col == 0 && gpu_walk_pos(&r, &w) == 74);
	CHECK(gpu_walk_next(&r, &w, 54, &p) == 1 && p.height == 2 && p.file_off == 74 &&
		  p.dst == 48,
	      "rows 4-5");
	CHECK(gpu_walk_next(&r, &w, 22, &p) == 0, "done");
	CHECK(replay(&r, 64, "straddle") == 4);
	/* a multi-row piece never reaches past the block: the pitch is too
	 * large for a CUDA 2-D copy -> one row per copy */
	r = (struct gpu_range){
	    .file_off = 0, .len = 4, .count = 3, .src_stride = GPU_MAX_PITCH + 1};
	w = (struct gpu_walk){0, 0};
	CHECK(gpu_walk_next(&r, &w, UINT64_MAX, &p) == 1 && p.height == 1 && w.row == 1);
	/* rows ending exactly on the boundary, and starting on it */
	replay(&(struct gpu_range){.file_off = 0, .len = 16, .count = 8, .src_stride = 32}, 64,
	       "aligned");
	replay(&(struct gpu_range){.file_off = 48, .len = 16, .count = 8, .src_stride = 64}, 64,
	       "one row per block, at its end");
	/* stride larger than a block: one copy per row, some blocks skipped */
	CHECK(replay(&(struct gpu_range){.file_off = 3, .len = 5, .count = 9, .src_stride = 200},
		     64, "stride > block") == 9);
	/* plain ranges as before ABI 3: cut at each boundary */
	CHECK(replay(&(struct gpu_range){.file_off = 10, .len = 300, .dst_off = 7}, 64, "plain") ==
	      5);
	CHECK(replay(&(struct gpu_range){.file_off = 0, .len = 128, .count = 1, .src_stride = 9},
		     64, "count 1") == 2);
	/* Llama-ish tensor-parallel shapes in 1 MiB blocks: the o_proj half of a
	 * 4096 x 4096 bf16 matrix on rank 1 (dim 1), at an odd file offset; the
	 * middle dimension of a 3-D tensor [4, 300, 7] of 8-byte items */
	CHECK(replay(&(struct gpu_range){.file_off = 8 * M + 4099,
					 .len = 4096,
					 .dst_off = 0,
					 .count = 4096,
					 .src_stride = 8192},
		     M, "o_proj rank 1") <= 3 * 33);
	replay(&(struct gpu_range){.file_off = 777,
				   .len = 100 * 7 * 8,
				   .dst_off = 13,
				   .count = 4,
				   .src_stride = 300 * 7 * 8},
	       4096, "3-D middle dim");
}

/* Seeded random ranges and block sizes: the same every run. */
static void test_random(void)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	char what[96];
	int i;

	for (i = 0; i < 3000; i++) {
		struct gpu_range r;
		uint64_t bs;

#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
		bs = 16ull << (NEXT() % 8);
		r.len = 1 + NEXT() % 300;
		r.count = NEXT() % 40;
		r.src_stride = r.len + (NEXT() % 3 == 0 ? 0 : NEXT() % 500);
		r.file_off = NEXT() % 5000;
		r.dst_off = NEXT() % 64;
		snprintf(what, sizeof(what), "random %d (bs %llu)", i, (unsigned long long)bs);
		replay(&r, bs, what);
	}
}

int main(void)
{
	test_check();
	test_fixed();
	test_random();
	if (failures)
		fprintf(stderr, "rows_test: %d failures\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
