/*
 * remote.h - the one interface to a model store: stat, list, readlink and
 * "read a byte range into memory".
 *
 * Backends: posix (a local or NAS directory, the embedded default), http(s)
 * (ranged GETs) and s3 (SigV4, ListObjectsV2, HEAD, ranged GET). remote.c picks
 * one from the source URL and dispatches through a constant ops table, the way
 * Redis' ae.c hides epoll behind aeApi*: each backend is a .c file of static
 * functions plus one exported `struct remote_ops` (declared in remote_int.h).
 *
 * Paths are relative to the store's root, '/'-separated, with no leading '/',
 * and "" for the root itself. Backends refuse names that would escape the
 * mount (empty, ".", ".." components, '/' inside a name) with -EINVAL.
 *
 * Listings hold one entry per name (a name listed as a file and as a
 * directory is shown as the file, as a stat answers) and only names that can
 * be shown; every refusal is logged, once per name. Symlinks follow
 * cfg->symlinks: "contained" (default) hides those whose target leaves the
 * store (absolute, or climbing above its root), "none" hides all, "any" shows
 * all. A hidden link is absent: not listed, -ENOENT from remote_stat() and
 * remote_readlink(). The store itself never follows a link out of its root:
 * a path whose directory became a symlink since it was listed ("a/" now
 * "a -> /etc") is resolved beneath the root, and is -ENOENT if the link leaves
 * it (with symlinks=none, if there is any link in the middle of the path).
 *
 * Threads: every function may be called from many threads at once.
 * Errors: 0 or a byte count on success, negative errno on failure:
 *   -ENOENT   no such path;
 *   -ESTALE   the object no longer matches the version it was opened with;
 *   -EIO      the store failed (after retries), or answered garbage;
 *   -EACCES   the store refused our credentials;
 *   -ENOTDIR, -EINVAL as usual.
 * Backends log the failures they see first (with URL or path and byte range,
 * never credentials); retryable errors are retried inside the backend.
 */
#ifndef MCFS_REMOTE_H
#define MCFS_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache_attr.h" /* struct cache_attr, cache_dirent: what stat and list fill */
#include "cfg.h"

/* The byte source a read is about: borrowed by the callee for the call only. */
struct remote_obj {
	const char *path;    /* relative path */
	const char *version; /* cache_attr.version captured at open */
	uint64_t size;	     /* cache_attr.size captured at open */
};

/* Counters, read without a lock (relaxed atomics). */
struct remote_stats {
	uint64_t requests;	/* store operations issued (stat, list, read), retries included */
	uint64_t read_requests; /* reads (ranged GET / pread) issued */
	uint64_t read_bytes;	/* bytes received by reads */
	uint64_t errors;	/* operations that failed for good */
	uint64_t retries;	/* retried attempts */
};

struct remote;

/*
 * Opens the store named by cfg->source: "/dir", "file:///dir", "http(s)://...",
 * "s3://bucket[/prefix]". Checks that it is reachable and that credentials work
 * (stat of the root), so a mount fails early with a clear message.
 * Returns 0 with *out set (free with remote_close()), or a negative errno
 * after logging why. @cfg is borrowed for the life of the remote.
 */
MCFS_MUST_CHECK int remote_open(const struct cfg *cfg, struct remote **out);

/* Frees the remote. Can't fail. No call may be in progress. */
void remote_close(struct remote *r);

/* "posix", "http", "s3". */
const char *remote_kind(const struct remote *r);

MCFS_MUST_CHECK int remote_stat(struct remote *r, const char *path, struct cache_attr *out);

/*
 * The attributes of @path now, for an open that must confirm the version of
 * the file it opens (close-to-open): as remote_stat(), in one store request
 * while @path is still a regular file: posix, a stat; http, one HEAD (a
 * manifest older than attr_ttl is not fetched again for it); s3, one HEAD.
 * A path that is gone or no longer a file costs what remote_stat() costs.
 * No validator is sent: the answer names the version, whatever it is.
 */
MCFS_MUST_CHECK int remote_stat_file(struct remote *r, const char *path, struct cache_attr *out);

/*
 * Lists a directory. On success *out is an array of *n entries (caller frees
 * with free()); entries carry attributes. "." and ".." are not listed.
 */
MCFS_MUST_CHECK int remote_list(struct remote *r, const char *path, struct cache_dirent **out,
				size_t *n);

/* Reads a symlink's target into buf (NUL-terminated). Returns its length. */
MCFS_MUST_CHECK int remote_readlink(struct remote *r, const char *path, char *buf, size_t len);

/*
 * Reads [off, off+len) of @obj into buf. Returns the bytes read: len, or less
 * only where the range passes obj->size; never a short count otherwise, and
 * never mixed bytes. Another version gives -ESTALE. An answer of other bytes
 * than those asked for (a short or long body, a status other than a 206 of
 * exactly the range or a 200 of the whole object) gives -EIO from the http
 * and s3 stores; the posix store gives -ESTALE for a file that came up short,
 * since a file of the version opened cannot.
 * buf must stay valid for the call; it is aligned to 4096 and may be written
 * up to len rounded up to 4096 (O_DIRECT).
 */
MCFS_MUST_CHECK ssize_t remote_read(struct remote *r, const struct remote_obj *obj, uint64_t off,
				    void *buf, size_t len);

/* Filesystem-wide numbers for statfs. Returns 0 or a negative errno. */
MCFS_MUST_CHECK int remote_statfs(struct remote *r, uint64_t *total_bytes, uint64_t *free_bytes);

/* Copies the counters. Can't fail. */
void remote_get_stats(const struct remote *r, struct remote_stats *out);

/*
 * Checks one relative path from a store listing or a lookup: 0 if it is a
 * clean relative path, -EINVAL if it is absolute, has empty, "." or ".."
 * components. Logs nothing.
 */
MCFS_MUST_CHECK int remote_check_path(const char *path);

#endif
