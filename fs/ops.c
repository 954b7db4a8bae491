/*
 * ops.c - the FUSE low-level operations: a read-only view of the store.
 *
 * Names and attributes come from the inode table (inode.c); bytes come from
 * the cache, one cache_read() per READ: it hands back either a pointer into
 * a pinned block (replied with fuse_reply_data: one writev from the slot, no
 * extra copy) or a copy across blocks, and fs/ releases it after the reply.
 * Every write-like operation answers EROFS. One reply per request.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "inode.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_metadata.h"
#include "cache_ram.h"
#include "cache_read.h"
#include "cache_readahead.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- the handle table (fs_int.h) ---------------------------------------- */

static struct fs_hslot *hslot(struct fs_session *s, uint64_t id, bool make)
{
	struct fs_htab *t = &s->htab;
	struct fs_hslot *c;
	uint64_t i = id / FS_HTAB_CHUNK;

	if (id == 0 || i >= FS_HTAB_CHUNKS)
		return NULL;
	c = atomic_load_explicit(&t->chunks[i], memory_order_acquire);
	if (!c && make) { /* handles_lock held */
		c = calloc(FS_HTAB_CHUNK, sizeof(*c));
		if (c)
			atomic_store_explicit(&t->chunks[i], c, memory_order_release);
	}
	return c ? &c[id % FS_HTAB_CHUNK] : NULL;
}

/* Sets id @want (resume), or a free one (@want 0), to @p; returns the id, 0 on ENOMEM. */
static uint64_t htab_add(struct fs_session *s, uintptr_t p, uint64_t want)
{
	struct fs_htab *t = &s->htab;
	struct fs_hslot *e;
	uint64_t id;

	pthread_mutex_lock(&s->handles_lock);
	if (want)
		id = want;
	else if (t->nfree)
		id = t->free[--t->nfree];
	else
		id = t->next ? t->next : 1;
	e = hslot(s, id, true);
	if (e) {
		atomic_store_explicit(&e->p, p, memory_order_release);
		if (id >= t->next)
			t->next = id + 1;
	} else {
		if (!want && id < t->next) /* a free id: keep it */
			t->nfree++;
		id = 0;
	}
	pthread_mutex_unlock(&s->handles_lock);
	return id;
}

static void htab_del(struct fs_session *s, uint64_t id)
{
	struct fs_htab *t = &s->htab;
	struct fs_hslot *e;
	uint64_t *nf;

	pthread_mutex_lock(&s->handles_lock);
	e = hslot(s, id, false);
	if (e && atomic_load_explicit(&e->p, memory_order_relaxed)) {
		atomic_store_explicit(&e->p, 0, memory_order_relaxed);
		if (t->nfree == t->cap) {
			nf = realloc(t->free, (t->cap ? t->cap * 2 : 64) * sizeof(*nf));
			if (nf) {
				t->free = nf;
				t->cap = t->cap ? t->cap * 2 : 64;
			}
		}
		if (t->nfree < t->cap) /* else the id is not reused: no harm */
			t->free[t->nfree++] = id;
	}
	pthread_mutex_unlock(&s->handles_lock);
}

static uintptr_t htab_get(struct fs_session *s, uint64_t id)
{
	struct fs_hslot *e = hslot(s, id, false);

	return e ? atomic_load_explicit(&e->p, memory_order_acquire) : 0;
}

struct fs_handle *fs_handle_by_id(struct fs_session *s, uint64_t fh)
{
	uintptr_t p = htab_get(s, fh);

	return (p & 1) ? NULL : (struct fs_handle *)p;
}

static struct fs_listing *listing_by_id(struct fs_session *s, uint64_t fh)
{
	uintptr_t p = htab_get(s, fh);

	return (p & 1) ? (struct fs_listing *)(p & ~(uintptr_t)1) : NULL;
}

static void htab_free(struct fs_session *s)
{
	unsigned i;

	for (i = 0; i < FS_HTAB_CHUNKS; i++)
		free(atomic_load(&s->htab.chunks[i]));
	free(s->htab.free);
	memset(&s->htab, 0, sizeof(s->htab));
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
	atomic_fetch_add_explicit(&s->open_files, 1, memory_order_relaxed);
}

/* Unlinks and frees @h: its stream and its file reference. @req (NULL at
 * teardown) unregisters a backing file whose last passthrough open this is. */
static void handle_free(struct fs_session *s, fuse_req_t req, struct fs_handle *h)
{
	struct fs_open_mode mode = {h->keep_cache, h->direct_io, h->passthrough, 0};

	if (h->id) {
		if (req) /* a release: not the teardown, which the next daemon may resume from */
			fs_handover_release(s, h->id, false);
		htab_del(s, h->id);
	}
	pthread_mutex_lock(&s->handles_lock);
	if (h->prev)
		h->prev->next = h->next;
	else if (s->handles == h)
		s->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&s->handles_lock);
	fs_push_close(s, h); /* before the inode's page cache may change hands */
	fs_inode_close(s, req, h->ino, h->file, &mode);
	cache_stream_free(h->stream);
	cache_file_put(s->cache, h->file);
	free(h);
	/* last: an open counts until its release has put back all it held (the
	 * pins of a passthrough version, which a newer version's registration
	 * leaves in place while held), so open_files 0 means all of it is done */
	atomic_fetch_sub_explicit(&s->open_files, 1, memory_order_release);
}

void fs_handles_free_all(struct fs_session *s)
{
	while (s->handles)
		handle_free(s, NULL, s->handles);
	htab_free(s);
}

/* The kernel learns of handle @h: it gets an id, and the state its record. */
static int handle_publish(struct fs_session *s, struct fs_handle *h, uint64_t want, int backing_id)
{
	struct cache_attr a = {.size = cache_file_size(h->file), .mode = S_IFREG | 0444};
	unsigned flags = (h->keep_cache ? FS_HO_KEEP : 0) | (h->direct_io ? FS_HO_DIRECT : 0) |
			 (h->passthrough ? FS_HO_PT : 0);

	h->id = htab_add(s, (uintptr_t)h, want);
	if (!h->id)
		return -ENOMEM;
	if (!want) {
		snprintf(a.version, sizeof(a.version), "%s", cache_file_version(h->file));
		fs_handover_open(s, h->id, h->ino, flags, backing_id, &a);
	}
	return 0;
}

void fs_open_reply(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		   struct fs_handle *h)
{
	struct fs_open_mode mode = {false, false, false, 0};
	int rc;

	rc = fs_inode_open(s, ino, &h->file, &mode);
	if (rc == 0) {
		rc = cache_stream_new(s->cache, h->file, &h->stream);
		if (rc < 0) {
			fs_inode_close(s, req, ino, h->file, &mode);
			cache_file_put(s->cache, h->file);
		}
	}
	/* A complete file: the kernel may read its backing file itself, unless
	 * a push left the file whole in the inode's page cache (inode.h). */
	if (rc == 0 && atomic_load(&s->conn.pt_on) && !fs_inode_keeps_pages(s, ino, h->file, &mode))
		fs_inode_passthrough(s, req, ino, h->file, &mode);
	/* Not complete: pushed into the page cache ahead of its reader once it
	 * reads on (push.c), or its bytes go from the cache into the reader's
	 * buffer (cold_direct_io). */
	if (rc == 0 && !mode.passthrough && !cache_file_complete(s->cache, h->file)) {
		if (s->push.on)
			h->push_ok = true;
		else
			fs_inode_cold_direct(s, &mode);
	}
	h->keep_cache = mode.keep_cache;
	h->direct_io = mode.direct_io;
	h->passthrough = mode.passthrough;
	if (rc == 0) {
		handle_link(s, h);
		rc = handle_publish(s, h, 0, mode.passthrough ? mode.backing_id : 0);
		if (rc < 0) {
			handle_free(s, req, h);
			fuse_reply_err(req, -rc);
			return;
		}
	}
	if (rc < 0) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = h->id;
	fi->keep_cache = mode.keep_cache;
	fi->direct_io = mode.direct_io;
#ifdef MCFS_FUSE_PASSTHROUGH
	fi->backing_id = mode.passthrough ? mode.backing_id : 0; /* FOPEN_PASSTHROUGH */
#endif
	if (mode.passthrough)
		atomic_fetch_add_explicit(&s->passthrough_opens, 1, memory_order_relaxed);
	fi->noflush = 1;
	fs_handle_done(h);
	/* Interrupted: no release will come. The request is gone with the failed
	 * reply, so a backing id registered for it stays until unmount. */
	if (fuse_reply_open(req, fi) != 0) {
		fs_handover_release(s, h->id, false);
		handle_free(s, NULL, h);
	}
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct fs_handle *h;

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
	if (fi->flags & O_NONBLOCK)
		fs_open_reply(s, req, ino, fi, h); /* never waits for a whole fetch */
	else
		fs_open_waiting(s, req, ino, fi, h); /* open_whole.c */
}

int fs_handle_resume(struct fs_session *s, uint64_t fh, uint64_t ino, unsigned flags,
		     int backing_id, const struct cache_attr *a)
{
	struct fs_handle *h = calloc(1, sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	h->ino = ino;
	h->keep_cache = flags & FS_HO_KEEP;
	h->direct_io = flags & FS_HO_DIRECT;
	h->passthrough = flags & FS_HO_PT;
	rc = fs_inode_resume_open(s, ino, flags, backing_id, a, &h->file);
	if (rc < 0) {
		free(h);
		return rc;
	}
	rc = cache_stream_new(s->cache, h->file, &h->stream);
	if (rc == 0) {
		handle_link(s, h);
		rc = handle_publish(s, h, fh, backing_id);
		if (rc < 0)
			handle_free(s, NULL, h);
		return rc;
	}
	{
		struct fs_open_mode mode = {h->keep_cache, h->direct_io, h->passthrough, 0};

		fs_inode_close(s, NULL, ino, h->file, &mode);
	}
	cache_file_put(s->cache, h->file);
	free(h);
	return rc;
}

int fs_dir_resume(struct fs_session *s, uint64_t fh, uint64_t ino)
{
	struct fs_listing *l;
	int rc = fs_inode_list(s, ino, &l);

	if (rc < 0)
		return rc;
	if (!htab_add(s, (uintptr_t)l | 1, fh)) {
		fs_listing_put(s, l);
		return -ENOMEM;
	}
	return 0;
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct fs_handle *h = fs_handle_of(s, fi);

	(void)ino;
	if (h)
		handle_free(s, req, h);
	fuse_reply_err(req, 0);
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
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct cache_read_reply r;
	struct fs_handle *h;
	int rc;

	if (off < 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	h = fs_handle_of(fs_sess(req), fi);
	if (!h) {
		fuse_reply_err(req, EIO); /* a handle the last daemon's state lacked */
		return;
	}
	rc = cache_read(h->stream, (uint64_t)off, size, &r);
	if (rc == 0)
		fs_push_read(fs_sess(req), h, (uint64_t)off, r.len);
	fs_handle_done(h);
	if (rc < 0) {
		read_failed(req, ino, rc);
		return;
	}
	if (r.pinned) {
		/* Zero copy: the reply is written from the block's slot, pinned until done. */
		bv.buf[0].size = r.len;
		bv.buf[0].mem = (char *)r.data;
		fuse_reply_data(req, &bv, 0);
	} else {
		fuse_reply_buf(req, r.data, r.len); /* a copy across blocks, or EOF */
	}
	cache_read_done(&r);
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
	fi->fh = htab_add(s, (uintptr_t)l | 1, 0);
	if (!fi->fh) {
		fs_listing_put(s, l);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fs_handover_opendir(s, fi->fh, ino);
	fs_order_before(&l->order);
	if (fuse_reply_open(req, fi) != 0) {
		htab_del(s, fi->fh);
		fs_listing_put(s, l);
	}
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = fs_sess(req);
	struct fs_listing *l = listing_by_id(s, fi->fh);

	(void)ino;
	if (l) {
		fs_order_after(&l->order);
		fs_handover_release(s, fi->fh, true);
		htab_del(s, fi->fh);
		fs_listing_put(s, l);
	}
	fuse_reply_err(req, 0);
}

/*
 * Adds entry @i of @l (-1, -2: "." and "..", which are not looked up: ino 0
 * makes no dentry); returns its size, or 0 when the buffer is full.
 */
static size_t add_entry(fuse_req_t req, char *p, size_t rem, const struct fs_listing *l, off_t i,
			fuse_ino_t dir, bool plus)
{
	struct fs_session *s = fs_sess(req);
	struct fuse_entry_param e;
	const char *name = i < 0 ? (i == -2 ? "." : "..") : l->ents[i].name;
	size_t n;

	memset(&e, 0, sizeof(e));
	if (i < 0) {
		e.attr.st_ino = dir;
		e.attr.st_mode = S_IFDIR;
	} else {
		/* Counted before the entry is sent (readdirplus counts as a lookup),
		 * given back if it does not fit. */
		e.ino = fs_inode_entry(s, l, (size_t)i, plus, &e.attr);
	}
	if (!plus) {
		n = fuse_add_direntry(req, p, rem, name, &e.attr, i + 3);
		return n > rem ? 0 : n;
	}
	if (e.ino) {
		e.attr_timeout = s->cfg.attr_ttl;
		e.entry_timeout = s->cfg.attr_ttl;
	}
	n = fuse_add_direntry_plus(req, p, rem, name, &e, i + 3);
	if (n > rem) {
		if (e.ino)
			fs_inode_forget(s, e.ino, 1);
		return 0;
	}
	return n;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct fs_listing *l = listing_by_id(fs_sess(req), fi->fh);
	char *buf, *p;
	size_t rem = size, n;
	off_t i;

	if (!l) {
		fuse_reply_err(req, EIO); /* a handle the last daemon's state lacked */
		return;
	}
	fs_order_after(&l->order);
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	p = buf;
	/* offsets: 0 ".", 1 "..", then entry i at i + 2; each entry's next is one more */
	for (i = off; i < (off_t)l->n + 2; i++) {
		n = add_entry(req, p, rem, l, i - 2, ino, plus);
		if (n == 0)
			break;
		p += n;
		rem -= n;
	}
	fs_order_before(&l->order);
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
	uint64_t total, avail;
	struct statvfs sv;

	(void)ino;
	cache_statfs(s->cache, &total, &avail); /* 0 and 0 from object stores */
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096;
	sv.f_bfree = avail / 4096;
	sv.f_bavail = avail / 4096;
	sv.f_namemax = CACHE_NAME_MAX - 1;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
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
    .ioctl = fs_ioctl,
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
