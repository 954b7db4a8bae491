/*
 * rows_test.c - the copy engine's arithmetic (gpu/request.c) without a GPU:
 * gpu_range_check() on good and bad ranges, and gpu_walk_next() replayed
 * over a byte array standing for a file cut into blocks. Each walk must give
 * pieces that each lie in one block, copy every byte of the slice exactly
 * once to its packed place, and cut a row that straddles a block boundary
 * into its two parts. A table of fixed cases (rows that straddle, rows that
 * end exactly on a boundary, strides larger than a block, tensor-parallel
 * shapes) is followed by seeded random ranges, each walked twice: as is,
 * and with the rows that a block's end cuts gathered into runs
 * (gpu_run_add), as copy.c does. Exits 0 on pass, 1 on fail.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Copies piece @p of @r's walk from the "file" (byte i is i * 131 >> 3) to
 * its packed place in @dst, counting each byte's copies in @seen. */
static void put_piece(const struct gpu_range *r, const struct gpu_rows *p, unsigned char *dst,
		      unsigned char *seen)
{
	uint64_t i, j;

	for (i = 0; i < p->height; i++)
		for (j = 0; j < p->width; j++) {
			uint64_t d = p->dst - r->dst_off + i * p->width + j;

			dst[d] = (unsigned char)((p->file_off + i * p->src_pitch + j) * 131 >> 3);
			seen[d]++;
		}
}

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
		put_piece(r, &p, dst, seen);
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

/* A fake device for the gather (gpu_stage_*): copies are queued when
 * issued and done only when their half is waited for, or at the end, so
 * that a half refilled before its copies completed corrupts what they copy. */
struct fake_dev {
	const struct gpu_range *r;
	unsigned char *stage, *dst, *seen;
	uint64_t half;
	struct gpu_run *q; /* issued, not yet done */
	uint64_t *q_off, nq, runs;
};

static void fake_done(struct fake_dev *d, int h)
{
	uint64_t k, n = 0, i, j;

	for (k = 0; k < d->nq; k++) {
		const struct gpu_run *run = &d->q[k];

		if (h >= 0 && (d->q_off[k] >= d->half) != (uint64_t)h) {
			d->q[n] = d->q[k];
			d->q_off[n++] = d->q_off[k];
			continue;
		}
		for (i = 0; i < run->rows; i++)
			for (j = 0; j < run->len; j++) {
				uint64_t at = run->dst - d->r->dst_off + i * run->pitch + j;

				d->dst[at] = d->stage[d->q_off[k] + i * run->len + j];
				d->seen[at]++;
			}
	}
	d->nq = n;
}

static int fake_copy(void *arg, const struct gpu_run *run, uint64_t off)
{
	struct fake_dev *d = arg;

	CHECK(run->rows > 0 && off + run->rows * run->len <= 2 * d->half, "copy inside the buffer");
	CHECK(run->rows == 1 || (run->pitch >= run->len && run->pitch <= GPU_MAX_PITCH));
	d->q = realloc(d->q, (d->nq + 1) * sizeof(*d->q));
	d->q_off = realloc(d->q_off, (d->nq + 1) * sizeof(*d->q_off));
	d->q[d->nq] = *run;
	d->q_off[d->nq++] = off;
	d->runs++;
	return 0;
}

static int fake_wait(void *arg, unsigned h)
{
	fake_done(arg, (int)h);
	return 0;
}

/* Walks @r as copy.c does with gathering on: the parts of a row that a
 * block's end cuts (a row of at most GPU_GATHER_ROW_MAX bytes) go through
 * gpu_stage_place/placed into a staging buffer of two halves of @half bytes,
 * the runs to the fake device; the other pieces straight to the buffer.
 * Checks every byte lands once in its place, and returns the runs copied. */
static uint64_t replay_gather(const struct gpu_range *r, uint64_t bs, uint64_t half,
			      const char *what)
{
	uint64_t rows = gpu_range_rows(r), total = rows * r->len, i, j, col, off;
	struct fake_dev d = {.r = r, .half = half};
	struct gpu_stage st = {.half = half};
	const struct gpu_stage_ops ops = {fake_copy, fake_wait, &d};
	struct gpu_walk w = {0, 0};
	struct gpu_rows p;

	d.stage = calloc(1, 2 * half);
	d.dst = calloc(1, total + 1);
	d.seen = calloc(1, total + 1);
	for (;;) {
		uint64_t pos = gpu_walk_pos(r, &w);

		col = w.col;
		if (gpu_walk_next(r, &w, bs - pos % bs, &p) != 1)
			break;
		if (rows > 1 && r->len <= GPU_GATHER_ROW_MAX && r->len <= half &&
		    p.width < r->len) {
			CHECK(gpu_stage_place(&st, &ops, r->len, col, &off) == 0, "%s", what);
			CHECK(off + p.width <= 2 * half, "%s: part inside the buffer", what);
			for (j = 0; j < p.width; j++)
				d.stage[off + j] = (unsigned char)((p.file_off + j) * 131 >> 3);
			CHECK(gpu_stage_placed(&st, &ops, p.dst - col, r->len, col, p.width) == 0);
			continue;
		}
		put_piece(r, &p, d.dst, d.seen);
	}
	CHECK(gpu_stage_flush(&st, &ops) == 0, "%s", what);
	fake_done(&d, -1);
	for (i = 0; i < rows; i++)
		for (j = 0; j < r->len; j++) {
			uint64_t at = i * r->len + j, src = r->file_off + i * r->src_stride + j;

			if (d.seen[at] != 1 || d.dst[at] != (unsigned char)(src * 131 >> 3)) {
				CHECK(
				    0,
				    "%s: gathered, byte %llu of row %llu copied %d times or wrong",
				    what, (unsigned long long)j, (unsigned long long)i, d.seen[at]);
				i = rows;
				break;
			}
		}
	free(d.stage);
	free(d.dst);
	free(d.seen);
	free(d.q);
	free(d.q_off);
	return d.runs;
}

static int fail_copy(void *arg, const struct gpu_run *run, uint64_t off)
{
	(void)arg, (void)run, (void)off;
	return -EIO;
}

/* An operation's error comes back from the call that made it. */
static void test_stage_errors(void)
{
	struct gpu_stage st = {.half = 16};
	const struct gpu_stage_ops ops = {fail_copy, fake_wait, NULL};
	uint64_t off;

	CHECK(gpu_stage_place(&st, &ops, 8, 0, &off) == 0 && off == 0);
	CHECK(gpu_stage_placed(&st, &ops, 100, 8, 0, 8) == 0, "the run starts: no copy yet");
	CHECK(gpu_stage_place(&st, &ops, 8, 0, &off) == 0 && off == 8);
	CHECK(gpu_stage_placed(&st, &ops, 50, 8, 0, 8) == -EIO, "a row before the run: copy fails");
	st = (struct gpu_stage){.half = 16};
	CHECK(gpu_stage_place(&st, &ops, 8, 0, &off) == 0 &&
	      gpu_stage_placed(&st, &ops, 100, 8, 0, 8) == 0);
	CHECK(gpu_stage_place(&st, &ops, 8, 0, &off) == 0 &&
	      gpu_stage_placed(&st, &ops, 108, 8, 0, 8) == 0);
	CHECK(st.run.rows == 2 && st.run_off == 0, "two rows in one run");
	CHECK(gpu_stage_place(&st, &ops, 8, 0, &off) == -EIO, "the half is full: its copy fails");
}

/* gpu_run_add() alone: which rows continue a run. */
static void test_run_add(void)
{
	struct gpu_run run = {0};

	CHECK(gpu_run_add(&run, 100, 8) && run.rows == 1 && run.dst == 100, "empty run takes it");
	CHECK(!gpu_run_add(&run, 100, 8), "same destination");
	CHECK(!gpu_run_add(&run, 50, 8), "a destination before the run");
	CHECK(!gpu_run_add(&run, 104, 8), "overlapping the first row");
	CHECK(!gpu_run_add(&run, 200, 9), "another length");
	CHECK(!gpu_run_add(&run, 100 + GPU_MAX_PITCH + 1, 8), "pitch past CUDA's");
	CHECK(run.rows == 1 && run.dst == 100 && run.len == 8, "refusals leave the run");
	CHECK(gpu_run_add(&run, 108, 8) && run.pitch == 8 && run.rows == 2, "adjacent rows");
	CHECK(gpu_run_add(&run, 116, 8) && run.rows == 3);
	CHECK(!gpu_run_add(&run, 128, 8), "off the pitch");
	CHECK(!gpu_run_add(&run, 132, 8), "a row skipped");
	CHECK(gpu_run_add(&run, 124, 8) && run.rows == 4);
	run = (struct gpu_run){0};
	CHECK(gpu_run_add(&run, 0, 4096) && gpu_run_add(&run, 128 * 4096, 4096) &&
		  gpu_run_add(&run, 256 * 4096, 4096) && run.pitch == 128 * 4096,
	      "cut rows 128 rows apart");
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
	/* the same rows gathered: every block's end cuts a row, 128 rows apart
	 * in the buffer, so all 32 go in one run */
	CHECK(replay_gather(&(struct gpu_range){.file_off = 8 * M + 4099,
						.len = 4096,
						.dst_off = 0,
						.count = 4096,
						.src_stride = 8192},
			    M, 4 << 20, "o_proj rank 1, gathered") == 1);
	/* a pitch that does not divide the block: the cut drifts along the row
	 * and some blocks' ends fall between rows; still every byte once */
	CHECK(replay_gather(
		  &(struct gpu_range){
		      .file_off = 5, .len = 3000, .dst_off = 9, .count = 2000, .src_stride = 6000},
		  M, 4 << 20, "drifting cut") >= 1);
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
		/* halves of one to four rows: they fill and swap often */
		replay_gather(&r, bs, r.len * (1 + NEXT() % 4), what);
	}
}

int main(void)
{
	test_check();
	test_run_add();
	test_stage_errors();
	test_fixed();
	test_random();
	if (failures)
		fprintf(stderr, "rows_test: %d failures\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
