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
 *
 * Slices (struct mcfs_slice): a tensor sliced along one dimension is a range
 * of its own, strided past dim 0; the Python twin is _slices.py, with the
 * same layout and rules (tests/test_gpu_select.py compares them too).
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

void mcfs_shard_bounds(uint64_t n, uint32_t rank, uint32_t world, uint64_t *start, uint64_t *stop)
{
	uint64_t size, s;

	if (world == 0) {
		*start = 0;
		*stop = n;
		return;
	}
	size = n / world + (n % world != 0);
	s = rank >= world ? n : (uint64_t)rank * size;
	*start = s < n ? s : n;
	*stop = n - *start < size ? n : *start + size;
}

/* True if @p selects tensor @name of @h: its name, or (when no tensor has
 * that name) a glob matching it. */
static bool selects(const struct mcfs_st_header *h, const char *p, const char *name)
{
	size_t j;

	if (strcmp(p, name) == 0)
		return true;
	if (!strpbrk(p, "*?["))
		return false;
	for (j = 0; j < h->ntensors; j++)
		if (strcmp(p, h->tensors[j].name) == 0)
			return false; /* the pattern is a name: that tensor alone */
	return fnmatch(p, name, FNM_NOESCAPE) == 0;
}

/* Slice @sl of tensor @t as a cut, or -EINVAL (@err says why). */
static int cut_of(const struct mcfs_st_tensor *t, const struct mcfs_slice *sl, struct mcfs_cut *c,
		  char *err, size_t errlen)
{
	int32_t d = sl->dim < 0 ? sl->dim + (int32_t)t->ndim : sl->dim;
	uint64_t n;

	if (d < 0 || (uint32_t)d >= t->ndim) {
		if (err && errlen)
			snprintf(err, errlen,
				 "slice '%s' of %s along dim %d: the tensor has %u "
				 "dimensions",
				 sl->pattern, t->name, (int)sl->dim, t->ndim);
		return -EINVAL;
	}
	if (mcfs_st_dtype_bits(t->dtype) % 8) {
		if (err && errlen)
			snprintf(err, errlen,
				 "slice '%s' of %s: slices of dtypes of less than a "
				 "byte are not supported",
				 sl->pattern, t->name);
		return -EINVAL;
	}
	n = t->shape[d];
	c->dim = d;
	if (sl->world) {
		mcfs_shard_bounds(n, sl->rank, sl->world, &c->start, &c->stop);
	} else {
		c->stop = sl->stop < n ? sl->stop : n;
		c->start = sl->start < c->stop ? sl->start : c->stop;
	}
	return 0;
}

/* Fills s->cuts for the chosen tensors: plan entries first, then explicit
 * slices over them. Returns 0, -ENOENT, -EINVAL (@err says which). */
static int cut_all(const struct mcfs_st_header *h, const unsigned char *chosen,
		   const struct mcfs_slice *slices, size_t ns, struct mcfs_cut *cuts, char *err,
		   size_t errlen)
{
	/* per tensor: 0 no slice yet, 1 a plan entry's, 2 an explicit one's */
	unsigned char *origin = calloc(h->ntensors ? h->ntensors : 1, 1);
	size_t i, j, used = 0, unknown = 0;
	int pass, rc = 0;

	if (!origin)
		return -ENOMEM;
	for (j = 0; j < h->ntensors; j++)
		cuts[j].dim = -1;
	if (err && errlen)
		used = (size_t)snprintf(err, errlen, "no tensor named or matching ");
	for (pass = 0; pass < 2 && rc == 0; pass++) {
		for (i = 0; i < ns && rc == 0; i++) {
			const struct mcfs_slice *sl = &slices[i];
			bool any = false;

			if (!sl->pattern) {
				if (err && errlen)
					snprintf(err, errlen, "slice %zu has a NULL pattern", i);
				rc = -EINVAL;
				break;
			}
			if ((pass == 0) != (sl->world != 0))
				continue;
			if (sl->world && sl->rank >= sl->world) {
				if (err && errlen)
					snprintf(err, errlen,
						 "slice '%s': rank %u is not in [0, %u)",
						 sl->pattern, sl->rank, sl->world);
				rc = -EINVAL;
				break;
			}
			for (j = 0; j < h->ntensors && rc == 0; j++) {
				struct mcfs_cut c;

				if ((chosen && !chosen[j]) ||
				    !selects(h, sl->pattern, h->tensors[j].name))
					continue;
				any = true;
				rc = cut_of(&h->tensors[j], sl, &c, err, errlen);
				if (rc == 0 && origin[j] == pass + 1 &&
				    (c.dim != cuts[j].dim || c.start != cuts[j].start ||
				     c.stop != cuts[j].stop)) {
					if (err && errlen)
						snprintf(err, errlen,
							 "two slices select %s with "
							 "different bounds",
							 h->tensors[j].name);
					rc = -EINVAL;
				}
				if (rc == 0) {
					cuts[j] = c;
					origin[j] = pass == 0 ? 1 : 2;
				}
			}
			if (rc == 0 && pass == 1 && !any)
				add_unknown(err, errlen, &used, unknown++ == 0, sl->pattern);
		}
	}
	free(origin);
	if (rc == 0 && unknown)
		rc = -ENOENT;
	for (j = 0; j < h->ntensors && rc == 0; j++)
		if (cuts[j].dim >= 0 && cuts[j].start == 0 &&
		    cuts[j].stop == h->tensors[j].shape[cuts[j].dim])
			cuts[j].dim = -1; /* all of it: a whole tensor */
	return rc;
}

/* The range of tensor @t that @c takes, at buffer offset @at; its bytes. */
static uint64_t cut_range(const struct mcfs_st_header *h, const struct mcfs_st_tensor *t,
			  const struct mcfs_cut *c, uint64_t at, struct mcfs_range *r)
{
	uint64_t inner = mcfs_st_dtype_bits(t->dtype) / 8, outer = 1, row, stride;
	unsigned k;

	for (k = (unsigned)c->dim + 1; k < t->ndim; k++)
		inner *= t->shape[k];
	for (k = 0; k < (unsigned)c->dim; k++)
		outer *= t->shape[k];
	row = (c->stop - c->start) * inner;
	stride = t->shape[c->dim] * inner;
	memset(r, 0, sizeof(*r));
	r->file_off = h->data_offset + t->begin + c->start * inner;
	r->dst_off = at;
	if (outer <= 1 || row == stride) {
		r->len = outer * row;
	} else {
		r->len = row;
		r->count = outer;
		r->src_stride = stride;
	}
	return outer * row;
}

/* Lays the chosen tensors out in runs (see mcfs_client.h); a cut tensor
 * (cuts[i].dim >= 0) is a range of its own. */
static void lay_out(const struct mcfs_st_header *h, const unsigned char *chosen,
		    const struct mcfs_cut *cuts, struct mcfs_selection *s)
{
	struct mcfs_range *run = NULL;
	uint64_t at = 0, run_end = 0; /* buffer bytes used; data-section end of the run */
	size_t i;

	for (i = 0; i < h->ntensors; i++) {
		const struct mcfs_st_tensor *t = &h->tensors[i];

		if (chosen && !chosen[i])
			continue;
		s->cuts[s->n] = cuts ? cuts[i] : (struct mcfs_cut){.dim = -1};
		if (s->cuts[s->n].dim >= 0) {
			struct mcfs_cut *c = &s->cuts[s->n];

			if (run && run->len)
				s->nranges++;
			run = NULL;
			at = (at + MCFS_SELECT_ALIGN - 1) & ~(uint64_t)(MCFS_SELECT_ALIGN - 1);
			c->bytes = cut_range(h, t, c, at, &s->ranges[s->nranges]);
			if (c->bytes)
				s->nranges++;
			s->tensors[s->n] = t;
			s->dst[s->n] = at;
			s->n++;
			at += c->bytes;
			s->copy_bytes += c->bytes;
			continue;
		}
		s->cuts[s->n].bytes = t->end - t->begin;
		if (!run || t->begin != run_end) {
			if (run && run->len)
				s->nranges++;
			run = &s->ranges[s->nranges];
			memset(run, 0, sizeof(*run)); /* an empty cut may have used the slot */
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
	return mcfs_select_slices(h, patterns, npatterns, NULL, 0, out, err, errlen);
}

int mcfs_select_slices(const struct mcfs_st_header *h, const char *const *patterns,
		       size_t npatterns, const struct mcfs_slice *slices, size_t nslices,
		       struct mcfs_selection **out, char *err, size_t errlen)
{
	size_t n = h->ntensors ? h->ntensors : 1;
	unsigned char *chosen = NULL;
	struct mcfs_cut *cuts = NULL;
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
	if (nslices) {
		cuts = calloc(n, sizeof(*cuts));
		rc = cuts ? cut_all(h, chosen, slices, nslices, cuts, err, errlen) : -ENOMEM;
		if (rc < 0) {
			free(chosen);
			free(cuts);
			return rc;
		}
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->tensors = calloc(n, sizeof(*s->tensors));
		s->dst = calloc(n, sizeof(*s->dst));
		s->ranges = calloc(n, sizeof(*s->ranges));
		s->cuts = calloc(n, sizeof(*s->cuts));
	}
	if (!s || !s->tensors || !s->dst || !s->ranges || !s->cuts) {
		free(chosen);
		free(cuts);
		mcfs_selection_free(s);
		return -ENOMEM;
	}
	s->header = h;
	lay_out(h, chosen, cuts, s);
	free(chosen);
	free(cuts);
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
	free(s->cuts);
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
