/*
 * ops.c - the FUSE low-level operations: a read-only view of the store.
 *
 * Names and attributes come from the inode table (inode.c); bytes come from
 * the block cache. A read inside one block is answered straight from the
 * block's slot (fuse_reply_data with the slot's memory: one writev, no extra
 * copy) while a reference pins the block; a read that straddles blocks holds
 * one block at a time and copies into a reply buffer, so a reader never
 * holds two slots and readers can't deadlock over a small RAM tier.
 * Every write-like operation answers EROFS. One reply per request.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "inode.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define XATTR_STATS "user.mcfs.stats"
#define XATTR_CACHED "user.mcfs.cached"
#define XATTR_VERSION "user.mcfs.version"
/*
 * Reading this (unlisted) name of a file drops the file's cached blocks from
 * both tiers and answers the bytes dropped: `mcfs evict`. A read, not a
 * setxattr, because the mount is read-only and the VFS refuses setxattr on
 * it (EROFS) before we see it. Unlisted, so `getfattr -d` never triggers it;
 * a size probe (size 0) drops nothing; and only root or the daemon's own
 * user may drop blocks (EPERM for others: with allow_other, a pod reading a
 * model must not be able to evict it for every other pod).
 */
#define XATTR_EVICT "user.mcfs.evict"

/* A random read's partial fetch is aligned to pages: O_DIRECT needs it. */
#define READ_ALIGN 4096u

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_session *s = userdata;

	/* Many 1 MiB async reads in flight keep the fetch threads busy. */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if (s->cfg.splice) {
		conn->want |= conn->capable &
			      (FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_SPLICE_READ);
	} else {
		conn->want &=
		    ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_SPLICE_READ);
	}
	fs_conn_init(s, conn); /* requests over 1 MiB, io_uring */
	MCFS_DEBUG("fuse init: proto %u.%u max_write %u max_readahead %u want 0x%x",
		   conn->proto_major, conn->proto_minor, conn->max_write, conn->max_readahead,
		   conn->want);
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int rc = fs_inode_lookup(fs_sess(req), parent, name, &e);

	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_entry(req, &e);
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_inode_forget(fs_sess(req), ino, nlookup);
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	size_t i;

	for (i = 0; i < count; i++)
		fs_inode_forget(fs_sess(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct stat st;
	int rc = fs_inode_getattr(s, ino, &st);

	(void)fi;
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, s->cfg.attr_ttl);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char target[4096];
	int rc = fs_inode_readlink(fs_sess(req), ino, target, sizeof(target));

	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_readlink(req, target);
}

static void handle_link(struct fs_session *s, struct fs_handle *h)
{
	pthread_mutex_lock(&s->handles_lock);
	h->next = s->handles;
	h->prev = NULL;
	if (s->handles)
		s->handles->prev = h;
	s->handles = h;
	pthread_mutex_unlock(&s->handles_lock);
}

/* Unlinks and frees @h: its stream and its file reference. */
static void handle_free(struct fs_session *s, struct fs_handle *h)
{
	struct fs_open_mode mode = {h->keep_cache, h->direct_io};

	pthread_mutex_lock(&s->handles_lock);
	if (h->prev)
		h->prev->next = h->next;
	else if (s->handles == h)
		s->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&s->handles_lock);
	fs_inode_close(s, h->ino, &mode);
	cache_stream_free(h->stream);
	cache_file_put(s->cache, h->file);
	free(h);
}

void fs_handles_free_all(struct fs_session *s)
{
	while (s->handles)
		handle_free(s, s->handles);
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct fs_open_mode mode = {false, false};
	struct fs_handle *h;
	int rc;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->ino = ino;
	rc = fs_inode_open(s, ino, &h->file, &mode);
	if (rc == 0) {
		rc = cache_stream_new(s->cache, h->file, &h->stream);
		if (rc < 0) {
			cache_file_put(s->cache, h->file);
			fs_inode_close(s, ino, &mode);
		}
	}
	if (rc < 0) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	h->keep_cache = mode.keep_cache;
	h->direct_io = mode.direct_io;
	fi->keep_cache = mode.keep_cache;
	fi->direct_io = mode.direct_io;
	fi->noflush = 1;
	handle_link(s, h);
	if (fuse_reply_open(req, fi) != 0) /* interrupted: no release will come */
		handle_free(s, h);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle_free(fs_sess(req), (struct fs_handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/*
 * Gets the block holding byte @off of @f, for reading @n of its bytes from
 * there (@n is cut at the block's end). A random reader's miss fetches just
 * the pages it reads; a streaming reader's, the whole block.
 * Returns 0 with *b (drop with cache_block_put), *in and *n set, or -errno.
 */
static int get_part(struct fs_session *s, struct fs_handle *h, uint64_t off, size_t *n,
		    struct cache_block **b, uint32_t *in)
{
	uint64_t bs = s->cfg.block_size, start = off - off % bs;
	uint32_t blen = (uint32_t)MCFS_MIN(bs, cache_file_size(h->file) - start);
	uint32_t lo = 0, hi = blen;

	*in = (uint32_t)(off - start);
	*n = MCFS_MIN(*n, (size_t)(blen - *in));
	if (cache_stream_random(h->stream)) {
		lo = *in & ~(READ_ALIGN - 1);
		hi = (uint32_t)MCFS_MIN((uint64_t)blen, ((uint64_t)*in + *n + READ_ALIGN - 1) &
							    ~(uint64_t)(READ_ALIGN - 1));
	}
	return cache_block_get_range(s->cache, h->file, off / bs, lo, hi, b);
}

/* Copies [off, off+size) of the file into buf, one block reference at a time. */
static int read_copy(struct fs_session *s, struct fs_handle *h, uint64_t off, size_t size,
		     char *buf)
{
	struct cache_block *b;
	size_t done = 0, n;
	uint32_t in;
	int rc;

	while (done < size) {
		n = size - done;
		rc = get_part(s, h, off + done, &n, &b, &in);
		if (rc < 0)
			return rc;
		memcpy(buf + done, cache_block_data(b) + in, n);
		cache_block_put(s->cache, b);
		done += n;
	}
	return 0;
}

/*
 * A failed read answers EIO. If the file changed in the store, its cached
 * attributes are dropped too, so that a reopen sees the new version.
 */
static void read_failed(fuse_req_t req, fuse_ino_t ino, int rc)
{
	struct fs_session *s = fs_sess(req); /* req is gone once replied to */

	fuse_reply_err(req, rc == -ESTALE ? EIO : -rc);
	if (rc == -ESTALE)
		fs_inode_invalidate(s, ino);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
	struct fs_session *s = fs_sess(req);
	uint64_t fsize = cache_file_size(h->file), bs = s->cfg.block_size;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct cache_block *b;
	char *buf;
	int rc;

	if (off < 0 || (uint64_t)off >= fsize || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size = (size_t)MCFS_MIN((uint64_t)size, fsize - (uint64_t)off);
	atomic_fetch_add_explicit(&s->reads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->read_bytes, size, memory_order_relaxed);
	cache_stream_access(h->stream, (uint64_t)off, size);
	if ((uint64_t)off / bs == ((uint64_t)off + size - 1) / bs) {
		size_t n = size;
		uint32_t in;

		rc = get_part(s, h, (uint64_t)off, &n, &b, &in);
		if (rc < 0) {
			read_failed(req, ino, rc);
			return;
		}
		/* Zero copy: the reply is written from the slot while our reference pins it. */
		bv.buf[0].size = size;
		bv.buf[0].mem = (char *)cache_block_data(b) + in;
		fuse_reply_data(req, &bv, 0);
		cache_block_put(s->cache, b);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = read_copy(s, h, (uint64_t)off, size, buf);
	if (rc < 0)
		read_failed(req, ino, rc);
	else
		fuse_reply_buf(req, buf, size);
	free(buf);
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct fs_listing *l;
	int rc = fs_inode_list(s, ino, &l);

	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)l;
	if (fuse_reply_open(req, fi) != 0)
		fs_listing_put(s, l);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fs_listing_put(fs_sess(req), (struct fs_listing *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* Adds one entry; returns its size, or 0 when the buffer is full. */
static size_t add_entry(fuse_req_t req, char *p, size_t rem, const char *name,
			const struct stat *st, fuse_ino_t ino, off_t next, bool plus)
{
	struct fs_session *s = fs_sess(req);
	struct fuse_entry_param e;
	size_t n;

	if (!plus) {
		n = fuse_add_direntry(req, p, rem, name, st, next);
		return n > rem ? 0 : n;
	}
	memset(&e, 0, sizeof(e));
	e.attr = *st;
	if (ino) { /* "." and ".." are not looked up: ino 0 makes no dentry */
		e.ino = ino;
		e.attr_timeout = s->cfg.attr_ttl;
		e.entry_timeout = s->cfg.attr_ttl;
	}
	n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
	if (n > rem)
		return 0;
	if (ino)
		fs_inode_ref(s, ino); /* readdirplus counts as a lookup */
	return n;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct fs_listing *l = (struct fs_listing *)(uintptr_t)fi->fh;
	char *buf = malloc(size), *p;
	size_t rem = size, n;
	struct stat dot;
	off_t i;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memset(&dot, 0, sizeof(dot));
	dot.st_mode = S_IFDIR;
	p = buf;
	for (i = off; i < (off_t)l->n + 2; i++) {
		if (i < 2) {
			dot.st_ino = ino;
			n = add_entry(req, p, rem, i == 0 ? "." : "..", &dot, 0, i + 1, plus);
		} else {
			const struct fs_listent *le = &l->ents[i - 2];

			n = add_entry(req, p, rem, le->name, &le->st, le->ino, i + 1, plus);
		}
		if (n == 0)
			break;
		p += n;
		rem -= n;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_session *s = fs_sess(req);
	uint64_t total = 0, avail = 0;
	struct statvfs sv;

	(void)ino;
	if (remote_statfs(s->remote, &total, &avail) < 0)
		total = avail = 0; /* object stores have no capacity to report */
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096;
	sv.f_bfree = avail / 4096;
	sv.f_bavail = avail / 4096;
	sv.f_namemax = REMOTE_NAME_MAX - 1;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* The disk tier's counters as "key value" lines (issue 5). Returns the length. */
static int disk_stats_text(const struct cache_stats *cs, char *buf, size_t len)
{
	return snprintf(
	    buf, len,
	    "disk_state %d\ndisk_slots %" PRIu64 "\ndisk_slots_used %" PRIu64
	    "\ndisk_bytes_limit %" PRIu64 "\ndisk_bytes_used %" PRIu64 "\ndisk_hits %" PRIu64
	    "\ndisk_misses %" PRIu64 "\ndisk_read_bytes %" PRIu64 "\ndisk_writes %" PRIu64
	    "\ndisk_written_bytes %" PRIu64 "\ndisk_write_drops %" PRIu64
	    "\ndisk_csum_errors %" PRIu64 "\ndisk_io_errors %" PRIu64 "\ndisk_evictions %" PRIu64
	    "\ndisk_queued %" PRIu64 "\n",
	    cs->disk_state, cs->disk_slots, cs->disk_slots_used, cs->disk_bytes_limit,
	    cs->disk_bytes_used, cs->disk_hits, cs->disk_misses, cs->disk_read_bytes,
	    cs->disk_writes, cs->disk_written_bytes, cs->disk_write_drops, cs->disk_csum_errors,
	    cs->disk_io_errors, cs->disk_evictions, cs->disk_queued);
}

/* Renders the counters as "key value" lines. Returns the length. */
static int stats_text(struct fs_session *s, char *buf, size_t len)
{
	struct cache_stats cs;
	int n;

	cache_get_stats(s->cache, &cs);
	n = snprintf(buf, len,
		     "pid %d\nblock_size %" PRIu64 "\nslots %" PRIu64 "\nslots_used %" PRIu64
		     "\nhits %" PRIu64 "\nmisses %" PRIu64 "\nwaits %" PRIu64 "\nevictions %" PRIu64
		     "\nfetches %" PRIu64 "\nfetch_errors %" PRIu64 "\nfetched_bytes %" PRIu64
		     "\nprefetches %" PRIu64 "\nprefetch_unused %" PRIu64 "\ninflight %" PRIu64
		     "\nstore_requests %" PRIu64 "\nstore_reads %" PRIu64 "\nstore_bytes %" PRIu64
		     "\nstore_errors %" PRIu64 "\nstore_retries %" PRIu64 "\nfuse_reads %" PRIu64
		     "\nfuse_read_bytes %" PRIu64 "\nram_prefault %d\nram_faulted_bytes %" PRIu64
		     "\n",
		     (int)getpid(), cs.block_size, cs.slots, cs.slots_used, cs.hits, cs.misses,
		     cs.waits, cs.evictions, cs.fetches, cs.fetch_errors, cs.fetched_bytes,
		     cs.prefetches, cs.prefetch_unused, cs.inflight, cs.store_requests,
		     cs.store_reads, cs.store_bytes, cs.store_errors, cs.store_retries,
		     atomic_load_explicit(&s->reads, memory_order_relaxed),
		     atomic_load_explicit(&s->read_bytes, memory_order_relaxed), cs.ram_prefault,
		     cs.ram_faulted_bytes);
	if (n >= 0 && (size_t)n < len)
		n += disk_stats_text(&cs, buf + n, len - (size_t)n);
	if (n >= 0 && (size_t)n < len)
		n += fs_conn_stats_text(s, buf + n, len - (size_t)n);
	return n;
}

/* Value of one of our xattrs for @ino into buf; returns its length or -ENODATA. */
static int xattr_value(struct fs_session *s, fuse_ino_t ino, const char *name, char *buf,
		       size_t len)
{
	struct cache_file *f;
	int rc, n;

	if (ino == FUSE_ROOT_ID && strcmp(name, XATTR_STATS) == 0)
		return stats_text(s, buf, len);
	if (strcmp(name, XATTR_CACHED) != 0 && strcmp(name, XATTR_VERSION) != 0 &&
	    strcmp(name, XATTR_EVICT) != 0)
		return -ENODATA;
	rc = fs_inode_file(s, ino, &f);
	if (rc < 0)
		return rc == -EISDIR || rc == -EINVAL ? -ENODATA : rc;
	if (strcmp(name, XATTR_EVICT) == 0)
		n = snprintf(buf, len, "%" PRIu64, cache_evict_file(s->cache, f));
	else if (strcmp(name, XATTR_CACHED) == 0)
		n = snprintf(buf, len, "%" PRIu64, cache_file_cached_bytes(s->cache, f));
	else
		n = snprintf(buf, len, "%s", cache_file_version(f));
	cache_file_put(s->cache, f);
	return n;
}

static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char buf[4096];
	int n;

	fs_conn_note_req(fs_sess(req), req); /* is io_uring in use? (fs_conn_check) */
	if (strcmp(name, XATTR_EVICT) == 0) {
		uid_t uid = fuse_req_ctx(req)->uid;

		if (uid != 0 && uid != getuid()) {
			fuse_reply_err(req, EPERM);
			return;
		}
		if (size == 0) {
			fuse_reply_xattr(req, 20); /* room for any uint64_t */
			return;
		}
	}
	n = xattr_value(fs_sess(req), ino, name, buf, sizeof(buf));

	if (n < 0)
		fuse_reply_err(req, -n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if ((size_t)n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char root_names[] = XATTR_STATS "\0";
	static const char file_names[] = XATTR_CACHED "\0" XATTR_VERSION "\0";
	struct stat st;
	const char *names = "";
	size_t n = 0;
	int rc;

	rc = fs_inode_getattr(fs_sess(req), ino, &st);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (ino == FUSE_ROOT_ID) {
		names = root_names;
		n = sizeof(root_names) - 1;
	} else if (S_ISREG(st.st_mode)) {
		names = file_names;
		n = sizeof(file_names) - 1;
	}
	if (size == 0)
		fuse_reply_xattr(req, n);
	else if (n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, names, n);
}

/* ---- everything that would write: EROFS ------------------------------- */

static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	(void)ino, (void)attr, (void)to_set, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent, (void)name, (void)mode;
	fuse_reply_err(req, EROFS);
}

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EROFS);
}

static void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino, (void)buf, (void)size, (void)off, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	(void)parent, (void)name, (void)mode, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	(void)ino, (void)name, (void)value, (void)size, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
}

static void fs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)offset, (void)length, (void)fi;
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = fs_init,
    .lookup = fs_lookup,
    .forget = fs_forget,
    .forget_multi = fs_forget_multi,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .open = fs_open,
    .read = fs_read,
    .release = fs_release,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .readdirplus = fs_readdirplus,
    .releasedir = fs_releasedir,
    .statfs = fs_statfs,
    .getxattr = fs_getxattr,
    .listxattr = fs_listxattr,
#ifdef MCFS_HAVE_IOCTL
    .ioctl = fs_ioctl,
#endif
    .setattr = fs_setattr,
    .mknod = fs_mknod,
    .mkdir = fs_mkdir,
    .unlink = fs_unlink,
    .rmdir = fs_unlink,
    .symlink = fs_symlink,
    .rename = fs_rename,
    .link = fs_link,
    .write = fs_write,
    .create = fs_create,
    .setxattr = fs_setxattr,
    .removexattr = fs_removexattr,
    .fallocate = fs_fallocate,
};
