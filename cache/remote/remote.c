/*
 * remote.c - picks a backend from the source URL and dispatches to it.
 *
 * The counters and the path rules live here, once, so that every backend
 * counts and refuses the same way. Backends never see a path that escapes
 * the store: every path is checked before it reaches them.
 */
#define _GNU_SOURCE
#include "remote_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct remote_ops *pick(const char *source)
{
#ifdef MCFS_HAVE_NET
	if (strncmp(source, "http://", 7) == 0 || strncmp(source, "https://", 8) == 0)
		return &remote_http_ops;
	if (strncmp(source, "s3://", 5) == 0)
		return &remote_s3_ops;
#endif
	if (strncmp(source, "file://", 7) == 0 || source[0] == '/' || strstr(source, "://") == NULL)
		return &remote_posix_ops;
	return NULL;
}

int remote_open(const struct cfg *cfg, struct remote **out)
{
	const struct remote_ops *ops = pick(cfg->source);
	struct cache_attr root;
	struct remote *r;
	int rc;

	if (!ops) {
		MCFS_ERR(
		    "unsupported source '%s' (allowed: /dir, file:///dir, http(s)://host/base, "
		    "s3://bucket[/prefix])",
		    cfg->source_shown);
		return -EPROTONOSUPPORT;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->ops = ops;
	r->cfg = cfg;
	rc = ops->open(r);
	if (rc < 0) {
		free(r);
		return rc;
	}
	/* Fail the mount now, not at the first ls, if the store is unusable. */
	rc = remote_stat(r, "", &root);
	if (rc == 0 && (root.mode & S_IFMT) != S_IFDIR)
		rc = -ENOTDIR;
	if (rc < 0 && rc != -ENOTDIR && cfg->offline && cfg->cache_dir[0]) {
		/* -o offline: mount anyway; metadata comes from cache_dir's LMDB */
		MCFS_WARN("store %s is not reachable (%s): offline, serving what %s knows",
			  cfg->source_shown, strerror(-rc), cfg->cache_dir);
		rc = 0;
	}
	if (rc < 0) {
		MCFS_ERR("store %s is not usable: %s", cfg->source_shown, strerror(-rc));
		remote_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	r->ops->close(r);
	free(r);
}

const char *remote_kind(const struct remote *r)
{
	return r->ops->kind;
}

int remote_check_path(const char *path)
{
	const char *p = path, *slash;
	size_t n;

	if (path[0] == '\0')
		return 0;
	if (path[0] == '/')
		return -EINVAL;
	for (;;) {
		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || n >= CACHE_NAME_MAX || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (!slash)
			return 0;
		p = slash + 1;
	}
}

int remote_stat(struct remote *r, const char *path, struct cache_attr *out)
{
	int rc;

	if (remote_check_path(path) < 0)
		return -EINVAL;
	remote_count(&r->requests, 1);
	rc = r->ops->stat(r, path, out);
	if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR)
		remote_count(&r->errors, 1);
	return rc;
}

/* Drops entries whose names could escape the mount, logging each once. */
static size_t filter_names(const char *dir, struct cache_dirent *ents, size_t n)
{
	size_t i, kept = 0;

	for (i = 0; i < n; i++) {
		const char *name = ents[i].name;

		if (name[0] == '\0' || strchr(name, '/') || strcmp(name, ".") == 0 ||
		    strcmp(name, "..") == 0) {
			MCFS_WARN(
			    "store listing of '%s' has an entry named '%s': refused (it would "
			    "escape the mount)",
			    dir, name);
			continue;
		}
		if (kept != i)
			ents[kept] = ents[i];
		kept++;
	}
	return kept;
}

int remote_list(struct remote *r, const char *path, struct cache_dirent **out, size_t *n)
{
	int rc;

	if (remote_check_path(path) < 0)
		return -EINVAL;
	remote_count(&r->requests, 1);
	rc = r->ops->list(r, path, out, n);
	if (rc < 0) {
		if (rc != -ENOENT && rc != -ENOTDIR)
			remote_count(&r->errors, 1);
		return rc;
	}
	*n = filter_names(path, *out, *n);
	return 0;
}

int remote_readlink(struct remote *r, const char *path, char *buf, size_t len)
{
	if (remote_check_path(path) < 0)
		return -EINVAL;
	remote_count(&r->requests, 1);
	return r->ops->readlink(r, path, buf, len);
}

ssize_t remote_read(struct remote *r, const struct remote_obj *obj, uint64_t off, void *buf,
		    size_t len)
{
	ssize_t got;

	if (remote_check_path(obj->path) < 0)
		return -EINVAL;
	remote_count(&r->requests, 1);
	remote_count(&r->read_requests, 1);
	got = r->ops->read(r, obj, off, buf, len);
	if (got < 0)
		remote_count(&r->errors, 1);
	else
		remote_count(&r->read_bytes, (uint64_t)got);
	return got;
}

int remote_statfs(struct remote *r, uint64_t *total_bytes, uint64_t *free_bytes)
{
	return r->ops->statfs(r, total_bytes, free_bytes);
}

void remote_get_stats(const struct remote *r, struct remote_stats *out)
{
	struct remote *m = (struct remote *)r;

	out->requests = atomic_load_explicit(&m->requests, memory_order_relaxed);
	out->read_requests = atomic_load_explicit(&m->read_requests, memory_order_relaxed);
	out->read_bytes = atomic_load_explicit(&m->read_bytes, memory_order_relaxed);
	out->errors = atomic_load_explicit(&m->errors, memory_order_relaxed);
	out->retries = atomic_load_explicit(&m->retries, memory_order_relaxed);
}
