/*
 * fs_int.h - state shared by the files of fs/: the session, inodes and open
 * file handles. Not a public header.
 *
 * The only global mutable state of the daemon is the session: main() creates
 * one struct fs_session, passes it to fuse_session_new() as userdata, and every
 * operation fetches it with fuse_req_userdata(). Signal handlers only set
 * session->stop (libfuse's own handlers end the loop).
 */
#ifndef MCFS_FS_INT_H
#define MCFS_FS_INT_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cache.h"
#include "counters.h"
#include "cfg.h"
#include "fuse_conn.h"
#include "handover.h"
#include "push.h"

struct gpu;
struct fs_inodes;

#define FS_SESSION_COUNTER(src, field, ...) FS_SESSION_COUNTER_##src(field)
#define FS_SESSION_COUNTER_CACHE(field)
#define FS_SESSION_COUNTER_DISK(field)
#define FS_SESSION_COUNTER_FS(field) _Atomic uint64_t field;

/*
 * Open files' and directories' handles by id: fi->fh is an id, not a
 * pointer, so that a new daemon resuming the connection (handover.h) can
 * give the kernel's handles their meaning back. Lookups take no lock: a
 * chunk, once made, stays until exit, and an entry is set (release) before
 * the reply that gives its id to the kernel. Ids are reused after release.
 */
#define FS_HTAB_CHUNK 1024u
#define FS_HTAB_CHUNKS 4096u /* 4 Mi handles open at once */
struct fs_hslot {
	_Atomic(uintptr_t) p; /* a struct fs_handle *, or a struct fs_listing * | 1 */
};
struct fs_htab {
	_Atomic(struct fs_hslot *) chunks[FS_HTAB_CHUNKS];
	uint64_t next;	/* ids from 1; under handles_lock */
	uint64_t *free; /* released ids, reused first */
	size_t nfree, cap;
};

struct fs_session {
	struct cfg cfg;		  /* validated once in main(); read-only afterwards */
	struct cache *cache;	  /* the cache: the only door to the store */
	struct gpu *gpu;	  /* the GPU fast path; answers -ENODEV without a device */
	struct fs_inodes *inodes; /* inode table and metadata cache (fs/inode.c) */
	struct fuse_session *se;
	struct fs_conn conn;	      /* what FUSE INIT negotiated (fuse_conn.c) */
	atomic_int stop;	      /* set by signal handlers */
	uint64_t started_ns;	      /* mcfs_now_ns() at mount */
	pthread_mutex_t handles_lock; /* guards handles */
	struct fs_handle *handles;    /* open files, so that teardown frees what the
					 kernel never released (unmounted with files open) */
	struct fs_htab htab;	      /* fi->fh -> handle; ids under handles_lock */
	struct fs_pusher push;	      /* cold files pushed into the page cache (push.c) */
	struct fs_handover ho;	      /* what a new daemon resumes from (handover.c) */
	pthread_mutex_t opens_lock;   /* guards the two below (open_whole.c) */
	pthread_cond_t opens_idle;    /* opens_waiting went to 0 */
	unsigned opens_waiting;	      /* opens answered by an opener thread, not yet answered */
	bool opens_closed;	      /* stopping: no new opener thread */
	/* fs/'s counters, one relaxed atomic per FS row of CACHE_COUNTERS
	 * (cache/counters.h: gpu_loads...). */
	CACHE_COUNTERS(FS_SESSION_COUNTER)
};

/* One open file: what fi->fh points to. Created by open, freed by release. */
struct fs_handle {
	uint64_t id; /* fi->fh: its id in the session's handle table */
	fuse_ino_t ino;
	struct cache_file *file;       /* reference held for the handle's life */
	struct cache_stream *stream;   /* readahead state of this open */
	bool keep_cache, direct_io;    /* how it uses the page cache (fs_open_mode) */
	bool passthrough;	       /* the kernel reads its backing file (fs_open_mode) */
	bool push_ok;		       /* a cold page-cache open: its inode may be pushed */
	struct fs_push *push;	       /* the push it joined (push.c), or NULL */
	struct fs_handle *prev, *next; /* session->handles, guarded by handles_lock */
	atomic_uint order;	       /* see fs_order_before() */
};

/*
 * The kernel orders the requests on one open file or directory (open, then
 * reads or ioctls, then release, each after the reply of the one it follows),
 * but over io_uring they arrive on different rings' threads with no lock in
 * common. An atomic counter per object makes that order visible to the C
 * memory model (and to ThreadSanitizer): each request counts itself out
 * (release) when done with the object, before its reply, and each later one
 * reads the count (acquire) before touching it. The counts of all earlier
 * requests form one release sequence, so the reading request sees everything
 * any of them wrote, and release frees nothing a request still reads.
 */
static inline void fs_order_after(atomic_uint *order)
{
	(void)atomic_load_explicit(order, memory_order_acquire);
}

static inline void fs_order_before(atomic_uint *order)
{
	atomic_fetch_add_explicit(order, 1, memory_order_release);
}

/* The handle of id @fh, or NULL: none (a release came, or a handle the
 * last daemon could not resume), or a directory's. */
struct fs_handle *fs_handle_by_id(struct fs_session *s, uint64_t fh);

/* The handle of an open file's request, or NULL (fs_handle_by_id), paired
 * with fs_handle_done() (but in release, which frees it). */
static inline struct fs_handle *fs_handle_of(struct fs_session *s, const struct fuse_file_info *fi)
{
	struct fs_handle *h = fs_handle_by_id(s, fi->fh);

	if (h)
		fs_order_after(&h->order);
	return h;
}

/* The request no longer touches the handle: its reply may come next. */
static inline void fs_handle_done(struct fs_handle *h)
{
	fs_order_before(&h->order);
}

/* Frees the handles the kernel never released, at teardown (fs/ops.c). */
void fs_handles_free_all(struct fs_session *s);

/*
 * OPEN of @ino with @h (its ino set, nothing else): decides the open's mode
 * (cached, direct_io or passthrough) and answers @req, @h freed on an error
 * (fs/ops.c). Callers without O_NONBLOCK hold the inode's turn
 * (fs_inode_open_begin()).
 */
void fs_open_reply(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		   struct fs_handle *h);

/*
 * OPEN without O_NONBLOCK (fs/open_whole.c): a file cold_whole fetches whole
 * first is answered by a thread of its own once it is, so that the FUSE
 * worker goes back to other requests; any other in the worker. Can't fail
 * (errors are the open's answer).
 */
void fs_open_waiting(struct fs_session *s, fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi, struct fs_handle *h);

/* At teardown, before the handles and the session go: no new opener thread,
 * the whole fetches end, and every opener has answered. Can't fail. */
void fs_open_drain(struct fs_session *s);

/*
 * Resume (handover.c): open file handle @fh of inode @ino, of version @a, as
 * the last daemon opened it (@flags FS_HO_*, @backing_id for passthrough);
 * open directory handle @fh of @ino. 0 or -errno.
 */
MCFS_MUST_CHECK int fs_handle_resume(struct fs_session *s, uint64_t fh, uint64_t ino,
				     unsigned flags, int backing_id, const struct cache_attr *a);
MCFS_MUST_CHECK int fs_dir_resume(struct fs_session *s, uint64_t fh, uint64_t ino);

static inline struct fs_session *fs_sess(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The low-level operations table (fs/ops.c). */
extern const struct fuse_lowlevel_ops fs_ops;

/* FUSE ioctl: the GPU fast path and prefetch requests (fs/ioctl.c). */
void fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
	      size_t out_bufsz);

/* FUSE getxattr and listxattr: counters, a file's cached bytes and version, and the
 * admin's unlisted names that act when read (fs/xattr.c). */
void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);

#endif
