/*
 * ioctl.c - the FUSE ioctl operation: MCFS_IOC_LOAD (the GPU fast path),
 * MCFS_IOC_PREFETCH (explicit warm-up through cache_warm) and MCFS_IOC_INFO. The ABI is
 * include/mcfs/mcfs_ioctl.h.
 *
 * This file only checks and translates requests: ABI version first (so an
 * old client gets EPROTO on any machine), then flags and ranges against the
 * open file's size, then hands the load to gpu/ (which answers ENODEV when
 * there is no usable GPU). It is the one place that knows both the wire
 * structs and gpu/'s own (struct gpu_load_req, gpu_info): gpu/ never sees
 * the ABI. With no ranges, a load copies the safetensors data section, which
 * gpu_data_section() finds.
 *
 * Loads are done only into buffers the calling process is bound to
 * (MCFS_IOC_BIND, gpu/bind.c says why and how): the process is the thread
 * group of the FUSE request's thread, read from /proc, so that the threads
 * of one loader share their bindings.
 *
 * One reply per request: fuse_reply_ioctl() with the whole struct on
 * success, fuse_reply_err() with a positive errno otherwise. A load runs on
 * the FUSE worker thread that received it and polls fuse_req_interrupted()
 * between blocks, so Ctrl-C in the caller stops it with EINTR.
 */
#define _GNU_SOURCE
#include "fs_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caller.h"
#include "gpu.h"
#include "mcfs/mcfs_ioctl.h"
#include "cache.h"
#include "cache_ram.h"

/* The wire and gpu/ agree on these sizes, so translating copies no more and
 * no less than the caller sent. */
_Static_assert(GPU_IPC_HANDLE_SIZE == MCFS_IPC_HANDLE_SIZE, "IPC handle size");
_Static_assert(sizeof(((struct mcfs_load_req *)0)->device_uuid) == GPU_UUID_SIZE, "uuid size");
_Static_assert(sizeof(((struct mcfs_info *)0)->reason) == GPU_REASON_SIZE, "reason size");

/* What one ioctl works on: 31 KiB, kept off the worker thread's stack. */
struct ioctl_buf {
	union {
		struct mcfs_load_req load;
		struct mcfs_prefetch_req prefetch;
		struct mcfs_info info;
		struct mcfs_bind_req bind;
	} u;					       /* the wire struct, copied in and back out */
	struct gpu_range ranges[MCFS_LOAD_MAX_RANGES]; /* a load's, translated */
};

static int interrupted(void *req)
{
	return fuse_req_interrupted(req);
}

static int check_ranges(const struct gpu_range *r, unsigned n, uint64_t size)
{
	unsigned i;
	int rc;

	for (i = 0; i < n; i++) {
		rc = gpu_range_check(&r[i], size, NULL, NULL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The wire request @w (checked) as gpu/'s request, over @ranges (filled). */
static void to_gpu_req(const struct mcfs_load_req *w, struct gpu_range *ranges, unsigned n,
		       pid_t owner, struct gpu_load_req *g)
{
	static const uint8_t zero[sizeof(w->device_uuid)];

	memset(g, 0, sizeof(*g));
	memcpy(g->ipc_handle, w->ipc_handle, sizeof(g->ipc_handle));
	/* the ABI's "all zero: use device" */
	g->by_uuid = memcmp(w->device_uuid, zero, sizeof(zero)) != 0;
	memcpy(g->device_uuid, w->device_uuid, sizeof(g->device_uuid));
	g->device = w->device;
	g->dst_offset = w->dst_offset;
	g->dst_size = w->dst_size;
	g->close_after = (w->flags & MCFS_LOAD_F_CLOSE) != 0;
	g->owner = owner;
	g->ranges = ranges;
	g->nranges = n;
}

static int do_bind(fuse_req_t req, struct fs_session *s, struct mcfs_bind_req *b)
{
	static const uint8_t zero[sizeof(b->device_uuid)];
	bool prove = b->flags & MCFS_BIND_F_PROVE, bound = false;
	struct gpu_load_req g;
	int rc;

	if (b->abi_version != MCFS_IOCTL_ABI)
		return -EPROTO;
	if (b->flags & ~MCFS_BIND_F_PROVE)
		return -EINVAL;
	memset(&g, 0, sizeof(g));
	memcpy(g.ipc_handle, b->ipc_handle, sizeof(g.ipc_handle));
	g.by_uuid = memcmp(b->device_uuid, zero, sizeof(zero)) != 0;
	memcpy(g.device_uuid, b->device_uuid, sizeof(g.device_uuid));
	g.device = b->device;
	g.dst_offset = b->offset;
	g.owner = fs_caller_process(fuse_req_ctx(req)->pid);
	if (g.owner <= 0) {
		MCFS_WARN("ioctl: bind request from thread %d, whose process the daemon cannot "
			  "see (another pid namespace?): refused",
			  (int)fuse_req_ctx(req)->pid);
		return -EPERM;
	}
	_Static_assert(sizeof(b->nonce) == GPU_BIND_NONCE_SIZE, "nonce size");
	rc = gpu_bind(s->gpu, &g, prove, b->nonce, &bound);
	b->bound = bound;
	if (prove)
		memset(b->nonce, 0, sizeof(b->nonce));
	return rc;
}

/* @ranges: room for MCFS_LOAD_MAX_RANGES, where the request's go. */
static int do_load(fuse_req_t req, struct fs_handle *h, struct mcfs_load_req *r,
		   struct gpu_range *ranges)
{
	struct fs_session *s = fs_sess(req);
	unsigned long long t0 = mcfs_now_ns();
	struct gpu_load_result res;
	struct gpu_load_req g;
	uint64_t data_offset = 0;
	unsigned n = r->nranges, i;
	char rate[32];
	int rc;

	if (r->abi_version != MCFS_IOCTL_ABI) {
		MCFS_INFO("ioctl: load request with ABI %u; this daemon speaks %u", r->abi_version,
			  MCFS_IOCTL_ABI);
		return -EPROTO;
	}
	if ((r->flags & ~MCFS_LOAD_F_ALL) || r->nranges > MCFS_LOAD_MAX_RANGES)
		return -EINVAL;
	if (n == 0) {
		rc = gpu_data_section(s->cache, h->file, &ranges[0]);
		if (rc < 0)
			return rc;
		data_offset = ranges[0].file_off;
		n = 1;
	} else {
		for (i = 0; i < n; i++) {
			ranges[i].file_off = r->ranges[i].file_off;
			ranges[i].len = r->ranges[i].len;
			ranges[i].dst_off = r->ranges[i].dst_off;
			ranges[i].count = r->ranges[i].count;
			ranges[i].src_stride = r->ranges[i].src_stride;
		}
	}
	rc = check_ranges(ranges, n, cache_file_size(h->file));
	if (rc < 0)
		return rc;
	to_gpu_req(r, ranges, n, fs_caller_process(fuse_req_ctx(req)->pid), &g);
	rc = gpu_load(s->gpu, h->file, &g, interrupted, req, &res);
	if (rc < 0) {
		atomic_fetch_add_explicit(&s->gpu_load_errors, 1, memory_order_relaxed);
		return rc;
	}
	r->bytes = res.bytes;
	r->blocks = res.blocks;
	r->unpinned = res.unpinned;
	r->data_offset = data_offset;
	r->ns = mcfs_now_ns() - t0;
	atomic_fetch_add_explicit(&s->gpu_loads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gpu_load_bytes, r->bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gpu_load_ns, r->ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gpu_rows_gathered, res.gathered, memory_order_relaxed);
	MCFS_DEBUG("ioctl: loaded %llu bytes of %s in %.3f s (%s; %u ranges; waited %.3f s for "
		   "blocks, %.3f s for copies, %.3f s for the IPC mapping; %llu blocks unpinned; "
		   "%llu cut rows gathered)",
		   (unsigned long long)r->bytes, cache_file_path(h->file), r->ns / 1e9,
		   mcfs_fmt_rate(r->ns ? r->bytes / (r->ns / 1e9) : 0.0, rate, sizeof(rate)), n,
		   res.wait_blocks_ns / 1e9, res.wait_copies_ns / 1e9, res.ipc_ns / 1e9,
		   (unsigned long long)r->unpinned, (unsigned long long)res.gathered);
	return 0;
}

/*
 * Warms the blocks of [offset, end) in order until the warm-up budget says
 * -EAGAIN, then goes on walking only to count them: blocks_total is the whole
 * range's, next_offset where the client calls again. cache_span() cuts the
 * range, so the block arithmetic stays in cache/.
 */
static int do_prefetch(struct fs_session *s, struct fs_handle *h, struct mcfs_prefetch_req *p)
{
	uint64_t size = cache_file_size(h->file), end, pos;
	struct cache_span sp;
	bool full = false;
	int rc;

	if (p->abi_version != MCFS_IOCTL_ABI)
		return -EPROTO;
	if (p->flags)
		return -EINVAL;
	if (p->length == 0)
		end = size;
	else if (__builtin_add_overflow(p->offset, p->length, &end))
		return -EINVAL;
	if (p->offset > size || end > size)
		return -ERANGE;
	p->blocks_started = p->blocks_cached = p->blocks_total = 0;
	p->next_offset = end;
	for (pos = p->offset; pos < end; pos += sp.len) {
		rc = cache_span(s->cache, h->file, pos, end - pos, &sp);
		if (rc < 0)
			return rc;
		p->blocks_total++;
		if (full)
			continue;
		rc = cache_warm(s->cache, h->file, sp.index);
		if (rc == -EAGAIN) {
			full = true;
			p->next_offset = pos; /* this block's start, or offset for the first */
			continue;
		}
		if (rc < 0)
			return rc;
		/* cache_warm: 0 = started (or already there), > 0 = already cached or loading */
		if (rc > 0)
			p->blocks_cached++;
		else
			p->blocks_started++;
	}
	return 0;
}

static void do_info(struct fs_session *s, struct mcfs_info *info)
{
	struct gpu_info gi;
	void *base;
	size_t len;

	gpu_info(s->gpu, &gi);
	cache_ram_region(s->cache, &base, &len); /* the RAM tier: its slots' bytes */
	info->daemon_abi = MCFS_IOCTL_ABI;
	info->gpu_ok = gi.ok;
	info->devices = gi.devices;
	info->block_size = cache_block_size(s->cache);
	info->ram_bytes = len;
	info->pinned_bytes = gi.pinned_bytes;
	snprintf(info->reason, sizeof(info->reason), "%s", gi.reason);
}

void fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
	      size_t out_bufsz)
{
	struct fs_session *s = fs_sess(req);
	struct fs_handle *h;
	struct ioctl_buf *buf;
	size_t want;
	int rc;

	(void)ino;
	(void)arg;
	if (flags & FUSE_IOCTL_DIR) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	switch (cmd) {
	case (unsigned)MCFS_IOC_LOAD:
		want = sizeof(buf->u.load);
		break;
	case (unsigned)MCFS_IOC_PREFETCH:
		want = sizeof(buf->u.prefetch);
		break;
	case (unsigned)MCFS_IOC_INFO:
		want = sizeof(buf->u.info);
		break;
	case (unsigned)MCFS_IOC_BIND:
		want = sizeof(buf->u.bind);
		break;
	default:
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (in_bufsz != want || out_bufsz != want) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = calloc(1, sizeof(*buf));
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(&buf->u, in_buf, want);
	if (cmd == (unsigned)MCFS_IOC_LOAD || cmd == (unsigned)MCFS_IOC_PREFETCH) {
		h = fs_handle_of(s, fi); /* NULL for a directory's */
		if (!h)
			rc = -EBADF;
		else if (cmd == (unsigned)MCFS_IOC_LOAD)
			rc = do_load(req, h, &buf->u.load, buf->ranges);
		else
			rc = do_prefetch(s, h, &buf->u.prefetch);
		if (h)
			fs_handle_done(h);
	} else if (cmd == (unsigned)MCFS_IOC_BIND) {
		rc = do_bind(req, s, &buf->u.bind);
	} else {
		do_info(s, &buf->u.info);
		rc = 0;
	}
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, 0, &buf->u, want);
	free(buf);
}
