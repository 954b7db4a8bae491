/*
 * handover.c - the state a new daemon resumes from, and the descriptors'
 * holders (handover.h says what and why; supervise.c is the supervisor).
 *
 * The state is a memfd: a 32-byte header (magic, start, end) and records
 * from start to end, each a type, a length and its payload, in the order
 * they happened. A record is written, then end moves past it: a daemon
 * killed between the two leaves the record out, and the reply it preceded
 * was never sent. At resume the live records are written after end and
 * start and end move to them in one write, then the old ones are punched
 * out: the log holds what the kernel holds, not the daemon's history.
 */
#define _GNU_SOURCE
#include "handover.h"

#include "fs_int.h"
#include "inode.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

/* Linux 6.9 (protocol 7.40), newer than the kernel headers some systems build with. */
#ifndef FUSE_NOTIFY_RESEND
#define FUSE_NOTIFY_RESEND 7
#endif
#define HO_HAS_RESEND (1ull << 39) /* FUSE_HAS_RESEND, an INIT flag */
#define HO_INIT_EXT (1u << 30)	   /* FUSE_INIT_EXT: flags2 holds the high 32 bits */

static const char ho_magic[8] = "MCFSST01";
#define HO_HDR 32u

enum {
	R_INIT = 'I',
	R_NODE = 'N',
	R_FREE = 'F',
	R_RETIRE = 'R',
	R_OPEN = 'O',
	R_OPENDIR = 'D',
	R_RELEASE = 'C',
	R_RELEASEDIR = 'E',
};

struct ho_attr { /* a version as recorded: fixed-width fields, not struct cache_attr */
	uint64_t size;
	int64_t mtime_ns;
	uint32_t mode;
	uint32_t vlen;
};

static void attr_pack(struct ho_attr *p, const struct cache_attr *a)
{
	*p = (struct ho_attr){a->size, a->mtime_ns, a->mode, (uint32_t)strlen(a->version)};
}

static int attr_unpack(struct cache_attr *a, const struct ho_attr *p, const char *v, size_t left)
{
	if (p->vlen > left || p->vlen >= sizeof(a->version))
		return -EINVAL;
	*a = (struct cache_attr){.size = p->size, .mode = p->mode, .mtime_ns = p->mtime_ns};
	memcpy(a->version, v, p->vlen);
	a->version[p->vlen] = '\0';
	return 0;
}

/* ---- writing ------------------------------------------------------------ */

static bool keeping(struct fs_session *s)
{
	return s->ho.state_fd >= 0;
}

/* Appends one record of up to three pieces. Failures are logged once and stop the state. */
static void append(struct fs_session *s, uint32_t type, const void *a, size_t alen, const void *b,
		   size_t blen)
{
	struct fs_handover *h = &s->ho;
	uint32_t hdr[2] = {type, (uint32_t)(alen + blen)};
	struct iovec iov[3] = {{hdr, sizeof(hdr)}, {(void *)a, alen}, {(void *)b, blen}};
	size_t want = sizeof(hdr) + alen + blen;
	ssize_t n;

	pthread_mutex_lock(&h->lock);
	if (h->state_fd < 0) {
		pthread_mutex_unlock(&h->lock);
		return;
	}
	n = pwritev(h->state_fd, iov, 3, (off_t)h->end);
	if (n == (ssize_t)want) {
		h->end += want;
		if (pwrite(h->state_fd, &h->end, sizeof(h->end), 16) == sizeof(h->end)) {
			pthread_mutex_unlock(&h->lock);
			return;
		}
	}
	MCFS_ERR("the restart state could not be written (%s): a restart of this daemon will "
		 "mount afresh",
		 n < 0 ? strerror(errno) : "short write");
	close(h->state_fd);
	h->state_fd = -1;
	pthread_mutex_unlock(&h->lock);
}

void fs_handover_node(struct fs_session *s, uint64_t ino, const char *path)
{
	if (keeping(s))
		append(s, R_NODE, &ino, sizeof(ino), path, strlen(path));
}

void fs_handover_node_free(struct fs_session *s, uint64_t ino)
{
	if (keeping(s))
		append(s, R_FREE, &ino, sizeof(ino), NULL, 0);
}

void fs_handover_retire(struct fs_session *s, uint64_t ino, const struct cache_attr *a)
{
	struct {
		uint64_t ino;
		struct ho_attr a;
	} r;

	if (!keeping(s))
		return;
	r.ino = ino;
	attr_pack(&r.a, a);
	append(s, R_RETIRE, &r, sizeof(r), a->version, r.a.vlen);
}

struct ho_open {
	uint64_t fh, ino;
	uint32_t flags;
	int32_t backing_id;
	struct ho_attr a;
};

void fs_handover_open(struct fs_session *s, uint64_t fh, uint64_t ino, unsigned flags,
		      int backing_id, const struct cache_attr *a)
{
	struct ho_open r;

	if (!keeping(s))
		return;
	r = (struct ho_open){.fh = fh, .ino = ino, .flags = flags, .backing_id = backing_id};
	attr_pack(&r.a, a);
	append(s, R_OPEN, &r, sizeof(r), a->version, r.a.vlen);
}

void fs_handover_opendir(struct fs_session *s, uint64_t fh, uint64_t ino)
{
	uint64_t r[2] = {fh, ino};

	if (keeping(s))
		append(s, R_OPENDIR, r, sizeof(r), NULL, 0);
}

void fs_handover_release(struct fs_session *s, uint64_t fh, bool dir)
{
	if (keeping(s))
		append(s, dir ? R_RELEASEDIR : R_RELEASE, &fh, sizeof(fh), NULL, 0);
}

/* ---- the session's I/O: INIT recorded, or replayed ----------------------- */

static ssize_t ho_read(int fd, void *buf, size_t len, void *ud)
{
	struct fs_session *s = ud;
	struct fs_handover *h = &s->ho;
	const struct fuse_in_header *in = buf;
	int zero = 0;
	ssize_t n;

	if (h->resume && atomic_load(&h->init_stage) < 2) {
		if (atomic_compare_exchange_strong(&h->init_stage, &zero, 1)) {
			if (len < h->init_len) {
				errno = EINVAL;
				return -1;
			}
			memcpy(buf, h->init, h->init_len);
			return (ssize_t)h->init_len;
		}
		/* Nothing else is read until the replayed INIT was answered:
		 * libfuse fails any request before its INIT with EIO. */
		pthread_mutex_lock(&h->init_lock);
		while (atomic_load(&h->init_stage) < 2)
			pthread_cond_wait(&h->init_done, &h->init_lock);
		pthread_mutex_unlock(&h->init_lock);
	}
	n = read(fd, buf, len); /* libfuse reads -1 and errno, as of read() */
	if (n < 0)
		return n;
	if (!h->resume && atomic_load(&h->init_stage) == 0 && (size_t)n >= sizeof(*in) &&
	    in->opcode == FUSE_INIT) {
		append(s, R_INIT, buf, (size_t)n, NULL, 0);
		atomic_store(&h->init_stage, 2);
	}
	return n;
}

static ssize_t ho_writev(int fd, struct iovec *iov, int count, void *ud)
{
	struct fs_session *s = ud;
	struct fs_handover *h = &s->ho;
	const struct fuse_out_header *out = iov[0].iov_base;
	ssize_t total = 0;
	int i;

	if (h->resume && atomic_load(&h->init_stage) == 1 && iov[0].iov_len >= sizeof(*out) &&
	    out->unique == h->init_unique) {
		/* The kernel took the first daemon's answer; this one goes nowhere. */
		for (i = 0; i < count; i++)
			total += (ssize_t)iov[i].iov_len;
		pthread_mutex_lock(&h->init_lock);
		atomic_store(&h->init_stage, 2);
		pthread_cond_broadcast(&h->init_done);
		pthread_mutex_unlock(&h->init_lock);
		fs_handover_resend(s);
		return total;
	}
	return writev(fd, iov, count); /* -1 and errno, as libfuse reads them */
}

static const struct fuse_custom_io ho_io = {.writev = ho_writev, .read = ho_read};

void fs_handover_resend(struct fs_session *s)
{
	struct fuse_out_header n = {.len = sizeof(n), .error = FUSE_NOTIFY_RESEND, .unique = 0};

	if (write(s->ho.fuse_fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		MCFS_WARN("the kernel did not resend the requests the last daemon had read (%s): "
			  "their readers wait until the mount is unmounted",
			  strerror(errno));
	else
		MCFS_INFO("resumed the mount's connection; the kernel resends what was in flight");
}

/* ---- holders ------------------------------------------------------------ */

/* Gives both descriptors to the supervisor and to systemd's store. */
static int hand_to_holders(struct fs_session *s)
{
	struct fs_handover *h = &s->ho;
	int fds[2] = {h->fuse_fd, h->state_fd}, rc = 0;

	if (h->sup_fd >= 0) {
		union {
			char buf[CMSG_SPACE(sizeof(fds))];
			struct cmsghdr align;
		} u;
		char tag[] = "fds";
		struct iovec iov = {tag, sizeof(tag)};
		struct msghdr m = {.msg_iov = &iov,
				   .msg_iovlen = 1,
				   .msg_control = u.buf,
				   .msg_controllen = sizeof(u.buf)};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);

		memset(u.buf, 0, sizeof(u.buf));
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(c), fds, sizeof(fds));
		if (sendmsg(h->sup_fd, &m, MSG_NOSIGNAL) < 0) {
			rc = -errno;
			MCFS_ERR("cannot hand the mount's descriptors to the supervisor: %s",
				 strerror(errno));
		}
	}
	if (h->systemd) {
		/* Replace what an earlier daemon stored, then store ours. */
		(void)sd_pid_notify(0, 0, "FDSTOREREMOVE=1\nFDNAME=" FS_HANDOVER_FUSE_NAME);
		(void)sd_pid_notify(0, 0, "FDSTOREREMOVE=1\nFDNAME=" FS_HANDOVER_STATE_NAME);
		if (sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=" FS_HANDOVER_FUSE_NAME,
					   &fds[0], 1) <= 0 ||
		    sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=" FS_HANDOVER_STATE_NAME,
					   &fds[1], 1) <= 0) {
			rc = rc ? rc : -EIO;
			MCFS_ERR("systemd did not take the mount's descriptors into its store "
				 "(FileDescriptorStoreMax= unset in the unit?)");
		}
	}
	atomic_store(&h->held, rc == 0 && (h->sup_fd >= 0 || h->systemd));
	return rc;
}

/* Why this session cannot be resumed by another daemon, or NULL. */
static const char *why_not(const struct fs_session *s)
{
	if (s->cfg.splice)
		return "splice=true needs libfuse's own I/O";
	if (atomic_load(&s->conn.uring_offered) || s->conn.uring_want)
		return "FUSE over io_uring's rings end with the daemon";
	return NULL;
}

static int make_state(struct fs_handover *h)
{
	char hdr[HO_HDR] = {0};
	uint64_t v[2] = {HO_HDR, HO_HDR};

	h->state_fd = memfd_create(FS_HANDOVER_STATE_NAME, MFD_CLOEXEC);
	if (h->state_fd < 0)
		return -errno;
	memcpy(hdr, ho_magic, sizeof(ho_magic));
	memcpy(hdr + 8, v, sizeof(v));
	if (pwrite(h->state_fd, hdr, sizeof(hdr), 0) != sizeof(hdr))
		return -errno;
	h->end = HO_HDR;
	return 0;
}

int fs_handover_fresh(struct fs_session *s, struct fuse_session *se)
{
	struct fs_handover *h = &s->ho;
	const char *why;
	int rc;

	if (h->sup_fd < 0 && !h->systemd)
		return 0; /* nothing would hold the descriptors: a crash ends the mount */
	why = why_not(s);
	if (why) {
		MCFS_WARN("readers will not survive a restart of this daemon: %s", why);
		return 0;
	}
	h->fuse_fd = fuse_session_fd(se);
	rc = make_state(h);
	if (rc == 0)
		rc = fuse_session_custom_io(se, &ho_io, h->fuse_fd);
	if (rc == 0)
		rc = hand_to_holders(s);
	if (rc < 0) {
		MCFS_ERR("cannot keep the mount across restarts: %s", strerror(-rc));
		return rc;
	}
	MCFS_INFO("the mount's connection is held by %s: readers survive a restart",
		  h->sup_fd >= 0 ? "the supervisor" : "systemd's descriptor store");
	return 0;
}

/* ---- resume ------------------------------------------------------------- */

struct replay {
	struct node_rec {
		char *path; /* NULL: none (never made, or freed) */
		bool retired;
		struct cache_attr attr;
	} * nodes;
	size_t nnodes; /* indexed by inode number */
	struct open_rec {
		bool used, dir;
		uint64_t ino;
		unsigned flags;
		int backing_id;
		struct cache_attr attr;
	} * opens;
	size_t nopens; /* indexed by handle id */
	unsigned char *init;
	size_t init_len;
};

static int grow(void **arr, size_t *n, size_t want, size_t elem)
{
	size_t nn = *n ? *n : 64;
	void *p;

	if (want < *n)
		return 0;
	while (nn <= want)
		nn *= 2;
	p = realloc(*arr, nn * elem);
	if (!p)
		return -ENOMEM;
	memset((char *)p + *n * elem, 0, (nn - *n) * elem);
	*arr = p;
	*n = nn;
	return 0;
}

static void replay_free(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->nnodes; i++)
		free(r->nodes[i].path);
	free(r->nodes);
	free(r->opens);
	free(r->init);
}

/* One record into @r. 0, or -EINVAL for a record that does not parse. */
static int replay_one(struct replay *r, uint32_t type, const unsigned char *p, size_t len)
{
	uint64_t u[2];
	struct ho_open o;
	struct {
		uint64_t ino;
		struct ho_attr a;
	} rt;

	switch (type) {
	case R_INIT:
		free(r->init);
		r->init = malloc(len);
		if (!r->init)
			return -ENOMEM;
		memcpy(r->init, p, len);
		r->init_len = len;
		return 0;
	case R_NODE:
		if (len < 8)
			return -EINVAL;
		memcpy(u, p, 8);
		if (grow((void **)&r->nodes, &r->nnodes, u[0], sizeof(*r->nodes)) < 0)
			return -ENOMEM;
		free(r->nodes[u[0]].path);
		r->nodes[u[0]] = (struct node_rec){.path = strndup((const char *)p + 8, len - 8)};
		return r->nodes[u[0]].path ? 0 : -ENOMEM;
	case R_FREE:
		if (len != 8)
			return -EINVAL;
		memcpy(u, p, 8);
		if (u[0] < r->nnodes) {
			free(r->nodes[u[0]].path);
			r->nodes[u[0]].path = NULL;
		}
		return 0;
	case R_RETIRE:
		if (len < sizeof(rt))
			return -EINVAL;
		memcpy(&rt, p, sizeof(rt));
		if (rt.ino >= r->nnodes || !r->nodes[rt.ino].path)
			return -EINVAL;
		r->nodes[rt.ino].retired = true;
		return attr_unpack(&r->nodes[rt.ino].attr, &rt.a, (const char *)p + sizeof(rt),
				   len - sizeof(rt));
	case R_OPEN:
		if (len < sizeof(o))
			return -EINVAL;
		memcpy(&o, p, sizeof(o));
		if (grow((void **)&r->opens, &r->nopens, o.fh, sizeof(*r->opens)) < 0)
			return -ENOMEM;
		r->opens[o.fh] = (struct open_rec){
		    .used = true, .ino = o.ino, .flags = o.flags, .backing_id = o.backing_id};
		return attr_unpack(&r->opens[o.fh].attr, &o.a, (const char *)p + sizeof(o),
				   len - sizeof(o));
	case R_OPENDIR:
		if (len != 16)
			return -EINVAL;
		memcpy(u, p, 16);
		if (grow((void **)&r->opens, &r->nopens, u[0], sizeof(*r->opens)) < 0)
			return -ENOMEM;
		r->opens[u[0]] = (struct open_rec){.used = true, .dir = true, .ino = u[1]};
		return 0;
	case R_RELEASE:
	case R_RELEASEDIR:
		if (len != 8)
			return -EINVAL;
		memcpy(u, p, 8);
		if (u[0] < r->nopens)
			r->opens[u[0]].used = false;
		return 0;
	default:
		return -EINVAL;
	}
}

static int replay_read(int fd, struct replay *r, uint64_t *end_out)
{
	unsigned char hdr[HO_HDR], *buf = NULL;
	uint64_t start, end, off;
	uint32_t rh[2];
	int rc = 0;

	if (pread(fd, hdr, sizeof(hdr), 0) != sizeof(hdr) || memcmp(hdr, ho_magic, 8) != 0)
		return -EINVAL;
	memcpy(&start, hdr + 8, 8);
	memcpy(&end, hdr + 16, 8);
	if (start < HO_HDR || end < start || end - start > (1ull << 34))
		return -EINVAL;
	buf = malloc(end - start + 1);
	if (!buf)
		return -ENOMEM;
	if (pread(fd, buf, end - start, (off_t)start) != (ssize_t)(end - start)) {
		free(buf);
		return -EIO;
	}
	for (off = 0; rc == 0 && off < end - start;) {
		if (end - start - off < sizeof(rh)) {
			rc = -EINVAL;
			break;
		}
		memcpy(rh, buf + off, sizeof(rh));
		off += sizeof(rh);
		if (rh[1] > end - start - off) {
			rc = -EINVAL;
			break;
		}
		rc = replay_one(r, rh[0], buf + off, rh[1]);
		off += rh[1];
	}
	free(buf);
	*end_out = end;
	return rc;
}

/* Writes the live records after the old end, moves start and end to them, punches the rest. */
static int compact(struct fs_session *s, const struct replay *r, uint64_t old_end)
{
	struct fs_handover *h = &s->ho;
	uint64_t se[2], first = (old_end + 4095) & ~4095ull;
	size_t i;

	/* Written below start's reach: a crash meanwhile leaves the old log whole. */
	{
		struct iovec iov[3];
		uint32_t hdr[2];
		ssize_t n;
		struct ho_open o;
		uint64_t u[2];
		uint64_t pos = first;

#define PUT(type, a, alen, b, blen)                                                                \
	do {                                                                                       \
		hdr[0] = (type);                                                                   \
		hdr[1] = (uint32_t)((alen) + (blen));                                              \
		iov[0] = (struct iovec){hdr, sizeof(hdr)};                                         \
		iov[1] = (struct iovec){(void *)(a), (alen)};                                      \
		iov[2] = (struct iovec){(void *)(b), (blen)};                                      \
		n = pwritev(h->state_fd, iov, 3, (off_t)pos);                                      \
		if (n != (ssize_t)(sizeof(hdr) + (alen) + (blen)))                                 \
			return n < 0 ? -errno : -EIO;                                              \
		pos += (uint64_t)n;                                                                \
	} while (0)

		PUT(R_INIT, r->init, r->init_len, NULL, 0);
		for (i = 0; i < r->nnodes; i++) {
			if (!r->nodes[i].path)
				continue;
			u[0] = i;
			PUT(R_NODE, u, 8, r->nodes[i].path, strlen(r->nodes[i].path));
			if (r->nodes[i].retired) {
				struct {
					uint64_t ino;
					struct ho_attr a;
				} rt = {.ino = i};

				attr_pack(&rt.a, &r->nodes[i].attr);
				PUT(R_RETIRE, &rt, sizeof(rt), r->nodes[i].attr.version, rt.a.vlen);
			}
		}
		for (i = 0; i < r->nopens; i++) {
			if (!r->opens[i].used)
				continue;
			if (r->opens[i].dir) {
				u[0] = i;
				u[1] = r->opens[i].ino;
				PUT(R_OPENDIR, u, 16, NULL, 0);
				continue;
			}
			o = (struct ho_open){.fh = i,
					     .ino = r->opens[i].ino,
					     .flags = r->opens[i].flags,
					     .backing_id = r->opens[i].backing_id};
			attr_pack(&o.a, &r->opens[i].attr);
			PUT(R_OPEN, &o, sizeof(o), r->opens[i].attr.version, o.a.vlen);
		}
#undef PUT
		se[0] = first;
		se[1] = pos;
		if (pwrite(h->state_fd, se, sizeof(se), 8) != sizeof(se))
			return -errno;
		h->end = pos;
	}
	if (first > HO_HDR && fallocate(h->state_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					HO_HDR, (off_t)(first - HO_HDR)) < 0)
		MCFS_DEBUG("restart state: punching the old records: %s", strerror(errno));
	return 0;
}

int fs_handover_resume(struct fs_session *s, struct fuse_session *se)
{
	struct fs_handover *h = &s->ho;
	struct replay r = {0};
	const struct fuse_in_header *in;
	uint64_t end = 0, flags = 0;
	uint32_t f1 = 0, f2 = 0;
	size_t i, nodes = 0, opens = 0;
	int rc;

	rc = replay_read(h->state_fd, &r, &end);
	if (rc == 0 && (!r.init || r.init_len < sizeof(*in) + 16))
		rc = -ENODATA; /* the last daemon died before INIT */
	if (rc < 0) {
		MCFS_ERR("the restart state the holder kept does not parse (%s)", strerror(-rc));
		replay_free(&r);
		return rc;
	}
	in = (const struct fuse_in_header *)r.init;
	memcpy(&f1, r.init + sizeof(*in) + 12,
	       4); /* fuse_init_in: major, minor, max_readahead, flags */
	if (r.init_len >= sizeof(*in) + 20)
		memcpy(&f2, r.init + sizeof(*in) + 16, 4);
	flags = f1 | ((f1 & HO_INIT_EXT) ? (uint64_t)f2 << 32 : 0);
	if (!(flags & HO_HAS_RESEND))
		MCFS_WARN(
		    "this kernel cannot resend requests (FUSE_NOTIFY_RESEND, Linux 6.9): those "
		    "the last daemon had read are never answered");
	h->init = r.init;
	h->init_len = r.init_len;
	h->init_unique = in->unique;
	r.init = NULL;
	for (i = 2; i < r.nnodes; i++) { /* 1 is the root, made already */
		if (!r.nodes[i].path)
			continue;
		rc = fs_inode_restore(s, i, r.nodes[i].path, r.nodes[i].retired, &r.nodes[i].attr);
		if (rc < 0)
			goto out;
		nodes++;
	}
	for (i = 1; i < r.nopens; i++) {
		if (!r.opens[i].used)
			continue;
		if (r.opens[i].dir)
			rc = fs_dir_resume(s, i, r.opens[i].ino);
		else
			rc = fs_handle_resume(s, i, r.opens[i].ino, r.opens[i].flags,
					      r.opens[i].backing_id, &r.opens[i].attr);
		if (rc < 0)
			MCFS_WARN("open handle %zu of inode %llu could not be resumed (%s): its "
				  "reads fail with EIO",
				  i, (unsigned long long)r.opens[i].ino, strerror(-rc));
		else
			opens++;
		rc = 0;
	}
	/* Keep only the live records (and the INIT) from now on. */
	r.init = h->init;
	r.init_len = h->init_len;
	rc = compact(s, &r, end);
	r.init = NULL;
	if (rc < 0) {
		MCFS_ERR("the restart state could not be rewritten: %s", strerror(-rc));
		goto out;
	}
	rc = fuse_session_custom_io(se, &ho_io, h->fuse_fd);
	if (rc == 0)
		rc = hand_to_holders(s);
	if (rc == 0)
		MCFS_INFO("resuming %s: %zu inodes and %zu open handles of the last daemon",
			  s->cfg.mountpoint, nodes, opens);
out:
	replay_free(&r);
	return rc;
}

/* ---- start -------------------------------------------------------------- */

int fs_handover_init(struct fs_session *s)
{
	struct fs_handover *h = &s->ho;
	char **names = NULL;
	const char *e;
	int n, i, fuse_fd = -1, state_fd = -1;

	h->fuse_fd = h->state_fd = h->sup_fd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->init_lock, NULL);
	pthread_cond_init(&h->init_done, NULL);
	h->systemd = getenv("NOTIFY_SOCKET") != NULL;
	e = getenv("MCFS_SUPERVISOR_FD");
	if (e) {
		h->sup_fd = atoi(e);
		(void)fcntl(h->sup_fd, F_SETFD, FD_CLOEXEC);
		unsetenv("MCFS_SUPERVISOR_FD");
	}
	n = sd_listen_fds_with_names(1, &names);
	for (i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;

		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (names && strcmp(names[i], FS_HANDOVER_FUSE_NAME) == 0 && fuse_fd < 0)
			fuse_fd = fd;
		else if (names && strcmp(names[i], FS_HANDOVER_STATE_NAME) == 0 && state_fd < 0)
			state_fd = fd;
		else
			close(fd);
	}
	for (i = 0; names && names[i]; i++)
		free(names[i]);
	free(names);
	if (fuse_fd >= 0) {
		/* The kernel says EPOLLERR once the connection ended (unmounted, aborted). */
		struct pollfd pf = {.fd = fuse_fd, .events = POLLIN};

		if (poll(&pf, 1, 0) < 0 || (pf.revents & (POLLERR | POLLHUP | POLLNVAL))) {
			MCFS_WARN("the mount's connection a holder kept has ended (unmounted or "
				  "aborted): mounting afresh");
			close(fuse_fd);
			fuse_fd = -1;
			if (state_fd >= 0)
				close(state_fd);
			state_fd = -1;
		}
	}
	if (fuse_fd >= 0 && state_fd >= 0) {
		h->fuse_fd = fuse_fd;
		h->state_fd = state_fd;
		h->resume = true;
		return 0;
	}
	if (fuse_fd >= 0 || state_fd >= 0) {
		MCFS_WARN("a holder passed %s without %s: mounting afresh",
			  fuse_fd >= 0 ? FS_HANDOVER_FUSE_NAME : FS_HANDOVER_STATE_NAME,
			  fuse_fd >= 0 ? FS_HANDOVER_STATE_NAME : FS_HANDOVER_FUSE_NAME);
		if (fuse_fd >= 0)
			close(fuse_fd);
		if (state_fd >= 0)
			close(state_fd);
	}
	return 0;
}

void fs_handover_free(struct fs_session *s)
{
	struct fs_handover *h = &s->ho;

	pthread_mutex_lock(&h->lock);
	if (h->state_fd >= 0)
		close(h->state_fd);
	h->state_fd = -1;
	pthread_mutex_unlock(&h->lock);
	if (h->sup_fd >= 0)
		close(h->sup_fd);
	h->sup_fd = -1;
	free(h->init);
	h->init = NULL;
}
