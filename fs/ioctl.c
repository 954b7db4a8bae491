/*
 * ioctl.c - the FUSE ioctl operation: MCFS_IOC_LOAD (the GPU fast path),
 * MCFS_IOC_PREFETCH (explicit warm-up through cache_warm) and MCFS_IOC_INFO. The ABI is
 * fs/mcfs_ioctl.h.
 *
 * This file only checks and translates requests: ABI version first (so an
 * old client gets EPROTO on any machine), then flags and ranges against the
 * open file's size, then hands the load to gpu/ (which answers ENODEV when
 * there is no usable GPU). With no ranges, a load copies the safetensors
 * data section, whose offset is read from the file's first 8 bytes.
 *
 * One reply per request: fuse_reply_ioctl() with the whole struct on
 * success, fuse_reply_err() with a positive errno otherwise. A load runs on
 * the FUSE worker thread that received it and polls fuse_req_interrupted()
 * between blocks, so Ctrl-C in the caller stops it with EINTR.
 */
#define _GNU_SOURCE
#include "fs_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "mcfs_ioctl.h"
#include "safetensors.h"

static int interrupted(void *req)
{
	return fuse_req_interrupted(req);
}

/* The data section of a safetensors file: [8 + N, size). */
static int default_range(struct fs_session *s, struct cache_file *f, struct mcfs_range *r)
{
	uint64_t size = cache_file_size(f), doff;
	struct cache_block *b;
	int rc;

	if (size < 8)
		return -EBADMSG;
	rc = cache_block_get(s->cache, f, 0, &b);
	if (rc < 0)
		return rc;
	rc = cache_block_len(b) >= 8
		 ? mcfs_st_data_offset((const unsigned char *)cache_block_data(b), size, &doff)
		 : -EBADMSG;
	cache_block_put(s->cache, b);
	if (rc < 0)
		return rc;
	r->file_off = doff;
	r->len = size - doff;
	r->dst_off = 0;
	return 0;
}

static int check_ranges(const struct mcfs_range *r, unsigned n, uint64_t size)
{
	uint64_t end;
	unsigned i;

	for (i = 0; i < n; i++) {
		if (__builtin_add_overflow(r[i].file_off, r[i].len, &end))
			return -EINVAL;
		if (end > size)
			return -ERANGE;
	}
	return 0;
}

static int do_load(fuse_req_t req, struct fs_handle *h, struct mcfs_load_req *r)
{
	struct fs_session *s = fs_sess(req);
	unsigned long long t0 = mcfs_now_ns();
	const struct mcfs_range *ranges = r->ranges;
	struct gpu_load_result res;
	struct mcfs_range whole;
	unsigned n = r->nranges;
	char rate[32];
	int rc;

	if (r->abi_version != MCFS_IOCTL_ABI) {
		MCFS_INFO("ioctl: load request with ABI %u; this daemon speaks %u", r->abi_version,
			  MCFS_IOCTL_ABI);
		return -EPROTO;
	}
	if ((r->flags & ~MCFS_LOAD_F_ALL) || r->nranges > MCFS_LOAD_MAX_RANGES)
		return -EINVAL;
	r->data_offset = 0;
	if (n == 0) {
		rc = default_range(s, h->file, &whole);
		if (rc < 0)
			return rc;
		r->data_offset = whole.file_off;
		ranges = &whole;
		n = 1;
	}
	rc = check_ranges(ranges, n, cache_file_size(h->file));
	if (rc < 0)
		return rc;
	rc =
	    gpu_load(s->gpu, h->file, r, ranges, n, fuse_req_ctx(req)->pid, interrupted, req, &res);
	if (rc < 0) {
		atomic_fetch_add_explicit(&s->gpu_load_errors, 1, memory_order_relaxed);
		return rc;
	}
	r->bytes = res.bytes;
	r->blocks = res.blocks;
	r->unpinned = res.unpinned;
	r->ns = mcfs_now_ns() - t0;
	atomic_fetch_add_explicit(&s->gpu_loads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gpu_load_bytes, r->bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->gpu_load_ns, r->ns, memory_order_relaxed);
	MCFS_DEBUG("ioctl: loaded %llu bytes of %s in %.3f s (%s, %llu blocks unpinned)",
		   (unsigned long long)r->bytes, cache_file_path(h->file), r->ns / 1e9,
		   mcfs_fmt_rate(r->ns ? r->bytes / (r->ns / 1e9) : 0.0, rate, sizeof(rate)),
		   (unsigned long long)r->unpinned);
	return 0;
}

static int do_prefetch(struct fs_session *s, struct fs_handle *h, struct mcfs_prefetch_req *p)
{
	uint64_t size = cache_file_size(h->file), bs = s->cfg.block_size;
	uint64_t end, first, last, i;
	int rc = 0;

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
	if (end == p->offset)
		return 0;
	first = p->offset / bs;
	last = (end - 1) / bs;
	p->blocks_total = last - first + 1;
	for (i = first; i <= last; i++) {
		rc = cache_warm(s->cache, h->file, i);
		if (rc == -EAGAIN)
			break;
		if (rc < 0)
			return rc;
		/* cache_warm: 0 = started (or already there), > 0 = already cached or loading */
		if (rc > 0)
			p->blocks_cached++;
		else
			p->blocks_started++;
	}
	if (i <= last)
		p->next_offset = MCFS_MAX(i * bs, p->offset);
	return 0;
}

static void do_info(struct fs_session *s, struct mcfs_info *info)
{
	info->daemon_abi = MCFS_IOCTL_ABI;
	info->block_size = s->cfg.block_size;
	gpu_info(s->gpu, info);
	info->ram_bytes = s->cfg.ram_cache / s->cfg.block_size * s->cfg.block_size;
}

void fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
	      size_t out_bufsz)
{
	struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
	struct fs_session *s = fs_sess(req);
	union {
		struct mcfs_load_req load;
		struct mcfs_prefetch_req prefetch;
		struct mcfs_info info;
	} * u;
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
		want = sizeof(u->load);
		break;
	case (unsigned)MCFS_IOC_PREFETCH:
		want = sizeof(u->prefetch);
		break;
	case (unsigned)MCFS_IOC_INFO:
		want = sizeof(u->info);
		break;
	default:
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (in_bufsz != want || out_bufsz != want) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* 12 KiB: kept off the worker thread's stack */
	u = calloc(1, sizeof(*u));
	if (!u) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(u, in_buf, want);
	if (cmd == (unsigned)MCFS_IOC_LOAD) {
		rc = do_load(req, h, &u->load);
	} else if (cmd == (unsigned)MCFS_IOC_PREFETCH) {
		rc = do_prefetch(s, h, &u->prefetch);
	} else {
		do_info(s, &u->info);
		rc = 0;
	}
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, 0, u, want);
	free(u);
}
