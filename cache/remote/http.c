/*
 * http.c - the http(s) backend: any server that answers Range requests.
 *
 * Design: names come from a listing, bytes from ranged GETs.
 *  - Listing: the JSON manifest at <base>/<cfg->manifest> (manifest.h) when
 *    the server has one, loaded at open and re-fetched (conditionally, with
 *    If-None-Match) once it is older than cfg->attr_ttl; otherwise nginx's
 *    `autoindex_format json` page of each directory (<base>/<dir>/).
 *  - stat of a file is a HEAD, always: its ETag (as sent, quotes kept) or,
 *    without one, its Last-Modified is the version that reads carry, so a
 *    reopen after the file was replaced sees the new version; a version is
 *    taken only once settled (unsettled_ns()), and a file with neither is
 *    not read unless cfg->unversioned says "trust". An open's
 *    confirmation (stat_file) is that HEAD alone, with no manifest refresh.
 *    Directories and symlinks come from the manifest, or (autoindex) from the
 *    redirect that nginx answers for a directory named without its trailing
 *    '/'.
 *  - read: one ranged GET with If-Match (strong ETag) plus If-Range, or
 *    If-Unmodified-Since/If-Range with the date when there is no strong ETag;
 *    the fetch layer also checks the answer's ETag and total size, and that
 *    it is exactly the asked bytes.
 *  - redirects (a CDN's, a mirror's): every GET and HEAD follows them, within
 *    the fetch layer's bounds (fetch_int.h); the HEAD of a file and the GET of
 *    its bytes take the same path, so the version is the final server's. A
 *    redirect that only adds a '/' (nginx, for a directory) still says
 *    "directory" (resp.dir_redirect).
 *
 * Locking: http->lock (a rwlock) guards the manifest pointer; lookups hold it
 * shared (pure memory work), a refresh fetches without it and takes it
 * exclusively only to swap the pointer.
 */
#define _GNU_SOURCE
#include "fetch_int.h"
#include "manifest.h"
#include "net_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MANIFEST_BODY_MAX (256u << 20) /* ~1.5 M entries */
#define LISTING_BODY_MAX (64u << 20)

struct http {
	struct remote_fetch *fetch;
	char base[REMOTE_URL_MAX];   /* no trailing '/' */
	char shown[REMOTE_URL_MAX];  /* base without user:password@, for log lines */
	pthread_rwlock_t lock;	     /* guards man, man_etag, man_loaded_ns */
	struct remote_manifest *man; /* NULL: no manifest, autoindex listings */
	char man_etag[REMOTE_ETAG_MAX];
	unsigned long long man_loaded_ns;
	bool refreshing;	      /* guarded by lock (write): one refresh at a time */
	atomic_bool said_unversioned; /* the unversioned refusal was logged */
};

/* URL of a path: base + '/' + encoded path (+ '/' for a directory). */
static int path_url(const struct http *h, const char *path, bool dir, char *url, size_t len)
{
	char enc[REMOTE_URL_MAX];
	int n = remote_uri_encode(path, true, enc, sizeof(enc));

	if (n < 0)
		return n;
	if ((size_t)snprintf(url, len, "%s/%s%s", h->base, enc, dir && path[0] ? "/" : "") >= len)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * Fetches the manifest. Returns 0 with *out set, 1 if unchanged (304), or a
 * negative errno: -ENOENT when the server has none.
 */
static int load_manifest(struct remote *r, struct http *h, const char *etag,
			 struct remote_manifest **out, char *new_etag)
{
	char url[REMOTE_URL_MAX];
	struct remote_req req = {
	    .method = "GET", .url = url, .max_body = MANIFEST_BODY_MAX, .follow = true};
	struct remote_resp resp;
	int rc;

	rc = path_url(h, r->cfg->manifest, false, url, sizeof(url));
	if (rc < 0)
		return rc;
	req.quiet_404 = true;
	req.if_none_match = etag && etag[0] ? etag : NULL;
	rc = remote_fetch_do(h->fetch, &req, &resp);
	remote_count(&r->requests, 1);
	if (rc == 0 && resp.status == 304) {
		free(resp.body);
		return 1;
	}
	if (rc == 0 && resp.status != 200)
		rc = -EIO;
	if (rc == -EACCES || rc == -ESTALE || rc == -ERANGE) {
		MCFS_ERR("http: GET %s/%s: the server refused it (%s)", h->shown, r->cfg->manifest,
			 resp.error);
		rc = rc == -EACCES ? rc : -EIO;
	}
	if (rc == 0) {
		rc = remote_manifest_parse(resp.body ? resp.body : "", resp.body_len, out);
		if (rc < 0)
			MCFS_ERR("http: %s/%s is not an mcfs manifest (write one with `mcfs "
				 "manifest DIR > DIR/%s`)",
				 h->shown, r->cfg->manifest, r->cfg->manifest);
		else
			snprintf(new_etag, REMOTE_ETAG_MAX, "%s", resp.etag);
	}
	free(resp.body);
	return rc;
}

static int http_open(struct remote *r)
{
	const char *src = r->cfg->source;
	struct remote_manifest *man = NULL;
	struct remote_fetch_conf fc;
	struct http *h;
	size_t n;
	int rc;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	snprintf(h->base, sizeof(h->base), "%s", src);
	n = strlen(h->base);
	while (n > 0 && h->base[n - 1] == '/')
		h->base[--n] = '\0';
	mcfs_url_redact(h->base, h->shown, sizeof(h->shown));
	pthread_rwlock_init(&h->lock, NULL);
	remote_fetch_conf_of(r, &fc);
	rc = remote_fetch_new(&fc, &h->fetch);
	if (rc < 0)
		goto fail;
	rc = load_manifest(r, h, NULL, &man, h->man_etag);
	if (rc == -ENOENT) {
		MCFS_INFO("http: no %s at %s: listing directories from the server's "
			  "autoindex (JSON)",
			  r->cfg->manifest, h->shown);
		rc = 0;
	} else if (rc == 0) {
		MCFS_INFO("http: manifest lists %zu entries", remote_manifest_count(man));
	} else if (r->cfg->offline && r->cfg->cache_dir[0]) {
		/* -o offline (issue 5): the server is down; names come from cache_dir */
		MCFS_WARN("http: %s is not reachable: offline, no manifest", h->shown);
		rc = 0;
	}
	if (rc < 0)
		goto fail;
	h->man = man;
	h->man_loaded_ns = mcfs_now_ns();
	r->priv = h;
	return 0;
fail:
	remote_fetch_free(h->fetch);
	pthread_rwlock_destroy(&h->lock);
	free(h);
	return rc;
}

static void http_close(struct remote *r)
{
	struct http *h = r->priv;

	remote_manifest_free(h->man);
	remote_fetch_free(h->fetch);
	pthread_rwlock_destroy(&h->lock);
	free(h);
}

/* Re-fetches a manifest older than attr_ttl; errors keep the old one. */
static void maybe_refresh(struct remote *r, struct http *h)
{
	unsigned long long now = mcfs_now_ns(), ttl = (unsigned long long)(r->cfg->attr_ttl * 1e9);
	struct remote_manifest *fresh = NULL, *old = NULL;
	char etag[REMOTE_ETAG_MAX], new_etag[REMOTE_ETAG_MAX] = "";
	int rc;

	pthread_rwlock_wrlock(&h->lock);
	if (!h->man || h->refreshing || mcfs_since_ns(now, h->man_loaded_ns) < ttl) {
		pthread_rwlock_unlock(&h->lock);
		return;
	}
	h->refreshing = true;
	snprintf(etag, sizeof(etag), "%s", h->man_etag);
	pthread_rwlock_unlock(&h->lock);

	rc = load_manifest(r, h, etag, &fresh, new_etag);

	pthread_rwlock_wrlock(&h->lock);
	h->refreshing = false;
	h->man_loaded_ns = mcfs_now_ns();
	if (rc == 0) {
		old = h->man;
		h->man = fresh;
		snprintf(h->man_etag, sizeof(h->man_etag), "%s", new_etag);
	}
	pthread_rwlock_unlock(&h->lock);
	/* a reader may still use old: readers hold the lock while they do, and we
	 * took it exclusively above, so none can */
	remote_manifest_free(old);
}

/*
 * Last-Modified, and nginx's ETag (made of it and the size), count whole
 * seconds: a rewrite within the second a version names keeps its validators,
 * and reads of the old and the new bytes would pass If-Match alike. So a
 * version is trusted only once the server's clock (its Date; ours if it sends
 * none) is SETTLE_S past its Last-Modified: any later rewrite then names a
 * later second. 2 s, not 1, because a server may stamp Date after it looked at
 * the file. Until then the HEAD is asked again, up to SETTLE_TRIES times (a
 * file still being written after that is refused, -EAGAIN, not guessed at).
 */
#define SETTLE_S 2
#define SETTLE_TRIES 5

/* How long until @resp's Last-Modified is settled, in ns; 0 if it is. */
static int64_t unsettled_ns(const struct remote_resp *resp)
{
	const int64_t settle = (int64_t)SETTLE_S * 1000000000;
	struct timespec ts;
	int64_t now, age;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = resp->date_ns ? resp->date_ns : (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	age = now - resp->mtime_ns;

	if (!resp->mtime_ns)
		return 0;
	/* a Last-Modified far in the future is no write in progress: waiting
	 * would never end, and a rewrite keeping it is as likely as any */
	if (age >= settle || age < -settle)
		return 0;
	return settle - age;
}

/* The version that reads will carry, from a HEAD's answer. */
static void version_of(const struct remote_resp *resp, const struct cache_attr *a, char *out,
		       size_t len)
{
	if (resp->etag[0])
		snprintf(out, len, "%s", resp->etag);
	else if (resp->last_modified[0])
		snprintf(out, len, "lm:%s", resp->last_modified);
	else
		snprintf(out, len, "size:%llu", (unsigned long long)a->size);
}

/* HEAD of a file. Fills size, mtime and version; 0, -ENOENT, -EIO, -EAGAIN (a
 * file that kept changing within the second its Last-Modified names)... */
static int head_file(struct http *h, const char *path, struct cache_attr *out, long *status,
		     char *location, size_t loclen)
{
	char url[REMOTE_URL_MAX];
	struct remote_req req = {.method = "HEAD", .url = url, .quiet_404 = true, .follow = true};
	struct remote_resp resp;
	int64_t wait = 0;
	int rc, tries;

	rc = path_url(h, path, false, url, sizeof(url));
	if (rc < 0)
		return rc;
	for (tries = 0;; tries++) {
		rc = remote_fetch_do(h->fetch, &req, &resp);
		free(resp.body);
		*status = resp.dir_redirect ? 301 : resp.status;
		snprintf(location, loclen, "%s", resp.location);
		if (rc == -EACCES && path[0])
			MCFS_ERR("http: HEAD %s/%s: the server refused it (%s)", h->shown, path,
				 resp.error);
		if (rc < 0 || *status != 200)
			return rc;
		wait = unsettled_ns(&resp);
		if (wait == 0)
			break;
		if (tries == SETTLE_TRIES) {
			MCFS_ERR("http: %s/%s keeps changing (Last-Modified %s, %d s before the "
				 "server's clock after %d tries): refused until it settles",
				 h->shown, path, resp.last_modified, SETTLE_S, tries + 1);
			return -EAGAIN;
		}
		MCFS_DEBUG("http: %s/%s was modified within %d s (Last-Modified %s): asking "
			   "again in %lld ms",
			   h->shown, path, SETTLE_S, resp.last_modified,
			   (long long)(wait / 1000000));
		struct timespec nap = {.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};

		while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
			;
	}
	out->mode = S_IFREG | 0444;
	out->size = resp.content_length > 0 ? (uint64_t)resp.content_length : 0;
	if (resp.mtime_ns)
		out->mtime_ns = resp.mtime_ns;
	version_of(&resp, out, out->version, sizeof(out->version));
	return 0;
}

static int stat_manifest(struct http *h, const char *path, struct cache_attr *out)
{
	char loc[8];
	long status;
	int rc;

	pthread_rwlock_rdlock(&h->lock);
	rc = remote_manifest_stat(h->man, path, out, NULL);
	pthread_rwlock_unlock(&h->lock);
	if (rc < 0 || (out->mode & S_IFMT) != S_IFREG)
		return rc;
	/* the server's own validator, now: the manifest's may be stale */
	rc = head_file(h, path, out, &status, loc, sizeof(loc));
	if (rc == 0 && status != 200) {
		MCFS_ERR("http: HEAD %s/%s answered HTTP %ld for a file the manifest lists",
			 h->shown, path, status);
		rc = -EIO;
	}
	return rc;
}

static int http_stat(struct remote *r, const char *path, struct cache_attr *out)
{
	struct http *h = r->priv;
	char loc[512], url[REMOTE_URL_MAX];
	struct remote_req req = {.method = "HEAD", .url = url, .quiet_404 = true, .follow = true};
	struct remote_resp resp;
	long status = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	maybe_refresh(r, h);
	if (h->man)
		return stat_manifest(h, path, out);
	if (path[0]) {
		rc = head_file(h, path, out, &status, loc, sizeof(loc));
		if (rc < 0 || status == 200)
			return rc;
		if (status < 300 || status >= 400) {
			MCFS_ERR("http: HEAD %s/%s answered HTTP %ld", h->shown, path, status);
			return -EIO;
		}
		memset(out, 0, sizeof(*out));
	}
	/* the root, or a path redirected (nginx: "dir" -> "dir/"): a directory? */
	rc = path_url(h, path, true, url, sizeof(url));
	if (rc < 0)
		return rc;
	rc = remote_fetch_do(h->fetch, &req, &resp);
	free(resp.body);
	if (rc == -EACCES && !path[0]) {
		MCFS_ERR("http: %s has no %s and its directory listing is refused (HTTP 403): "
			 "serve a manifest (`mcfs manifest DIR > DIR/%s`) or enable nginx "
			 "`autoindex on; autoindex_format json;`",
			 h->shown, r->cfg->manifest, r->cfg->manifest);
		return rc;
	}
	if (rc == -ENOENT && !path[0]) {
		/* the mount fails on this: say what the server said, not just ENOENT */
		MCFS_ERR("http: %s/ answered HTTP %ld: no such directory on the server, and no %s "
			 "there",
			 h->shown, resp.status, r->cfg->manifest);
		return rc;
	}
	if (rc < 0)
		return rc;
	if (resp.status != 200)
		return -ENOENT;
	out->mode = S_IFDIR | 0555;
	out->mtime_ns = resp.mtime_ns;
	return 0;
}

/*
 * For an open's confirmation: one HEAD, whatever the manifest says (a
 * manifest only names files; the server's HEAD is the version). Anything but
 * 200 or 404 (a redirect: a directory now) gets the full stat.
 */
static int http_stat_file(struct remote *r, const char *path, struct cache_attr *out)
{
	struct http *h = r->priv;
	long status = 0;
	char loc[8];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = head_file(h, path, out, &status, loc, sizeof(loc));
	if (rc < 0 || status == 200)
		return rc;
	return http_stat(r, path, out);
}

static int http_list(struct remote *r, const char *path, struct cache_dirent **out, size_t *n)
{
	struct http *h = r->priv;
	char url[REMOTE_URL_MAX];
	struct remote_req req = {
	    .method = "GET", .url = url, .max_body = LISTING_BODY_MAX, .follow = true};
	struct remote_resp resp;
	int rc;

	maybe_refresh(r, h);
	if (h->man) {
		pthread_rwlock_rdlock(&h->lock);
		rc = remote_manifest_list(h->man, path, out, n);
		pthread_rwlock_unlock(&h->lock);
		return rc;
	}
	rc = path_url(h, path, true, url, sizeof(url));
	if (rc < 0)
		return rc;
	req.quiet_404 = true;
	rc = remote_fetch_do(h->fetch, &req, &resp);
	if (rc == 0) {
		char what[REMOTE_URL_MAX + 8];

		snprintf(what, sizeof(what), "%s/%s%s", h->shown, path, path[0] ? "/" : "");
		rc =
		    remote_autoindex_parse(resp.body ? resp.body : "", resp.body_len, what, out, n);
		if (rc == -EINVAL) {
			MCFS_ERR("http: the listing at %s/%s is not JSON: serve a manifest (`mcfs "
				 "manifest DIR > DIR/%s`) or set nginx `autoindex_format json;`",
				 h->shown, path, r->cfg->manifest);
			rc = -EIO;
		}
	}
	free(resp.body);
	return rc;
}

static int http_readlink(struct remote *r, const char *path, char *buf, size_t len)
{
	struct http *h = r->priv;
	const char *target = NULL;
	struct cache_attr a;
	int rc = -EINVAL;

	if (!h->man)
		return -EINVAL;
	pthread_rwlock_rdlock(&h->lock);
	if (remote_manifest_stat(h->man, path, &a, &target) == 0 && target) {
		snprintf(buf, len, "%s", target);
		rc = (int)MCFS_MIN(strlen(target), len ? len - 1 : 0);
	}
	pthread_rwlock_unlock(&h->lock);
	return rc;
}

static ssize_t http_read(struct remote *r, const struct remote_obj *obj, uint64_t off, void *buf,
			 size_t len)
{
	struct http *h = r->priv;
	char url[REMOTE_URL_MAX];
	struct remote_req req = {.method = "GET", .url = url, .buf = buf, .follow = true};
	struct remote_resp resp;
	const char *v = obj->version;
	int rc;

	if (off >= obj->size)
		return 0;
	if (strncmp(v, "size:", 5) == 0 && strcmp(r->cfg->unversioned, "trust") != 0) {
		if (!atomic_exchange(&h->said_unversioned, true))
			MCFS_ERR("http: %s sends neither ETag nor Last-Modified for %s (nor, "
				 "likely, for its other files): a file replaced by one of the same "
				 "size could not be told from the one cached, so such files are "
				 "not read (unversioned=trust reads them, for a store whose files "
				 "never change in place)",
				 h->shown, obj->path);
		return -EIO;
	}
	rc = path_url(h, obj->path, false, url, sizeof(url));
	if (rc < 0)
		return rc;
	req.off = off;
	req.len = (size_t)MCFS_MIN((uint64_t)len, obj->size - off);
	req.expect_total = obj->size;
	if (v[0] == '"') {
		req.if_match = v;
		req.if_range = v;
		req.expect_etag = v;
	} else if (strncmp(v, "lm:", 3) == 0) {
		req.if_unmodified_since = v + 3;
		req.if_range = v + 3;
	} else if (strncmp(v, "W/", 2) == 0) {
		req.expect_etag = v; /* weak: no server-side check exists; compare here */
	}
	rc = remote_fetch_do(h->fetch, &req, &resp);
	free(resp.body);
	if (rc == -ESTALE || rc == -ENOENT) {
		MCFS_ERR("http: %s/%s changed on the server since it was opened (version %s, %llu "
			 "bytes; now %s): read of bytes %llu-%llu refused, reopen to see the new "
			 "version",
			 h->shown, obj->path, v, (unsigned long long)obj->size,
			 rc == -ENOENT ? "gone" : (resp.etag[0] ? resp.etag : "HTTP 412"),
			 (unsigned long long)off, (unsigned long long)(off + req.len - 1));
		return -ESTALE;
	}
	if (rc == -EACCES)
		MCFS_ERR("http: GET %s/%s bytes %llu-%llu: the server refused it (%s)", h->shown,
			 obj->path, (unsigned long long)off,
			 (unsigned long long)(off + req.len - 1), resp.error);
	if (rc < 0)
		return rc;
	return (ssize_t)resp.got; /* req.len: the fetch layer counted them */
}

static int http_statfs(struct remote *r, uint64_t *total, uint64_t *avail)
{
	(void)r;
	*total = 0; /* a web server has no size; read-only, so nothing is free */
	*avail = 0;
	return 0;
}

const struct remote_ops remote_http_ops = {
    .kind = "http",
    .open = http_open,
    .close = http_close,
    .stat = http_stat,
    .stat_file = http_stat_file,
    .list = http_list,
    .readlink = http_readlink,
    .read = http_read,
    .statfs = http_statfs,
};
