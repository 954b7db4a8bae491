/*
 * request.c - what a load request means, compiled in both builds (with and
 * without CUDA): a load that names no ranges copies the safetensors data
 * section, found here from the file's first 8 bytes; and the arithmetic of
 * the copy engine (gpu/copy.c): which rows of a strided range one RAM-tier
 * block holds, kept pure here so that gpu_rows_test checks it on any machine.
 *
 * It lives in gpu/ because gpu/ knows the safetensors format
 * (safetensors.h), and in both builds because a file that is not
 * safetensors is refused with -EBADMSG before the question of a GPU arises:
 * a client learns the same thing on any machine.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "safetensors.h"
#include "cache.h"
#include "cache_ram.h"

#include <errno.h>
#include <string.h>

int gpu_data_section(struct cache *c, struct cache_file *f, struct gpu_range *out)
{
	uint64_t size = cache_file_size(f), doff;
	struct cache_block *b;
	struct cache_span sp;
	int rc;

	if (size < 8)
		return -EBADMSG;
	rc = cache_span(c, f, 0, 8, &sp);
	if (rc < 0)
		return rc;
	if (sp.len < 8) /* cannot happen: cfg.c allows no block under 1 MiB */
		return -EBADMSG;
	rc = cache_block_get(c, f, sp.index, &b);
	if (rc < 0)
		return rc;
	rc = mcfs_st_data_offset((const unsigned char *)cache_block_data(b) + sp.boff, size, &doff);
	cache_block_put(c, b);
	if (rc < 0)
		return rc;
	out->file_off = doff;
	out->len = size - doff;
	out->dst_off = 0;
	out->count = 1;
	out->src_stride = 0;
	return 0;
}

uint64_t gpu_range_rows(const struct gpu_range *r)
{
	return r->count > 1 ? r->count : 1;
}

int gpu_range_check(const struct gpu_range *r, uint64_t size, uint64_t *file_end, uint64_t *dst_end)
{
	uint64_t rows = gpu_range_rows(r), fend, dend, span;

	if (r->len == 0) {
		fend = r->file_off;
		dend = r->dst_off;
		goto out;
	}
	if (rows > 1 && r->src_stride < r->len)
		return -EINVAL;
	/* last row's start, then its end; and rows * len packed in the buffer */
	if (__builtin_mul_overflow(rows - 1, rows > 1 ? r->src_stride : 0, &span) ||
	    __builtin_add_overflow(r->file_off, span, &fend) ||
	    __builtin_add_overflow(fend, r->len, &fend) ||
	    __builtin_mul_overflow(rows, r->len, &span) ||
	    __builtin_add_overflow(r->dst_off, span, &dend))
		return -EINVAL;
	if (fend > size)
		return -ERANGE;
out:
	if (file_end)
		*file_end = fend;
	if (dst_end)
		*dst_end = dend;
	return 0;
}

uint64_t gpu_walk_pos(const struct gpu_range *r, const struct gpu_walk *w)
{
	return r->file_off + (w->row ? w->row * r->src_stride : 0) + w->col;
}

int gpu_walk_next(const struct gpu_range *r, struct gpu_walk *w, uint64_t avail,
		  struct gpu_rows *out)
{
	uint64_t rows = gpu_range_rows(r), h;

	if (r->len == 0 || w->row >= rows || avail == 0)
		return 0;
	out->file_off = gpu_walk_pos(r, w);
	out->dst = r->dst_off + w->row * r->len + w->col;
	out->src_pitch = rows > 1 ? r->src_stride : r->len;
	if (w->col == 0 && r->len <= avail) {
		/* whole rows from here: row k fits if k * stride + len <= avail */
		h = 1;
		if (rows - w->row > 1 && r->src_stride <= GPU_MAX_PITCH)
			h = MCFS_MIN(rows - w->row, 1 + (avail - r->len) / r->src_stride);
		out->width = r->len;
		out->height = h;
		w->row += h;
		return 1;
	}
	/* a part of the current row: to its end or to the block's */
	out->width = MCFS_MIN(r->len - w->col, avail);
	out->height = 1;
	w->col += out->width;
	if (w->col == r->len) {
		w->row++;
		w->col = 0;
	}
	return 1;
}

bool gpu_run_add(struct gpu_run *run, uint64_t dst, uint64_t len)
{
	uint64_t gap;

	if (run->rows == 0) {
		*run = (struct gpu_run){.dst = dst, .len = len, .rows = 1};
		return true;
	}
	if (len != run->len || dst <= run->dst)
		return false;
	gap = dst - run->dst;
	if (run->rows == 1) {
		if (gap < len || gap > GPU_MAX_PITCH)
			return false;
		run->pitch = gap;
	} else if (gap / run->pitch != run->rows || gap % run->pitch) {
		return false;
	}
	run->rows++;
	return true;
}

int gpu_stage_flush(struct gpu_stage *st, const struct gpu_stage_ops *ops)
{
	struct gpu_run run = st->run;

	if (!run.rows)
		return 0;
	memset(&st->run, 0, sizeof(st->run));
	st->busy[st->run_off >= st->half] = true;
	return ops->copy(ops->arg, &run, st->run_off);
}

int gpu_stage_place(struct gpu_stage *st, const struct gpu_stage_ops *ops, uint64_t len,
		    uint64_t col, uint64_t *off)
{
	int rc;

	if (col == 0) {
		if (st->used + len > st->half) {
			rc = gpu_stage_flush(st, ops);
			if (rc < 0)
				return rc;
			st->filling ^= 1;
			st->used = 0;
			if (st->busy[st->filling]) {
				rc = ops->wait(ops->arg, st->filling);
				if (rc < 0)
					return rc;
				st->busy[st->filling] = false;
			}
		}
		st->row_off = st->filling * st->half + st->used;
		st->used += len;
	}
	*off = st->row_off + col;
	return 0;
}

int gpu_stage_placed(struct gpu_stage *st, const struct gpu_stage_ops *ops, uint64_t row_dst,
		     uint64_t len, uint64_t col, uint64_t width)
{
	int rc;

	if (col + width < len)
		return 0; /* the rest of the row comes next */
	if (!gpu_run_add(&st->run, row_dst, len)) {
		rc = gpu_stage_flush(st, ops);
		if (rc < 0)
			return rc;
		(void)gpu_run_add(&st->run, row_dst, len); /* empty: takes it */
	}
	if (st->run.rows == 1)
		st->run_off = st->row_off;
	return 0;
}
