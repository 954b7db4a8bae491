/*
 * fuse_conn.c - requests over 1 MiB and FUSE over io_uring: deciding,
 * negotiating in INIT, and saying what took effect (see fuse_conn.h).
 *
 * Why larger requests: every FUSE READ costs a round trip through the kernel
 * and a thread wake-up; at 1 MiB a 10 GB model is 10,000 of them. With
 * max_pages matched to the 8 MiB block, one READ is one block, answered from
 * the block's slot in one piece.
 *
 * Why io_uring: requests and replies go through per-CPU rings shared with the
 * kernel instead of read()/writev() on /dev/fuse, one system call fewer per
 * request and no wake-up of a thread on another CPU. libfuse runs one ring
 * thread per CPU; our handlers then run there. Its cost in memory: each ring
 * entry (libfuse: 8 per CPU) has a buffer of the request size, touched only
 * where replies fill it, so the pages used follow the CPUs that read.
 *
 * What this file refuses to do: write /proc/sys/fs/fuse/max_pages_limit or
 * /sys/module/fuse/parameters/enable_uring. Both are system-wide; root sets
 * them on purpose, and the log says which one to set when it would help.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "cache_disk.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_PAGES_LIMIT_PATH "/proc/sys/fs/fuse/max_pages_limit"
#define ENABLE_URING_PATH "/sys/module/fuse/parameters/enable_uring"
/* The kernel's limit before max_pages_limit became a sysctl (6.13), and its default since. */
#define MAX_PAGES_FIXED 256u
/* libfuse's own request size below 3.17.2, and the most it honours there: 256 pages. */
#define LIBFUSE_DEFAULT_REQUEST (1u << 20)

static unsigned read_max_pages_limit(void)
{
	char buf[32];
	unsigned long v;
	char *end;

	if (mcfs_read_line(MAX_PAGES_LIMIT_PATH, buf, sizeof(buf)) < 0)
		return MAX_PAGES_FIXED;
	v = strtoul(buf, &end, 10);
	return end != buf && v > 0 && v <= 65535 ? (unsigned)v : MAX_PAGES_FIXED;
}

static bool read_enable_uring(void)
{
	char buf[8];

	return mcfs_read_line(ENABLE_URING_PATH, buf, sizeof(buf)) == 0 &&
	       (buf[0] == 'Y' || buf[0] == 'y' || buf[0] == '1');
}

/* The request size mcfs would like: max_request, 0 meaning the block (one READ, one block). */
static uint64_t wanted_request(const struct fs_session *s)
{
	return s->cfg.max_request ? s->cfg.max_request : s->cfg.block_size;
}

/* What to ask for: the wanted size within what libfuse and the kernel allow, in whole pages. */
static uint32_t request_size(const struct fs_session *s, unsigned limit_pages)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), want = wanted_request(s);
	uint64_t cap = LIBFUSE_DEFAULT_REQUEST;

#ifdef MCFS_FUSE_MAX_PAGES
	cap = (uint64_t)limit_pages * page;
#else
	(void)limit_pages;
#endif
	want = MCFS_MIN(want, cap);
	return (uint32_t)(want - want % page);
}

#ifdef MCFS_FUSE_PASSTHROUGH
/* True if this process may use the kernel's backing ioctl (CAP_SYS_ADMIN, effective). */
static bool have_sys_admin(void)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0)
		return false;
	return (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}
#endif

/* Decides whether to ask for passthrough; sets pt_want, or pt_why. */
static void decide_passthrough(struct fs_session *s)
{
	struct fs_conn *c = &s->conn;

	c->pt_want = false;
	c->pt_why = "";
	if (strcmp(s->cfg.passthrough, "off") == 0) {
		c->pt_why = "passthrough=off";
		return;
	}
#ifndef MCFS_FUSE_PASSTHROUGH
	c->pt_why = "libfuse before 3.17";
#else
	if (!have_sys_admin())
		c->pt_why = "the daemon lacks CAP_SYS_ADMIN (not root)";
	else if (!cache_backing_enabled(s->cache))
		c->pt_why = "no disk tier to hold backing files";
	else
		c->pt_want = true;
#endif
}

int fs_conn_args(struct fs_session *s, struct fuse_args *args)
{
	struct fs_conn *c = &s->conn;
	const char *mode = s->cfg.io_uring;

	c->max_pages_limit = read_max_pages_limit();
	c->max_request = request_size(s, c->max_pages_limit);
	c->max_granted = c->max_request;
	atomic_store_explicit(&s->fuse_max_request, c->max_granted, memory_order_relaxed);
	c->uring_kernel = read_enable_uring();
	c->uring_want = false;
	decide_passthrough(s);
	if (strcmp(mode, "off") == 0)
		return 0;
#ifndef MCFS_FUSE_IO_URING
	if (strcmp(mode, "on") == 0) {
		MCFS_ERR("io_uring=on: this mcfs was built against libfuse %s, without FUSE over "
			 "io_uring (it needs libfuse 3.18: deploy/build-libfuse.sh builds it)",
			 fuse_pkgversion());
		return -EINVAL;
	}
	(void)args;
	return 0;
#else
	if (!c->uring_kernel) {
		if (strcmp(mode, "on") == 0) {
			MCFS_ERR(
			    "io_uring=on: the kernel's FUSE over io_uring is off (%s is not Y); "
			    "root turns it on with `echo Y > %s`",
			    ENABLE_URING_PATH, ENABLE_URING_PATH);
			return -EINVAL;
		}
		return 0;
	}
	c->uring_want = true;
	return fuse_opt_add_arg(args, "-oio_uring") < 0 ? -ENOMEM : 0;
#endif
}

void fs_conn_init(struct fs_session *s, struct fuse_conn_info *conn)
{
	struct fs_conn *c = &s->conn;

	/* max_write sets max_pages in the INIT reply (libfuse: max_write / page size). */
	conn->max_write = c->max_request;
#ifdef MCFS_FUSE_IO_URING
	/* Atomic: the ready thread reads it, ordered after INIT only through the kernel. */
	atomic_store(&c->uring_offered, (conn->capable & FUSE_CAP_OVER_IO_URING) != 0);
	/* libfuse wants it by default once -o io_uring or FUSE_URING_ENABLE is given. */
	if (c->uring_want && atomic_load(&c->uring_offered))
		conn->want |= FUSE_CAP_OVER_IO_URING;
	else
		conn->want &= ~FUSE_CAP_OVER_IO_URING;
#endif
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	if (strcmp(s->cfg.cold_direct_io, "off") != 0 && !s->cfg.cold_push &&
	    (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)) {
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
		atomic_store(&c->cold_dio, true);
	}
#endif
#ifdef MCFS_FUSE_PASSTHROUGH
	/* Backing files live on a plain filesystem: FUSE_BACKING_STACKED_UNDER (0),
	 * so this mount may itself sit under overlayfs. */
	if (c->pt_want && (conn->capable & FUSE_CAP_PASSTHROUGH)) {
		conn->want |= FUSE_CAP_PASSTHROUGH;
		conn->max_backing_stack_depth = 0;
		atomic_store(&c->pt_on, true);
		atomic_store_explicit(&s->passthrough, 1, memory_order_relaxed);
	} else {
		conn->want &= ~FUSE_CAP_PASSTHROUGH;
		if (c->pt_want)
			c->pt_why = "the kernel did not offer it (CONFIG_FUSE_PASSTHROUGH)";
	}
#endif
}

void fs_conn_note_req(struct fs_session *s, struct fuse_req *req)
{
#ifdef MCFS_FUSE_IO_URING
	if (fuse_req_is_uring(req) &&
	    !atomic_load_explicit(&s->conn.uring_seen, memory_order_relaxed)) {
		atomic_store_explicit(&s->conn.uring_seen, true, memory_order_relaxed);
		atomic_store_explicit(&s->fuse_io_uring, 1, memory_order_relaxed);
	}
#else
	(void)s, (void)req;
#endif
}

/* How opens of files not complete read: pushed, "direct_io", or "page cache (why)". */
static const char *cold_state(const struct fs_session *s)
{
	if (s->cfg.cold_push)
		return "page cache, pushed ahead of their reader (cold_push)";
	if (atomic_load(&s->conn.cold_dio))
		return "direct_io";
	if (strcmp(s->cfg.cold_direct_io, "off") == 0)
		return "page cache (cold_direct_io=off)";
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	return "page cache (the kernel does not allow mmap of direct_io opens)";
#else
	return "page cache (libfuse before 3.16 cannot allow mmap of direct_io opens)";
#endif
}

/* "on", or "off (why)", once the mount has answered the ready probe's request. */
static const char *uring_state(const struct fs_session *s)
{
	const struct fs_conn *c = &s->conn;

	if (atomic_load_explicit(&c->uring_seen, memory_order_relaxed))
		return "on";
	if (c->uring_want && atomic_load(&c->uring_offered))
		return "off (libfuse could not start its rings: see its message above)";
	if (c->uring_want)
		return "off (the kernel did not offer it)";
	if (strcmp(s->cfg.io_uring, "off") == 0)
		return "off (io_uring=off)";
#ifdef MCFS_FUSE_IO_URING
	return "off (" ENABLE_URING_PATH " is not Y)";
#else
	return "off (libfuse before 3.18)";
#endif
}

int fs_conn_check(struct fs_session *s)
{
	struct fs_conn *c = &s->conn;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), want = wanted_request(s);
	const char *uring;
	char a[32], b[32];

	/*
	 * The ready probe (fs/main.c) has made a request of its own: the
	 * kernel holds every request after INIT until the rings are
	 * registered when io_uring was agreed (fuse_block_alloc()), so that
	 * one came over a ring if any will.
	 */
	uring = uring_state(s);
	MCFS_INFO("FUSE: libfuse %s, requests up to %s (asked %s; %s %u pages), io_uring %s, "
		  "passthrough %s%s%s, cold opens %s",
		  fuse_pkgversion(), mcfs_fmt_bytes(c->max_granted, a, sizeof(a)),
		  mcfs_fmt_bytes(want, b, sizeof(b)), MAX_PAGES_LIMIT_PATH, c->max_pages_limit,
		  uring, atomic_load(&c->pt_on) ? "on" : "off (",
		  atomic_load(&c->pt_on) ? "" : c->pt_why, atomic_load(&c->pt_on) ? "" : ")",
		  cold_state(s));
#ifdef MCFS_FUSE_MAX_PAGES
	if (c->max_granted < want - want % page)
		MCFS_INFO(
		    "FUSE: root can allow %s requests with `sysctl fs.fuse.max_pages_limit=%llu` "
		    "before mounting",
		    b, (unsigned long long)((want + page - 1) / page));
#else
	(void)page;
#endif
	/* The readahead window bounds buffered READs; 0 leaves the kernel's 128 KiB. */
	if ((uint64_t)(s->cfg.read_ahead_kb ? s->cfg.read_ahead_kb : 128) * 1024 < c->max_granted)
		MCFS_INFO("FUSE: read_ahead_kb=%u keeps buffered reads below the %s requests "
			  "granted (O_DIRECT reads use them whole)",
			  s->cfg.read_ahead_kb, a);
	if (strcmp(s->cfg.io_uring, "on") == 0 &&
	    !atomic_load_explicit(&c->uring_seen, memory_order_relaxed)) {
		MCFS_ERR("io_uring=on, but requests come through /dev/fuse: %s", uring);
		return -EPROTO;
	}
	return 0;
}

void fs_conn_print_version(FILE *fp)
{
	fprintf(fp,
		"libfuse %s (built with %d.%d): requests over 1 MiB %s, io_uring %s, "
		"passthrough %s, direct_io cold opens %s\n",
		fuse_pkgversion(), FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION,
#ifdef MCFS_FUSE_MAX_PAGES
		"yes",
#else
		"no",
#endif
#ifdef MCFS_FUSE_IO_URING
		"yes",
#else
		"no",
#endif
#ifdef MCFS_FUSE_PASSTHROUGH
		"yes",
#else
		"no",
#endif
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
		"yes"
#else
		"no"
#endif
	);
}
