/*
 * posix.c - the posix store: a local or NAS directory (the embedded default).
 *
 * Design: every path is resolved beneath one O_PATH descriptor of the root,
 * by openat2() with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, and its last
 * component is never followed (O_NOFOLLOW; a stat opens it O_PATH and fstats
 * the descriptor). So symlinks inside the store show up as symlinks, and
 * nothing outside the root is reached by our own lookups, not even through a
 * directory that became a symlink after the kernel cached it ("a/" replaced by
 * "a -> /etc": "a/hostname" is refused, -ENOENT, logged once). A symlink in
 * the middle of a path is followed only while it stays beneath the root, and
 * with symlinks=none not at all (RESOLVE_NO_SYMLINKS). The kernel follows the
 * links the mount shows; the store only meets one mid-path after a change.
 *
 * Without openat2 (Linux before 5.6, or a seccomp filter that refuses it) the
 * path is walked one component at a time, each opened O_NOFOLLOW beneath the
 * directory before it, and every symlink in the middle of a path is refused,
 * whatever cfg->symlinks says; the mount logs this once.
 *
 * A read opens the file, checks that it is still the version captured at
 * open (size, mtime and inode number), and preads the range in large chunks;
 * the cache's fetch threads call this in parallel for different blocks, since
 * one stream caps a NAS. A file that shrank, vanished or was replaced gives
 * -ESTALE/-ENOENT: never bytes of another version.
 *
 * Fault hook (for tests of the error paths): MCFS_POSIX_FAULT="fail:N" makes
 * the Nth read of the process fail with EIO, "short:N" makes it return half
 * the bytes asked for, "no-openat2" takes the path walk of kernels without
 * openat2.
 */
#define _GNU_SOURCE
#include "remote_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define POSIX_ALIGN 4096 /* O_DIRECT alignment of buffers, offsets and lengths */

struct posix {
	char root[4096]; /* absolute path of the store's root */
	int rootfd;	 /* O_PATH descriptor of the root */
	/* RESOLVE_* flags of every openat2(); 0: no openat2, walk() resolves */
	uint64_t resolve;
	bool odirect; /* from cfg; cleared if the filesystem refuses it */
	atomic_bool odirect_warned;
	int fault_kind;		 /* 0 none, 1 fail, 2 short, 3 no-openat2 */
	uint64_t fault_at;	 /* 1-based read number to fault */
	_Atomic uint64_t nreads; /* reads so far (for the fault hook) */
};

static struct posix *P(struct remote *r)
{
	return r->priv;
}

/* The path as openat() wants it: "." for the root. */
static const char *rel(const char *path)
{
	return path[0] ? path : ".";
}

static void fill_attr(const struct stat *st, struct cache_attr *out)
{
	memset(out, 0, sizeof(*out));
	out->mode = st->st_mode;
	out->size = S_ISREG(st->st_mode) ? (uint64_t)st->st_size : 0;
	if (S_ISLNK(st->st_mode))
		out->size = (uint64_t)st->st_size;
	out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	if (S_ISREG(st->st_mode))
		snprintf(out->version, sizeof(out->version), "%" PRIx64 "-%" PRIx64 "-%" PRIx64,
			 (uint64_t)st->st_size, (uint64_t)out->mtime_ns, (uint64_t)st->st_ino);
}

static void parse_fault(struct posix *p)
{
	const char *f = getenv("MCFS_POSIX_FAULT");
	unsigned long long n;
	char kind[16];

	if (f && strcmp(f, "no-openat2") == 0) {
		p->fault_kind = 3;
		MCFS_WARN("posix store: fault hook armed: no-openat2");
		return;
	}
	if (!f || sscanf(f, "%15[a-z]:%llu", kind, &n) != 2 || n == 0)
		return;
	if (strcmp(kind, "fail") == 0)
		p->fault_kind = 1;
	else if (strcmp(kind, "short") == 0)
		p->fault_kind = 2;
	p->fault_at = n;
	MCFS_WARN("posix store: fault hook armed: %s read #%llu", kind, n);
}

/*
 * The refusal of a path that leads out of the store, or through a symlink the
 * resolution may not follow: logged once per path, and -ENOENT, as for a
 * hidden link (remote.h). Other errors pass through.
 */
static int refusal(struct remote *r, const char *path, int err, const char *why)
{
	if (err != -EXDEV && err != -ELOOP)
		return err;
	if (err == -ELOOP && P(r)->resolve && !(P(r)->resolve & RESOLVE_NO_SYMLINKS))
		return err; /* a loop, or a last component that is a link */
	if (remote_first_time(r, "beneath", path))
		MCFS_WARN("store path '%s' is refused: it goes through a symlink %s", path, why);
	return -ENOENT;
}

/*
 * Opens @path as openat(rootfd, path, flags | O_NOFOLLOW) would, without
 * following any symlink in the middle of it: for kernels without openat2.
 * Each directory is opened O_PATH beneath the one before, so a rename or a
 * swap elsewhere can't move the walk out of the root.
 */
static int walk(struct remote *r, const char *path, int flags)
{
	const char *s = path, *slash;
	int dir = P(r)->rootfd, fd, e;
	char comp[NAME_MAX + 1];
	struct stat st;

	while ((slash = strchr(s, '/')) != NULL) {
		if ((size_t)(slash - s) >= sizeof(comp)) {
			fd = -ENAMETOOLONG;
			break;
		}
		memcpy(comp, s, (size_t)(slash - s));
		comp[slash - s] = '\0';
		fd = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		e = errno;
		if (fd < 0 && e == ENOTDIR && fstatat(dir, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode))
			e = ELOOP;
		if (dir != P(r)->rootfd)
			close(dir);
		if (fd < 0)
			return refusal(r, path, -e,
				       "(this kernel has no openat2: none is followed)");
		dir = fd;
		s = slash + 1;
	}
	if (!slash) {
		fd = openat(dir, rel(s), flags | O_NOFOLLOW | O_CLOEXEC);
		fd = fd < 0 ? -errno : fd;
	}
	if (dir != P(r)->rootfd)
		close(dir);
	return fd;
}

/*
 * Opens @path beneath the root with @flags, never following its last
 * component (with O_PATH a symlink there opens as itself). Returns a new
 * descriptor (caller closes it) or a negative errno; -ENOENT for a path that
 * goes through a symlink out of the root, or through any with symlinks=none.
 */
static int open_beneath(struct remote *r, const char *path, int flags)
{
	struct posix *p = P(r);
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
	    .resolve = p->resolve,
	};
	int tries = 0;
	long fd;

	if (!p->resolve)
		return walk(r, path, flags);
	/* EAGAIN: a rename raced a ".." of a link's target; the kernel asks for a retry */
	do
		fd = syscall(SYS_openat2, p->rootfd, rel(path), &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN && ++tries < 8);
	if (fd < 0)
		return refusal(r, path, -errno,
			       (p->resolve & RESOLVE_NO_SYMLINKS) ? "(symlinks=none)"
								  : "that leaves the store");
	return (int)fd;
}

/* Picks the resolution: openat2's flags, or 0 for walk() where it is missing. */
static void pick_resolve(struct remote *r)
{
	struct posix *p = P(r);
	struct open_how how = {.flags = O_PATH | O_CLOEXEC};
	long fd;

	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	if (r->links == REMOTE_LINKS_NONE)
		how.resolve |= RESOLVE_NO_SYMLINKS;
	if (p->fault_kind == 3) {
		fd = -1;
		errno = ENOSYS;
	} else {
		fd = syscall(SYS_openat2, p->rootfd, ".", &how, sizeof(how));
	}
	if (fd >= 0) {
		close((int)fd);
		p->resolve = how.resolve;
		return;
	}
	MCFS_WARN("posix store %s: openat2 is not available (%s; Linux 5.6 has it): paths are "
		  "walked one directory at a time, and a symlink in the middle of a path is not "
		  "followed, whatever symlinks= says",
		  p->root, strerror(errno));
}

static int posix_open(struct remote *r)
{
	const char *src = r->cfg->source;
	struct posix *p;

	if (strncmp(src, "file://", 7) == 0)
		src += 7;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (!realpath(src, p->root)) {
		int e = errno;

		MCFS_ERR("source directory %s: %s", src, strerror(e));
		free(p);
		return -e;
	}
	p->rootfd = open(p->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (p->rootfd < 0) {
		int e = errno;

		MCFS_ERR("source %s: %s", p->root, e == ENOTDIR ? "not a directory" : strerror(e));
		free(p);
		return -e;
	}
	p->odirect = r->cfg->odirect;
	parse_fault(p);
	r->priv = p;
	pick_resolve(r);
	return 0;
}

static void posix_close(struct remote *r)
{
	struct posix *p = P(r);

	close(p->rootfd);
	free(p);
}

static int posix_stat(struct remote *r, const char *path, struct cache_attr *out)
{
	struct stat st;
	int fd, rc = 0;

	fd = open_beneath(r, path, O_PATH);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else
		fill_attr(&st, out);
	close(fd);
	return rc;
}

static int posix_list(struct remote *r, const char *path, struct cache_dirent **out, size_t *n)
{
	struct cache_dirent *ents = NULL, *grown;
	size_t cap = 0, cnt = 0;
	struct dirent *de;
	struct stat st;
	int fd, rc = 0;
	DIR *d;

	fd = open_beneath(r, path, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return fd == -ELOOP ? -ENOTDIR : fd;
	d = fdopendir(fd);
	if (!d) {
		rc = -errno;
		close(fd);
		return rc;
	}
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (strlen(de->d_name) >= CACHE_NAME_MAX)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* vanished between readdir and stat */
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			grown = realloc(ents, cap * sizeof(*ents));
			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			ents = grown;
		}
		snprintf(ents[cnt].name, sizeof(ents[cnt].name), "%s", de->d_name);
		fill_attr(&st, &ents[cnt].attr);
		cnt++;
	}
	if (rc == 0 && errno != 0)
		rc = -errno;
	closedir(d);
	if (rc < 0) {
		free(ents);
		return rc;
	}
	*out = ents;
	*n = cnt;
	return 0;
}

static int posix_readlink(struct remote *r, const char *path, char *buf, size_t len)
{
	int fd = open_beneath(r, path, O_PATH);
	ssize_t n;

	if (fd < 0)
		return fd;
	n = readlinkat(fd, "", buf, len - 1);
	if (n < 0)
		n = errno == ENOENT ? -EINVAL : -errno; /* "": the descriptor is no link */
	close(fd);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	return (int)n;
}

static int open_for_read(struct remote *r, const struct remote_obj *obj)
{
	struct posix *p = P(r);
	int fd;

	if (p->odirect) {
		fd = open_beneath(r, obj->path, O_RDONLY | O_DIRECT);
		if (fd != -EINVAL)
			return fd;
		if (!atomic_exchange(&p->odirect_warned, true))
			MCFS_WARN("posix store: %s refuses O_DIRECT; reading buffered", p->root);
	}
	return open_beneath(r, obj->path, O_RDONLY);
}

/* Applies the fault hook to one pread's result; returns what the caller sees. */
static ssize_t fault(struct posix *p, ssize_t got)
{
	uint64_t nth;

	if (p->fault_kind != 1 && p->fault_kind != 2)
		return got;
	nth = atomic_fetch_add(&p->nreads, 1) + 1;
	if (nth != p->fault_at)
		return got;
	if (p->fault_kind == 1) {
		errno = EIO;
		return -1;
	}
	return got > 1 ? got / 2 : got;
}

static ssize_t posix_read(struct remote *r, const struct remote_obj *obj, uint64_t off, void *buf,
			  size_t len)
{
	struct posix *p = P(r);
	struct cache_attr now;
	size_t want, done = 0;
	struct stat st;
	ssize_t got;
	int fd;

	if (off >= obj->size)
		return 0;
	want = (size_t)MCFS_MIN((uint64_t)len, obj->size - off);
	fd = open_for_read(r, obj);
	if (fd < 0)
		return fd == -ENOENT ? -ESTALE : fd;
	if (fstat(fd, &st) < 0) {
		got = -errno;
		goto out;
	}
	fill_attr(&st, &now);
	if (strcmp(now.version, obj->version) != 0) {
		got = -ESTALE; /* replaced, or its size or mtime changed */
		goto out;
	}
	while (done < want) {
		/* O_DIRECT wants aligned lengths; the slot has room up to the block size. */
		size_t ask = want - done;

		if (p->odirect)
			ask = (ask + POSIX_ALIGN - 1) & ~(size_t)(POSIX_ALIGN - 1);
		got = fault(p, pread(fd, (char *)buf + done, ask, (off_t)(off + done)));
		if (got < 0) {
			if (errno == EINTR)
				continue;
			got = -errno;
			goto out;
		}
		if (got == 0)
			break;
		done += (size_t)got;
		if (p->fault_kind == 2 && done < want)
			break; /* a shortened read is not resumed: that is the fault */
	}
	got = done >= want ? (ssize_t)want : -ESTALE;
out:
	close(fd);
	return got;
}

static int posix_statfs(struct remote *r, uint64_t *total, uint64_t *avail)
{
	struct statvfs sv;

	if (fstatvfs(P(r)->rootfd, &sv) < 0)
		return -errno;
	*total = (uint64_t)sv.f_blocks * sv.f_frsize;
	*avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

const struct remote_ops remote_posix_ops = {
    .kind = "posix",
    .open = posix_open,
    .close = posix_close,
    .stat = posix_stat,
    .list = posix_list,
    .readlink = posix_readlink,
    .read = posix_read,
    .statfs = posix_statfs,
};
