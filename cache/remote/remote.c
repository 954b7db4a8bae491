/*
 * remote.c - picks a backend from the source URL and dispatches to it.
 *
 * The counters and the path rules live here, once, so that every backend
 * counts and refuses the same way. Backends never see a path that escapes
 * the store: every path is checked before it reaches them.
 *
 * Listings are cleaned here too, whatever the store: a name that can't be
 * shown is dropped, a name listed twice is shown once, and a symlink whose
 * target leaves the store is hidden (cfg->symlinks): a model loader must not
 * read the node's own files (/etc/passwd) as if they were the model's. A
 * hidden link is absent everywhere: not listed, ENOENT on lookup, ENOENT on
 * readlink. Each refusal is logged once per name, not at every listing.
 */
#define _GNU_SOURCE
#include "remote_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

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
	r->links = strcmp(cfg->symlinks, "any") == 0	? REMOTE_LINKS_ANY
		   : strcmp(cfg->symlinks, "none") == 0 ? REMOTE_LINKS_NONE
							: REMOTE_LINKS_CONTAINED;
	pthread_mutex_init(&r->said_lock, NULL);
	rc = ops->open(r);
	if (rc < 0) {
		pthread_mutex_destroy(&r->said_lock);
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
	pthread_mutex_destroy(&r->said_lock);
	free(r);
}

const char *remote_kind(const struct remote *r)
{
	return r->ops->kind;
}

const char *remote_name_refusal(const char *name)
{
	size_t n = strlen(name);

	if (n == 0)
		return "it is empty";
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return "'.' and '..' would escape the mount";
	if (strchr(name, '/'))
		return "a '/' inside a name would escape the mount";
	if (n >= CACHE_NAME_MAX)
		return "it is longer than 255 bytes";
	return NULL;
}

const char *remote_path_refusal(const char *path)
{
	char name[CACHE_NAME_MAX];
	const char *p = path, *slash, *why;
	size_t n;

	if (path[0] == '\0')
		return NULL;
	if (path[0] == '/')
		return "an absolute path would escape the mount";
	for (;;) {
		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n >= CACHE_NAME_MAX)
			return "a part is longer than 255 bytes";
		memcpy(name, p, n);
		name[n] = '\0';
		why = remote_name_refusal(name);
		if (why)
			return why;
		if (!slash)
			return NULL;
		p = slash + 1;
	}
}

int remote_check_path(const char *path)
{
	return remote_path_refusal(path) ? -EINVAL : 0;
}

const char *remote_link_refusal(const char *link, const char *target)
{
	const char *p, *slash;
	size_t depth = 0, n;
	bool named = false;

	if (target[0] == '\0')
		return "its target is empty";
	if (target[0] == '/')
		return "its target is an absolute path";
	for (p = link; *p; p++)
		depth += *p == '/'; /* "a/b/link": two directories above it */
	for (p = target;; p = slash + 1) {
		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (named)
				return "its target has a '..' after a name (that name may be a "
				       "link "
				       "itself, so the target may leave the store)";
			if (depth == 0)
				return "its target climbs above the store's root";
			depth--;
		} else if (n > 0 && !(n == 1 && p[0] == '.')) {
			named = true;
		}
		if (!slash)
			return NULL;
	}
}

bool remote_first_time(struct remote *r, const char *what, const char *path)
{
	uint64_t h;
	size_t i, k;
	bool first = true;

	if (!r)
		return true;
	h = XXH3_64bits_withSeed(path, strlen(path), XXH3_64bits(what, strlen(what)));
	h = h ? h : 1; /* 0 marks an empty slot */
	pthread_mutex_lock(&r->said_lock);
	for (i = 0, k = h % REMOTE_SAID_SLOTS; i < REMOTE_SAID_SLOTS;
	     i++, k = (k + 1) % REMOTE_SAID_SLOTS) {
		if (r->said[k] == h) {
			first = false;
			break;
		}
		if (r->said[k] == 0) {
			if (r->n_said < REMOTE_SAID_SLOTS / 4 * 3) {
				r->said[k] = h;
				r->n_said++;
			}
			break;
		}
	}
	pthread_mutex_unlock(&r->said_lock);
	return first;
}

/* Drops entries whose names could escape the mount or can't be shown. */
static size_t filter_names(struct remote *r, const char *dir, struct cache_dirent *ents, size_t n)
{
	size_t i, kept = 0;
	char path[4096];

	for (i = 0; i < n; i++) {
		const char *name = ents[i].name, *why = remote_name_refusal(name);

		if (why) {
			snprintf(path, sizeof(path), "%s/%s", dir, name);
			if (remote_first_time(r, "name", path))
				MCFS_WARN(
				    "store listing of '%s' has an entry named '%s': refused (%s)",
				    dir, name, why);
			continue;
		}
		if (kept != i)
			ents[kept] = ents[i];
		kept++;
	}
	return kept;
}

/* Order for remote_dedupe(): by name, then non-directories first. */
static int dirent_cmp(const void *a, const void *b)
{
	const struct cache_dirent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c != 0)
		return c;
	c = (int)S_ISDIR(x->attr.mode) - (int)S_ISDIR(y->attr.mode);
	if (c != 0)
		return c;
	/* equal names and kinds: any fixed order, so the same one wins every time */
	return memcmp(&x->attr, &y->attr, sizeof(x->attr));
}

static const char *kind_name(uint32_t mode)
{
	return S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symlink" : "a file";
}

size_t remote_dedupe(struct remote *r, const char *dir, struct cache_dirent *ents, size_t n)
{
	size_t i, kept = 0;
	char path[4096];

	if (n < 2)
		return n;
	qsort(ents, n, sizeof(ents[0]), dirent_cmp);
	for (i = 0; i < n; i++) {
		if (kept > 0 && strcmp(ents[kept - 1].name, ents[i].name) == 0) {
			snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "",
				 ents[i].name);
			if (remote_first_time(r, "twice", path))
				MCFS_WARN(
				    "store listing has '%s' twice, as %s and as %s: shown once, "
				    "as %s (as a lookup of that name answers)",
				    path, kind_name(ents[kept - 1].attr.mode),
				    kind_name(ents[i].attr.mode),
				    kind_name(ents[kept - 1].attr.mode));
			continue;
		}
		if (kept != i)
			ents[kept] = ents[i];
		kept++;
	}
	return kept;
}

/*
 * Whether the symlink at @path may be shown, under r->links. @target: the
 * link's target when the caller has it, else NULL (it is read here). Logs a
 * refusal once. Returns true to show it.
 */
static bool link_allowed(struct remote *r, const char *path, const char *target)
{
	char buf[4096];
	const char *why;
	int rc;

	if (r->links == REMOTE_LINKS_ANY)
		return true;
	if (r->links == REMOTE_LINKS_NONE) {
		if (remote_first_time(r, "link", path))
			MCFS_WARN("store symlink '%s' is hidden (symlinks=none)", path);
		return false;
	}
	if (!target) {
		remote_count(&r->requests, 1);
		rc = r->ops->readlink(r, path, buf, sizeof(buf));
		if (rc < 0)
			return false; /* gone since it was listed: nothing to show */
		target = buf;
	}
	why = remote_link_refusal(path, target);
	if (why && remote_first_time(r, "link", path))
		MCFS_WARN("store symlink '%s' -> '%s' is hidden: %s (symlinks=any would show it)",
			  path, target, why);
	return why == NULL;
}

/* Hides the symlinks that r->links refuses. */
static size_t filter_links(struct remote *r, const char *dir, struct cache_dirent *ents, size_t n)
{
	char path[4096];
	size_t i, kept = 0;

	for (i = 0; i < n; i++) {
		if (S_ISLNK(ents[i].attr.mode) && r->links != REMOTE_LINKS_ANY) {
			snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "",
				 ents[i].name);
			if (!link_allowed(r, path, NULL))
				continue;
		}
		if (kept != i)
			ents[kept] = ents[i];
		kept++;
	}
	return kept;
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
	if (rc == 0 && S_ISLNK(out->mode) && !link_allowed(r, path, NULL))
		return -ENOENT;
	return rc;
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
	*n = filter_names(r, path, *out, *n);
	*n = remote_dedupe(r, path, *out, *n);
	*n = filter_links(r, path, *out, *n);
	return 0;
}

int remote_readlink(struct remote *r, const char *path, char *buf, size_t len)
{
	int rc;

	if (remote_check_path(path) < 0)
		return -EINVAL;
	remote_count(&r->requests, 1);
	rc = r->ops->readlink(r, path, buf, len);
	if (rc >= 0 && !link_allowed(r, path, buf))
		return -ENOENT; /* a link hidden from listings and lookups reads as gone */
	return rc;
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
