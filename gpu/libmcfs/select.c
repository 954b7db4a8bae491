/*
 * select.c - libmcfs's tensor selection: which tensors of a safetensors
 * header a list of names or globs selects, where each lands in the device
 * buffer, and sending the resulting ranges in as few load requests as the
 * ioctl allows. The Python twin is gpu/python/mcfs/_select.py; both compute
 * the same layout (tests/test_gpu_select.py compares them).
 *
 * Why runs: tensors adjacent in the file are adjacent in the buffer too, so
 * they go in one range: a rank that owns a contiguous slice of a shard sends
 * one range, whatever its tensor count. Only gaps (tensors another rank owns)
 * cut runs. Why batches: the request is a fixed-size struct (FUSE passes
 * restricted ioctls only, under 16383 bytes), so it holds at most
 * MCFS_LOAD_MAX_RANGES ranges; more runs than that go in several requests.
 * Each request is a load of its own in the daemon (its own prefetch), so a
 * cold selection of many batches waits for one block fetch at each batch's
 * start: a few milliseconds per 384 runs.
 */
#define _GNU_SOURCE
#include "mcfs_client.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b)
{
	const struct mcfs_st_tensor *x = *(const struct mcfs_st_tensor *const *)a;
	const struct mcfs_st_tensor *y = *(const struct mcfs_st_tensor *const *)b;

	return strcmp(x->name, y->name);
}

static int name_is(const void *key, const void *elem)
{
	return strcmp(key, (*(const struct mcfs_st_tensor *const *)elem)->name);
}

/* Appends "'pattern'" to the list of unknown patterns in @err (truncated). */
static void add_unknown(char *err, size_t errlen, size_t *used, bool first, const char *p)
{
	int n;

	if (!err || *used >= errlen)
		return;
	n = snprintf(err + *used, errlen - *used, "%s'%s'", first ? "" : ", ", p);
	if (n > 0)
		*used += (size_t)n;
}

/* Sets chosen[i] for each tensor i of @h that a pattern selects. Returns 0,
 * -ENOENT (@err names the patterns that select nothing), -EINVAL, -ENOMEM. */
static int mark(const struct mcfs_st_header *h, const char *const *pats, size_t np,
		unsigned char *chosen, char *err, size_t errlen)
{
	const struct mcfs_st_tensor **sorted, **hit;
	size_t i, j, used = 0, unknown = 0;
	bool any;

	sorted = malloc((h->ntensors ? h->ntensors : 1) * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	for (i = 0; i < h->ntensors; i++)
		sorted[i] = &h->tensors[i];
	qsort(sorted, h->ntensors, sizeof(*sorted), by_name);
	if (err && errlen)
		used = (size_t)snprintf(err, errlen, "no tensor named or matching ");
	for (i = 0; i < np; i++) {
		if (!pats[i]) {
			free(sorted);
			if (err && errlen)
				snprintf(err, errlen, "pattern %zu is NULL", i);
			return -EINVAL;
		}
		hit = bsearch(pats[i], sorted, h->ntensors, sizeof(*sorted), name_is);
		if (hit) {
			chosen[*hit - h->tensors] = 1;
			continue;
		}
		any = false;
		if (strpbrk(pats[i], "*?[")) {
			for (j = 0; j < h->ntensors; j++) {
				if (fnmatch(pats[i], h->tensors[j].name, FNM_NOESCAPE) == 0) {
					chosen[j] = 1;
					any = true;
				}
			}
		}
		if (!any)
			add_unknown(err, errlen, &used, unknown++ == 0, pats[i]);
	}
	free(sorted);
	return unknown ? -ENOENT : 0;
}

/* Lays the chosen tensors out in runs (see mcfs_client.h). */
static void lay_out(const struct mcfs_st_header *h, const unsigned char *chosen,
		    struct mcfs_selection *s)
{
	struct mcfs_range *run = NULL;
	uint64_t at = 0, run_end = 0; /* buffer bytes used; data-section end of the run */
	size_t i;

	for (i = 0; i < h->ntensors; i++) {
		const struct mcfs_st_tensor *t = &h->tensors[i];

		if (chosen && !chosen[i])
			continue;
		if (!run || t->begin != run_end) {
			if (run && run->len)
				s->nranges++;
			run = &s->ranges[s->nranges];
			/* the next offset >= at that is congruent to t->begin; unsigned
			 * wrap-around is exact because 2^64 is a multiple of the alignment */
			run->dst_off = at + (t->begin - at) % MCFS_SELECT_ALIGN;
			run->file_off = h->data_offset + t->begin;
			run->len = 0;
			run_end = t->begin;
		}
		s->tensors[s->n] = t;
		s->dst[s->n] = run->dst_off + (t->begin - (run->file_off - h->data_offset));
		s->n++;
		run->len += t->end - t->begin;
		run_end = t->end;
		at = run->dst_off + run->len;
		s->copy_bytes += t->end - t->begin;
	}
	if (run && run->len)
		s->nranges++;
	s->bytes = at;
}

int mcfs_select(const struct mcfs_st_header *h, const char *const *patterns, size_t npatterns,
		struct mcfs_selection **out, char *err, size_t errlen)
{
	size_t n = h->ntensors ? h->ntensors : 1;
	unsigned char *chosen = NULL;
	struct mcfs_selection *s;
	int rc;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (patterns) {
		chosen = calloc(n, 1);
		if (!chosen)
			return -ENOMEM;
		rc = mark(h, patterns, npatterns, chosen, err, errlen);
		if (rc < 0) {
			free(chosen);
			return rc;
		}
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->tensors = calloc(n, sizeof(*s->tensors));
		s->dst = calloc(n, sizeof(*s->dst));
		s->ranges = calloc(n, sizeof(*s->ranges));
	}
	if (!s || !s->tensors || !s->dst || !s->ranges) {
		free(chosen);
		mcfs_selection_free(s);
		return -ENOMEM;
	}
	s->header = h;
	lay_out(h, chosen, s);
	free(chosen);
	*out = s;
	return 0;
}

void mcfs_selection_free(struct mcfs_selection *s)
{
	if (!s)
		return;
	if (s->owns_header)
		mcfs_st_free((struct mcfs_st_header *)s->header);
	free(s->tensors);
	free(s->dst);
	free(s->ranges);
	free(s);
}

int mcfs_load_selection(int fd, const struct mcfs_devbuf *buf, uint64_t size,
			const struct mcfs_selection *s, unsigned flags, uint64_t *bytes)
{
	struct mcfs_load_req *stats;
	struct mcfs_range none;
	size_t at, n;
	uint64_t got = 0;
	int rc = 0;

	if (bytes)
		*bytes = 0;
	if (s->nranges == 0) /* nothing to copy: never send 0 ranges (the whole file) */
		return 0;
	stats = malloc(sizeof(*stats));
	if (!stats)
		return -ENOMEM;
	for (at = 0; at < s->nranges && rc == 0; at += n) {
		n = s->nranges - at;
		if (n > MCFS_LOAD_MAX_RANGES)
			n = MCFS_LOAD_MAX_RANGES;
		/* the mapping stays open until the last request */
		rc = mcfs_load(fd, buf, size, &s->ranges[at], (unsigned)n,
			       at + n == s->nranges ? flags : (flags & ~MCFS_LOAD_F_CLOSE), stats);
		if (rc == 0)
			got += stats->bytes;
	}
	if (rc < 0 && (flags & MCFS_LOAD_F_CLOSE) && s->nranges > MCFS_LOAD_MAX_RANGES) {
		/* an empty range only closes the mapping; its result changes nothing */
		none.file_off = s->ranges[0].file_off;
		none.len = 0;
		none.dst_off = 0;
		none.count = 0;
		none.src_stride = 0;
		(void)mcfs_load(fd, buf, size, &none, 1, MCFS_LOAD_F_CLOSE, NULL);
	}
	free(stats);
	if (bytes)
		*bytes = got;
	return rc;
}
