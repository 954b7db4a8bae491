/*
 * copy.c - the copy engine: moves the blocks behind a load request from the
 * RAM tier into the caller's device buffer.
 *
 * Flow of one load (one FUSE worker thread, start to end):
 *
 *   prefetch cursor ──cache_prefetch()──► fetch threads fill slots ahead
 *   copy cursor ──cache_block_get()──► cudaMemcpyAsync(stream k) + event
 *                                   └─► ring of held blocks; the oldest is
 *                                       released once its event has fired
 *
 * Pieces of one block (a slice's rows cut by the block's ends, or ranges
 * that share it) go on the block's stream, one after another, and the block
 * is taken from the cache once: each new piece takes over the previous
 * piece's reference, so the block is put back when its last copy is done
 * (events on one stream complete in order). A row that a block's end cuts,
 * if short (GPU_GATHER_ROW_MAX), is not copied in its two parts: each part
 * is copied on the CPU into a pinned staging buffer, and whole rows go from
 * there in runs (gather()), so that the copy engine sees one copy per run
 * instead of two small ones per cut.
 *
 * The whole request is known up front, so the prefetch cursor runs ahead of
 * the copy by up to a quarter of the RAM tier, bounded again by the cache's
 * prefetch budget (cache_prefetch says -EAGAIN when it is spent; we try again
 * after the next block). The copy holds at most `window` blocks: a block's
 * reference is dropped only after the DMA that reads it has completed, so a
 * slot is never reused under a copy. Blocks of pinned chunks go in one DMA;
 * others (pinning still running, or it failed) through CUDA's pageable path.
 *
 * Before the first block, the load waits its turn for a window
 * (cache_gpu_window: GPU loads together hold a quarter of the RAM tier at
 * most), so that any number of loads at once complete instead of holding
 * every slot and waiting on each other.
 *
 * Between blocks the caller's interrupt callback is polled (a FUSE interrupt:
 * Ctrl-C in the loader); the copies in flight are then drained, every
 * reference dropped, and -EINTR returned.
 */
#define _GNU_SOURCE
#include "gpu_int.h"
#include "cache.h"
#include "cache_ram.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- stream sets ------------------------------------------------------- */

static void destroy_streams(struct gpu *g, struct gpu_streams *s)
{
	int i;

	(void)cudaSetDevice(g->devs[s->dev].ordinal);
	for (i = 0; i < GPU_NSTREAMS; i++)
		if (s->s[i])
			(void)cudaStreamDestroy(s->s[i]);
	for (i = 0; i < GPU_WINDOW; i++)
		if (s->ev[i])
			(void)cudaEventDestroy(s->ev[i]);
	for (i = 0; i < 2; i++)
		if (s->gather_ev[i])
			(void)cudaEventDestroy(s->gather_ev[i]);
	if (s->gather_st)
		(void)cudaStreamDestroy(s->gather_st);
	if (s->gather)
		(void)cudaFreeHost(s->gather);
	free(s);
}

int gpu_streams_get(struct gpu *g, int dev, struct gpu_streams **out)
{
	struct gpu_streams **pp, *s;
	cudaError_t e = cudaSuccess;
	int i;

	pthread_mutex_lock(&g->lock);
	for (pp = &g->pool; (s = *pp); pp = &s->next)
		if (s->dev == dev)
			break;
	if (s)
		*pp = s->next;
	pthread_mutex_unlock(&g->lock);
	if (s) {
		*out = s;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dev = dev;
	for (i = 0; i < GPU_NSTREAMS && e == cudaSuccess; i++)
		e = cudaStreamCreateWithFlags(&s->s[i], cudaStreamNonBlocking);
	for (i = 0; i < GPU_WINDOW && e == cudaSuccess; i++)
		e = cudaEventCreateWithFlags(&s->ev[i],
					     cudaEventDisableTiming | cudaEventBlockingSync);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s->gather_st, cudaStreamNonBlocking);
	for (i = 0; i < 2 && e == cudaSuccess; i++)
		e = cudaEventCreateWithFlags(&s->gather_ev[i],
					     cudaEventDisableTiming | cudaEventBlockingSync);
	if (e != cudaSuccess) {
		MCFS_ERR("gpu: cannot create streams on device %d: %s", g->devs[dev].ordinal,
			 cudaGetErrorString(e));
		destroy_streams(g, s);
		return gpu_errno(e) == -ENOMEM ? -ENOMEM : -ENODEV;
	}
	*out = s;
	return 0;
}

void gpu_streams_put(struct gpu *g, struct gpu_streams *s)
{
	pthread_mutex_lock(&g->lock);
	s->next = g->pool;
	g->pool = s;
	pthread_mutex_unlock(&g->lock);
}

void gpu_streams_free_all(struct gpu *g)
{
	struct gpu_streams *s, *next;

	pthread_mutex_lock(&g->lock);
	s = g->pool;
	g->pool = NULL;
	pthread_mutex_unlock(&g->lock);
	for (; s; s = next) {
		next = s->next;
		destroy_streams(g, s);
	}
}

/* ---- walking the ranges block by block --------------------------------- */

/* Where a walk over the request's ranges stands. Where a block starts and
 * ends is cache_span()'s answer; which rows of a strided range lie in it is
 * gpu_walk_next()'s (request.c, unit-tested without a GPU). */
struct cursor {
	const struct gpu_range *r;
	unsigned n, ri;	   /* ranges, current range */
	struct gpu_walk w; /* position within r[ri] */
	uint64_t taken;	   /* pieces returned so far */
};

/* One copy: the rows (or part of a row) of one range that lie in one block. */
struct piece {
	struct cache_span sp; /* block index and the first byte's offset in it */
	struct gpu_rows rows; /* what to copy; rows.dst: offset from the buffer start */
	bool cut;	      /* a part of a short row that a block's end cuts: gathered */
	uint64_t col, len;    /* if cut: where the part starts in its row, the row's bytes */
};

static void cursor_init(struct cursor *c, const struct gpu_range *r, unsigned n)
{
	memset(c, 0, sizeof(*c));
	c->r = r;
	c->n = n;
}

/* Returns 1 with the next piece in *p, 0 past the last range, or -EINVAL for a
 * range past the end of @f (gpu_load's caller checks ranges first). */
static int next_piece(const struct cache *cache, const struct cache_file *f, struct cursor *c,
		      struct piece *p)
{
	const struct gpu_range *r;
	uint64_t pos, end;
	int rc;

	for (; c->ri < c->n; c->ri++, memset(&c->w, 0, sizeof(c->w))) {
		r = &c->r[c->ri];
		if (r->len && c->w.row < gpu_range_rows(r))
			break;
	}
	if (c->ri == c->n)
		return 0;
	r = &c->r[c->ri];
	rc = gpu_range_check(r, UINT64_MAX, &end, NULL);
	if (rc < 0)
		return -EINVAL;
	pos = gpu_walk_pos(r, &c->w);
	rc = cache_span(cache, f, pos, end - pos, &p->sp);
	if (rc < 0)
		return rc;
	p->col = c->w.col;
	if (gpu_walk_next(r, &c->w, p->sp.blen - p->sp.boff, &p->rows) != 1)
		return -EINVAL; /* cannot happen: the loop above left a row to copy */
	p->len = r->len;
	p->cut = gpu_range_rows(r) > 1 && r->len <= GPU_GATHER_ROW_MAX && p->rows.width < r->len;
	c->taken++;
	return 1;
}

/* ---- one load ------------------------------------------------------------ */

struct load {
	struct gpu *g;
	struct cache_file *f;
	struct gpu_streams *s;
	int dev;
	char *dbase;			      /* device address of the buffer start */
	unsigned window;		      /* blocks held at most */
	uint64_t ahead;			      /* prefetch lead, blocks */
	struct cache_block *ring[GPU_WINDOW]; /* NULL: the next piece holds its block */
	uint64_t ring_index[GPU_WINDOW];      /* the block index of each piece */
	unsigned head, count;		      /* ring: oldest, how many held */
	struct cursor cp, pf;		      /* copy and prefetch cursors */
	uint64_t pf_last;		      /* last block index prefetched */
	bool pf_done;
	struct gpu_stage stage; /* rows cut by a block's end, in s->gather (gather()) */
};

static int retire_oldest(struct load *l, struct gpu_load_result *res)
{
	unsigned long long t0 = mcfs_now_ns();
	cudaError_t e;

	e = cudaEventSynchronize(l->s->ev[l->head]);
	res->wait_copies_ns += mcfs_now_ns() - t0;
	if (l->ring[l->head])
		cache_block_put(l->g->cache, l->ring[l->head]);
	l->head = (l->head + 1) % l->window;
	l->count--;
	if (e != cudaSuccess) {
		MCFS_ERR("gpu: copy to device %d failed: %s", l->g->devs[l->dev].ordinal,
			 cudaGetErrorString(e));
		gpu_dev_broken(l->g, l->dev, e);
		return gpu_errno(e) == -ENODEV ? -ENODEV : -EIO;
	}
	return 0;
}

static void top_up_prefetch(struct load *l)
{
	struct piece p;

	if (l->pf_done)
		return;
	if (l->pf.taken < l->cp.taken) /* fell behind after -EAGAIN: skip ahead */
		l->pf = l->cp;
	while (l->pf.taken < l->cp.taken + l->ahead) {
		struct cursor save = l->pf;

		/* at the end, or a bad range: the copy cursor reports it */
		if (next_piece(l->g->cache, l->f, &l->pf, &p) <= 0) {
			l->pf_done = true;
			return;
		}
		if (p.sp.index == l->pf_last)
			continue;
		if (cache_prefetch(l->g->cache, l->f, p.sp.index) == -EAGAIN) {
			l->pf = save; /* budget full: retry this block next time */
			return;
		}
		l->pf_last = p.sp.index;
	}
}

/* ---- rows cut by a block's end ------------------------------------------ */

static int gather_error(struct load *l, cudaError_t e, const char *what)
{
	MCFS_ERR("gpu: %s of gathered rows to device %d: %s", what, l->g->devs[l->dev].ordinal,
		 cudaGetErrorString(e));
	gpu_dev_broken(l->g, l->dev, e);
	return gpu_errno(e) == -ENODEV ? -ENODEV : -EIO;
}

/* gpu_stage_ops.copy: one run from the staging buffer, on the gather stream;
 * the half's event then covers every earlier copy from it. */
static int stage_copy(void *arg, const struct gpu_run *r, uint64_t off)
{
	struct load *l = arg;
	const char *src = l->s->gather + off;
	cudaStream_t st = l->s->gather_st;
	cudaError_t e;

	if (r->rows == 1)
		e = cudaMemcpyAsync(l->dbase + r->dst, src, r->len, cudaMemcpyHostToDevice, st);
	else
		e = cudaMemcpy2DAsync(l->dbase + r->dst, r->pitch, src, r->len, r->len, r->rows,
				      cudaMemcpyHostToDevice, st);
	if (e == cudaSuccess)
		e = cudaEventRecord(l->s->gather_ev[off >= l->stage.half], st);
	return e == cudaSuccess ? 0 : gather_error(l, e, "copy");
}

/* gpu_stage_ops.wait */
static int stage_wait(void *arg, unsigned h)
{
	struct load *l = arg;
	cudaError_t e = cudaEventSynchronize(l->s->gather_ev[h]);

	return e == cudaSuccess ? 0 : gather_error(l, e, "wait for a copy");
}

/* Copies the part @p of a cut row from @src (in its block, held) into the
 * staging buffer, where gpu_stage_place() puts it (request.c: the row's
 * place, the runs, the halves). */
static int gather(struct load *l, const struct piece *p, const char *src)
{
	const struct gpu_stage_ops ops = {stage_copy, stage_wait, l};
	uint64_t off;
	int rc;

	rc = gpu_stage_place(&l->stage, &ops, p->len, p->col, &off);
	if (rc < 0)
		return rc;
	memcpy(l->s->gather + off, src, p->rows.width);
	return gpu_stage_placed(&l->stage, &ops, p->rows.dst - p->col, p->len, p->col,
				p->rows.width);
}

/* At a load's end: copies what is gathered (@flush) and waits for every copy
 * from the staging buffer, which the next load of this stream set refills. */
static int gather_drain(struct load *l, bool flush)
{
	const struct gpu_stage_ops ops = {stage_copy, stage_wait, l};
	int rc = flush ? gpu_stage_flush(&l->stage, &ops) : 0, rc2;
	unsigned h;

	for (h = 0; h < 2; h++) {
		if (!l->stage.busy[h])
			continue;
		l->stage.busy[h] = false;
		rc2 = stage_wait(l, h);
		if (rc == 0)
			rc = rc2;
	}
	return rc;
}

/* Whether @p is gathered: a cut row's part, with the staging buffer made. */
static bool gathers(struct load *l, const struct piece *p)
{
	struct gpu_streams *s = l->s;
	cudaError_t e;

	if (!p->cut || s->gather_failed)
		return false;
	if (s->gather)
		return true;
	e = cudaHostAlloc((void **)&s->gather, GPU_GATHER_SIZE, cudaHostAllocPortable);
	if (e == cudaSuccess)
		return true;
	s->gather = NULL;
	s->gather_failed = true;
	MCFS_WARN("gpu: no pinned staging buffer for rows cut by block ends on device %d (%s): "
		  "they go in two copies each",
		  l->g->devs[l->dev].ordinal, cudaGetErrorString(e));
	(void)cudaGetLastError(); /* not sticky: clear it */
	return false;
}

static int copy_one(struct load *l, const struct piece *p, struct gpu_load_result *res)
{
	struct cache_block *b = NULL;
	cudaStream_t st = l->s->s[p->sp.index % GPU_NSTREAMS];
	unsigned slot = (l->head + l->count) % l->window;
	unsigned prev = (slot + l->window - 1) % l->window;
	unsigned long long t0 = mcfs_now_ns();
	const struct gpu_rows *rw = &p->rows;
	uint64_t span = (rw->height - 1) * rw->src_pitch + rw->width; /* bytes of the block read */
	const char *src;
	cudaError_t e;
	int rc;

	if (l->count && l->ring[prev] && l->ring_index[prev] == p->sp.index) {
		b = l->ring[prev]; /* same block, same stream: this copy ends after that one */
		l->ring[prev] = NULL;
	} else {
		rc = cache_block_get(l->g->cache, l->f, p->sp.index, &b);
		res->wait_blocks_ns += mcfs_now_ns() - t0;
		if (rc < 0)
			return rc;
	}
	src = cache_block_data(b) + p->sp.boff;
	if ((size_t)p->sp.boff + span > cache_block_len(b)) {
		/* the file shrank under a cached identity: cannot happen for one version */
		(void)cudaStreamSynchronize(st); /* an earlier piece may still read it */
		cache_block_put(l->g->cache, b);
		return -EIO;
	}
	if (gathers(l, p)) {
		/* copied on the CPU: the event below only orders the block's release
		 * after the copies of it already on the stream */
		rc = gather(l, p, src);
		if (rc < 0) {
			(void)cudaStreamSynchronize(st); /* an earlier piece may still read it */
			cache_block_put(l->g->cache, b);
			return rc;
		}
		res->gathered += p->col == 0;
		e = cudaSuccess;
	} else {
		if (!gpu_is_pinned(l->g, src, span))
			res->unpinned++;
		if (rw->height == 1)
			e = cudaMemcpyAsync(l->dbase + rw->dst, src, rw->width,
					    cudaMemcpyHostToDevice, st);
		else /* rows of a slice: packed in the buffer, src_pitch apart in the block */
			e = cudaMemcpy2DAsync(l->dbase + rw->dst, rw->width, src, rw->src_pitch,
					      rw->width, rw->height, cudaMemcpyHostToDevice, st);
	}
	if (e == cudaSuccess)
		e = cudaEventRecord(l->s->ev[slot], st);
	if (e != cudaSuccess) {
		(void)cudaStreamSynchronize(st); /* the copy may still read the block */
		cache_block_put(l->g->cache, b);
		MCFS_ERR("gpu: copy of %llu rows of %llu bytes (block %llu of %s) to device %d: %s",
			 (unsigned long long)rw->height, (unsigned long long)rw->width,
			 (unsigned long long)p->sp.index, cache_file_path(l->f),
			 l->g->devs[l->dev].ordinal, cudaGetErrorString(e));
		gpu_dev_broken(l->g, l->dev, e);
		return gpu_errno(e) == -ENODEV ? -ENODEV : -EIO;
	}
	l->ring[slot] = b;
	l->ring_index[slot] = p->sp.index;
	l->count++;
	res->bytes += rw->width * rw->height;
	res->blocks++;
	return 0;
}

static int run_copy(struct load *l, gpu_interrupted_fn intr, void *arg, struct gpu_load_result *res)
{
	struct piece p;
	int rc = 0, rc2;

	for (;;) {
		if (intr && intr(arg)) {
			rc = -EINTR;
			break;
		}
		if (l->count == l->window) {
			rc = retire_oldest(l, res);
			if (rc < 0)
				break;
		}
		top_up_prefetch(l);
		rc = next_piece(l->g->cache, l->f, &l->cp, &p);
		if (rc < 0)
			MCFS_ERR("gpu: load of %s: range [%llu, +%llu) is past the end of the "
				 "file (%llu bytes)",
				 cache_file_path(l->f),
				 (unsigned long long)l->cp.r[l->cp.ri].file_off,
				 (unsigned long long)l->cp.r[l->cp.ri].len,
				 (unsigned long long)cache_file_size(l->f));
		if (rc <= 0)
			break;
		rc = copy_one(l, &p, res);
		if (rc < 0)
			break;
	}
	rc2 = gather_drain(l, rc == 0);
	if (rc == 0)
		rc = rc2;
	while (l->count) {
		rc2 = retire_oldest(l, res);
		if (rc == 0)
			rc = rc2;
	}
	return rc;
}

/* Every destination must lie inside the allocation and the caller's dst_size. */
static int check_dst(const struct gpu_ipc *e, const struct gpu_load_req *req)
{
	const struct gpu_range *r = req->ranges;
	uint64_t lim, end;
	unsigned i;

	if (req->dst_offset > e->size)
		return -EOVERFLOW;
	lim = e->size - req->dst_offset;
	if (req->dst_size)
		lim = MCFS_MIN(lim, req->dst_size);
	for (i = 0; i < req->nranges; i++)
		if (gpu_range_check(&r[i], UINT64_MAX, NULL, &end) < 0 || end > lim)
			return -EOVERFLOW;
	return 0;
}

int gpu_load(struct gpu *g, struct cache_file *f, const struct gpu_load_req *req,
	     gpu_interrupted_fn intr, void *intr_arg, struct gpu_load_result *res)
{
	struct load l = {
	    .g = g, .f = f, .pf_last = UINT64_MAX, .stage = {.half = GPU_GATHER_SIZE / 2}};
	unsigned long long t0;
	uint64_t nslots;
	struct gpu_ipc *e;
	cudaError_t err;
	int rc;

	memset(res, 0, sizeof(*res));
	if (!g || !g->ok)
		return -ENODEV;
	rc = gpu_find_dev(g, req);
	if (rc < 0)
		return rc;
	l.dev = rc;
	if (atomic_load(&g->devs[l.dev].broken))
		return -ENODEV;
	if (!gpu_bound(g, req->owner, req->ipc_handle, l.dev)) {
		MCFS_WARN("gpu: load of %s refused: process %d is not bound to the device buffer "
			  "it named (MCFS_IOC_BIND first)",
			  cache_file_path(f), req->owner);
		return -EPERM;
	}
	err = cudaSetDevice(g->devs[l.dev].ordinal); /* FUSE worker threads start with none */
	if (err != cudaSuccess) {
		MCFS_WARN("gpu: cannot use device %d: %s", g->devs[l.dev].ordinal,
			  cudaGetErrorString(err));
		return -ENODEV;
	}
	t0 = mcfs_now_ns();
	rc = gpu_ipc_acquire(g, req->ipc_handle, l.dev, req->owner, &e);
	res->ipc_ns = mcfs_now_ns() - t0;
	if (rc < 0)
		return rc;
	rc = check_dst(e, req);
	if (rc < 0) {
		MCFS_WARN("gpu: load of %s: a destination lies past the caller's buffer "
			  "(allocation %zu bytes, dst_offset %llu, dst_size %llu)",
			  cache_file_path(f), e->size, (unsigned long long)req->dst_offset,
			  (unsigned long long)req->dst_size);
		gpu_ipc_release(g, e, req->close_after);
		return rc;
	}
	rc = gpu_streams_get(g, l.dev, &l.s);
	if (rc == 0) {
		/* The window: GPU loads share a quarter of the RAM tier, so a
		 * load beyond that waits its turn here (cache_gpu_window). */
		nslots = cache_ram_slots(g->cache);
		t0 = mcfs_now_ns();
		rc = cache_gpu_window(
		    g->cache, (unsigned)MCFS_MAX(1, MCFS_MIN((uint64_t)GPU_WINDOW, nslots / 8)),
		    intr, intr_arg, &l.window);
		res->wait_blocks_ns += mcfs_now_ns() - t0;
	}
	if (rc == 0) {
		l.ahead = MCFS_MAX((uint64_t)l.window, nslots / 4);
		l.dbase = (char *)e->base + req->dst_offset;
		cursor_init(&l.cp, req->ranges, req->nranges);
		l.pf = l.cp;
		rc = run_copy(&l, intr, intr_arg, res);
		cache_gpu_window_put(g->cache, l.window);
	}
	if (l.s)
		gpu_streams_put(g, l.s);
	t0 = mcfs_now_ns();
	gpu_ipc_release(g, e, req->close_after);
	res->ipc_ns += mcfs_now_ns() - t0;
	return rc;
}
