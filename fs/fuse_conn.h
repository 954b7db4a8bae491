/*
 * fuse_conn.h - what the FUSE connection negotiates beyond libfuse's
 * defaults: requests over 1 MiB and FUSE over io_uring. Not a public header.
 *
 * Each feature needs three parties: the libfuse mcfs was built against
 * (cmake/Libfuse.cmake defines MCFS_FUSE_MAX_PAGES, MCFS_FUSE_IO_URING),
 * the kernel, and what root allowed at run time:
 *   - requests over 1 MiB: libfuse >= 3.17.2 sizes its buffers from
 *     conn->max_write and asks for max_pages to match; the kernel grants at
 *     most /proc/sys/fs/fuse/max_pages_limit pages (sysctl, default 256 =
 *     1 MiB; since 6.13, before that the limit is 256 and fixed);
 *   - io_uring: libfuse 3.18 built with liburing; the kernel offers it only
 *     while /sys/module/fuse/parameters/enable_uring is Y.
 * mcfs never writes those two knobs: root sets them (deploy/README.md).
 *
 * direct_io opens of files not complete in the cache (cold_direct_io) need
 * the kernel to let an mmap of such an open through the page cache
 * (FUSE_CAP_DIRECT_IO_ALLOW_MMAP: libfuse >= 3.16, kernel >= 6.6); without
 * it an mmap would fail (ENODEV), so they are not used.
 *
 * Passthrough (libfuse >= 3.17, MCFS_FUSE_PASSTHROUGH) needs CAP_SYS_ADMIN
 * for the backing ioctl, so a daemon without it never asks (and keeps the
 * mount's full stacking depth); the reads then go through the cache.
 *
 * Flow: fs_conn_args() (main.c, before fuse_session_new) reads the knobs and
 * decides; fs_conn_init() (ops.c's init, on the FUSE INIT request) asks the
 * kernel; fs_conn_note_req() records how a request arrived; fs_conn_check()
 * (main.c's ready thread, once the mount answers) logs what took effect.
 */
#ifndef MCFS_FS_FUSE_CONN_H
#define MCFS_FS_FUSE_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mcfs.h"

struct fs_session;
struct fuse_args;
struct fuse_conn_info;
struct fuse_req;

/* In struct fs_session. Written before the loop runs, read-only after, but the atomics. */
struct fs_conn {
	unsigned max_pages_limit;  /* /proc/sys/fs/fuse/max_pages_limit, or the fixed 256 */
	bool uring_kernel;	   /* enable_uring was Y at start-up */
	bool uring_want;	   /* mcfs asked libfuse for io_uring (-o io_uring) */
	atomic_bool uring_offered; /* INIT: the kernel offered FUSE_OVER_IO_URING */
	uint32_t max_request;	   /* bytes asked for in INIT (max_write -> max_pages) */
	uint32_t max_granted;	   /* bytes per READ at most: max_request within the limit */
	atomic_bool uring_seen;	   /* a request came over io_uring (fs_conn_note_req) */
	bool pt_want;		   /* mcfs will ask for passthrough (fs_conn_args) */
	const char *pt_why;	   /* why not, when !pt_want: static text */
	atomic_bool pt_on;	   /* INIT agreed passthrough: opens may use it */
	/* INIT agreed FUSE_DIRECT_IO_ALLOW_MMAP and cold_direct_io is auto: opens
	 * of files not complete may be direct_io (an mmap of one still works). */
	atomic_bool cold_dio;
};

/*
 * Reads the kernel's knobs and decides io_uring from cfg.io_uring; adds
 * libfuse's options for it to @args. Returns 0, or -EINVAL after logging why
 * when io_uring=on cannot be had (libfuse without it, or enable_uring off).
 */
MCFS_MUST_CHECK int fs_conn_args(struct fs_session *s, struct fuse_args *args);

/* On FUSE INIT: asks for max_request and io_uring as decided. Can't fail. */
void fs_conn_init(struct fs_session *s, struct fuse_conn_info *conn);

/* Called with the request in hand: notes whether it came over io_uring. */
void fs_conn_note_req(struct fs_session *s, struct fuse_req *req);

/*
 * Once the mount answered a stat and a request that reaches the daemon (the
 * ready probe in fs/main.c makes both, from a child process), so that the
 * io_uring state is seen: logs what took effect (and when read_ahead_kb,
 * which bounds buffered READs, is below the granted request size). Returns
 * 0, or -EPROTO after logging why when io_uring=on did not take effect.
 */
MCFS_MUST_CHECK int fs_conn_check(struct fs_session *s);

/* What took effect is in the counter table too (FS row passthrough) as
 * well: fs_conn_init() sets it. */
/* What took effect is in the counter table too (cache/counters.h, FS rows
 * fuse_max_request and fuse_io_uring): fs_conn_init() and fs_conn_note_req()
 * set them. */

/* One line for `mcfs --version`: libfuse's version and what this build can negotiate. */
void fs_conn_print_version(FILE *fp);

#endif
