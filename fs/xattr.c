/*
 * xattr.c - the mount's extended attributes: counters (user.mcfs.stats of the
 * root), a file's cached bytes and version, and the unlisted names that act
 * when read (evict, refresh, log level), for the node's admin only.
 */
#define _GNU_SOURCE
#include "caller.h"
#include "fs_int.h"
#include "inode.h"
#include "stats.h"
#include "cache.h"
#include "cache_ram.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define XATTR_STATS "user.mcfs.stats"
#define XATTR_CACHED "user.mcfs.cached"
#define XATTR_VERSION "user.mcfs.version"
/*
 * Reading this (unlisted) name of a file drops the file's cached blocks from
 * both tiers and answers the bytes dropped from each: `mcfs evict`. A read, not a
 * setxattr, because the mount is read-only and the VFS refuses setxattr on
 * it (EROFS) before we see it. Unlisted, so `getfattr -d` never triggers it;
 * a size probe (size 0) drops nothing; and only the node's admin may drop
 * blocks (fs_caller_is_admin(): CAP_SYS_ADMIN in the daemon's user namespace,
 * or the daemon's own user when that is not root). EPERM for others: with
 * allow_other, a pod reading a model, root in it or not, must not be able to
 * evict it for every other pod.
 */
#define XATTR_EVICT "user.mcfs.evict"
/*
 * Reading this (unlisted) name of a file or directory drops the trust in every
 * listing and attribute kept for it and below (fs_inode_refresh()) and answers
 * how many paths that marked: `mcfs refresh`. A read for the reasons above,
 * and restricted as user.mcfs.evict is: it makes the store answer again for
 * every user of the mount.
 */
#define XATTR_REFRESH "user.mcfs.refresh"
/*
 * The root's (unlisted) user.mcfs.log_level answers the daemon's log level;
 * user.mcfs.log_level.LEVEL sets it first (`mcfs log-level`). Setting is the
 * node's admin's, as evict is: debug logs every fetch, for every user.
 */
#define XATTR_LOG_LEVEL "user.mcfs.log_level"

/* user.mcfs.refresh: marks @ino's tree stale; answers how many paths it marked. */
static int refresh_value(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len)
{
	char path[4096];
	int rc = fs_inode_path(s, ino, path, sizeof(path));

	if (rc < 0)
		return rc;
	return snprintf(buf, len, "%zu", fs_inode_refresh(s, path));
}

/* user.mcfs.log_level[.LEVEL] of the root: sets LEVEL if named; answers the level. */
static int log_level_value(const char *name, char *buf, size_t len)
{
	const char *want = name + strlen(XATTR_LOG_LEVEL);
	int old = mcfs_log_level(), i;

	if (*want == '.') {
		i = mcfs_log_level_of(want + 1);
		if (i < 0)
			return -EINVAL;
		/* said at info: before the change when lowering, after it when raising */
		if (i < old)
			MCFS_INFO("log level %s (was %s)", want + 1, mcfs_log_level_name(old));
		mcfs_log_set_level(i);
		if (i > old)
			MCFS_INFO("log level %s (was %s)", want + 1, mcfs_log_level_name(old));
	}
	return snprintf(buf, len, "%s", mcfs_log_level_name(mcfs_log_level()));
}

/* Value of one of our xattrs for @ino into buf; returns its length or -ENODATA. */
static int xattr_value(struct fs_session *s, fuse_ino_t ino, const char *name, char *buf,
		       size_t len)
{
	struct cache_evicted ev;
	struct cache_file *f;
	int rc, n;

	if (ino == FUSE_ROOT_ID && strcmp(name, XATTR_STATS) == 0)
		return fs_stats_xattr(s, buf, len);
	if (strcmp(name, XATTR_REFRESH) == 0)
		return refresh_value(s, ino, buf, len);
	if (ino == FUSE_ROOT_ID && strncmp(name, XATTR_LOG_LEVEL, strlen(XATTR_LOG_LEVEL)) == 0 &&
	    (name[strlen(XATTR_LOG_LEVEL)] == '\0' || name[strlen(XATTR_LOG_LEVEL)] == '.'))
		return log_level_value(name, buf, len);
	if (strcmp(name, XATTR_CACHED) != 0 && strcmp(name, XATTR_VERSION) != 0 &&
	    strcmp(name, XATTR_EVICT) != 0)
		return -ENODATA;
	rc = fs_inode_file(s, ino, &f);
	if (rc < 0)
		return rc == -EISDIR || rc == -EINVAL ? -ENODATA : rc;
	if (strcmp(name, XATTR_EVICT) == 0) {
		cache_evict_file(s->cache, f, &ev);
		n = fs_evict_text(&ev, buf, len);
	} else if (strcmp(name, XATTR_CACHED) == 0)
		n = snprintf(buf, len, "%" PRIu64, cache_file_cached_bytes(s->cache, f));
	else
		n = snprintf(buf, len, "%s", cache_file_version(f));
	cache_file_put(s->cache, f);
	return n;
}

void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char buf[4096];
	int n;

	fs_conn_note_req(fs_sess(req), req); /* is io_uring in use? (fs_conn_check) */
	if (strcmp(name, XATTR_EVICT) == 0 || strcmp(name, XATTR_REFRESH) == 0 ||
	    strncmp(name, XATTR_LOG_LEVEL ".", strlen(XATTR_LOG_LEVEL) + 1) == 0) {
		const struct fuse_ctx *ctx = fuse_req_ctx(req);

		if (!fs_caller_is_admin(ctx->uid, ctx->pid)) {
			fuse_reply_err(req, EPERM);
			return;
		}
		if (size == 0) {
			fuse_reply_xattr(req, FS_EVICT_TEXT_MAX); /* room for any answer */
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

void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
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
