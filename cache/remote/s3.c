/*
 * s3.c - the s3 backend: s3://bucket[/prefix] on any S3-compatible service.
 *
 * Design: directories are key prefixes. stat of a path HEADs the object and,
 * if there is none, asks ListObjectsV2 for one key under "path/"; list walks
 * ListObjectsV2 pages (delimiter '/', continuation tokens) and takes names,
 * sizes, ETags and dates from the listing itself, so a readdir costs one
 * request per 1000 names. read is one ranged GET per call, carrying the ETag
 * captured at open in If-Match; the fetch layer also checks the answer's ETag
 * and total size, so a replaced object gives -ESTALE, never mixed bytes.
 *
 * Signing is libcurl's SigV4 (CURLOPT_AWS_SIGV4). curl 7.88 signs the query
 * string as given, so every query is built here already canonical: sorted,
 * each key and value percent-encoded (remote_query_build).
 *
 * Addressing: path style (endpoint/bucket/key) or virtual host
 * (bucket.endpoint/key). The endpoint is cfg->endpoint, else
 * AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS's for the region.
 *
 * Refuses: keys that would escape the mount (s3_parse.c); logging secrets:
 * log lines name s3://bucket/key and the credential source, never a key;
 * redirects: no request sets req.follow, since a signed request goes to its
 * own endpoint only (fetch.c). A 301 PermanentRedirect (a wrong region or
 * endpoint) or a 307 fails with the service's words and the bucket's region
 * when the answer names it (fetch_status.c).
 */
#define _GNU_SOURCE
#include "fetch_int.h"
#include "net_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S3_LIST_BODY_MAX (16u << 20) /* a 1000-key page is ~300 KiB; generous */

struct s3 {
	struct remote_fetch *fetch;
	char bucket[256];
	char prefix[CFG_STR_MAX];  /* "" or "dir/sub/": the store's root as a key prefix */
	char base[REMOTE_URL_MAX]; /* URL of the bucket, no trailing '/' */
	bool virtual_host;
	struct remote_creds creds;
	struct remote_sigv4 sig; /* points into creds; access_key NULL = anonymous */
	char region[64];
};

static const char *env_or_null(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int remote_s3_base_url(const char *endpoint, const char *bucket, const char *region,
		       bool virtual_host, char *out, size_t outlen)
{
	const char *ep = endpoint[0] ? endpoint : env_or_null("AWS_ENDPOINT_URL_S3");
	char def[256], scheme[16];
	const char *host;
	size_t n;
	int len;

	if (!ep)
		ep = env_or_null("AWS_ENDPOINT_URL");
	if (!ep) {
		snprintf(def, sizeof(def), "https://s3.%s.amazonaws.com", region);
		ep = def;
	}
	host = strstr(ep, "://");
	if (!host || (size_t)(host - ep) >= sizeof(scheme)) {
		MCFS_ERR("s3: endpoint '%s' is not an http(s) URL", ep);
		return -EINVAL;
	}
	memcpy(scheme, ep, (size_t)(host - ep));
	scheme[host - ep] = '\0';
	host += 3;
	n = strlen(host);
	while (n > 0 && host[n - 1] == '/')
		n--;
	if (virtual_host)
		len = snprintf(out, outlen, "%s://%s.%.*s", scheme, bucket, (int)n, host);
	else
		len = snprintf(out, outlen, "%s://%.*s/%s", scheme, (int)n, host, bucket);
	return len < 0 || (size_t)len >= outlen ? -ENAMETOOLONG : 0;
}

/* Builds s->base from the endpoint, bucket and addressing style. */
static int make_base(struct s3 *s, const struct cfg *cfg)
{
	s->virtual_host = strcmp(cfg->addressing, "virtual") == 0;
	return remote_s3_base_url(cfg->endpoint, s->bucket, s->region, s->virtual_host, s->base,
				  sizeof(s->base));
}

/* Splits s3://bucket/prefix. */
static int parse_source(struct s3 *s, const char *src)
{
	const char *b = src + 5, *slash = strchr(b, '/');
	size_t blen = slash ? (size_t)(slash - b) : strlen(b);
	size_t n;

	if (blen == 0 || blen >= sizeof(s->bucket)) {
		MCFS_ERR("s3: no bucket in '%s' (expected s3://bucket[/prefix])", src);
		return -EINVAL;
	}
	memcpy(s->bucket, b, blen);
	s->bucket[blen] = '\0';
	s->prefix[0] = '\0';
	if (slash) {
		while (*slash == '/')
			slash++;
		snprintf(s->prefix, sizeof(s->prefix) - 1, "%s", slash);
		n = strlen(s->prefix);
		while (n > 0 && s->prefix[n - 1] == '/')
			s->prefix[--n] = '\0';
		if (n > 0 && remote_check_path(s->prefix) < 0) {
			MCFS_ERR("s3: prefix '%s' has empty, '.' or '..' components", s->prefix);
			return -EINVAL;
		}
		if (n > 0)
			strcat(s->prefix, "/");
	}
	return 0;
}

static int s3_open(struct remote *r)
{
	const struct cfg *cfg = r->cfg;
	struct s3 *s;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* the default region is us-east-1; the SDKs' variables override only that */
	snprintf(s->region, sizeof(s->region), "%s", cfg->region);
	if (strcmp(cfg->region, "us-east-1") == 0 &&
	    (env_or_null("AWS_REGION") || env_or_null("AWS_DEFAULT_REGION")))
		snprintf(s->region, sizeof(s->region), "%s",
			 env_or_null("AWS_REGION") ? env_or_null("AWS_REGION")
						   : env_or_null("AWS_DEFAULT_REGION"));
	rc = parse_source(s, cfg->source);
	if (rc == 0)
		rc = make_base(s, cfg);
	if (rc == 0 && !cfg->anonymous) {
		if (remote_creds_resolve(cfg, &s->creds) < 0) {
			MCFS_WARN("s3: no credentials in the options, the environment or "
				  "~/.aws/credentials: sending unsigned (anonymous) requests");
		} else {
			s->sig.access_key = s->creds.access_key;
			s->sig.secret_key = s->creds.secret_key;
			s->sig.session_token = s->creds.session_token;
			s->sig.region = s->region;
			MCFS_INFO("s3: signing with credentials from %s, region %s",
				  s->creds.source, s->region);
		}
	}
	if (rc == 0)
		rc = remote_fetch_new(r, &s->fetch);
	if (rc < 0) {
		free(s);
		return rc;
	}
	r->priv = s;
	return 0;
}

static void s3_close(struct remote *r)
{
	struct s3 *s = r->priv;

	remote_fetch_free(s->fetch);
	memset(&s->creds, 0, sizeof(s->creds));
	free(s);
}

/* URL of an object: base + '/' + encoded key. */
static int object_url(const struct s3 *s, const char *path, char *url, size_t len, char *what,
		      size_t wlen)
{
	char key[REMOTE_URL_MAX], enc[REMOTE_URL_MAX];
	int n;

	snprintf(key, sizeof(key), "%s%s", s->prefix, path);
	n = remote_uri_encode(key, true, enc, sizeof(enc));
	if (n < 0)
		return n;
	if ((size_t)snprintf(url, len, "%s/%s", s->base, enc) >= len)
		return -ENAMETOOLONG;
	if ((size_t)snprintf(what, wlen, "s3://%s/%s", s->bucket, key) >= wlen)
		return -ENAMETOOLONG;
	return 0;
}

/* Logs a 401 or 403 (@resp) to a request on @what. */
static void log_refused(const struct s3 *s, const struct remote_resp *resp, const char *what)
{
	const char *code = resp->code;

	if (strcmp(code, "SignatureDoesNotMatch") == 0 || strcmp(code, "InvalidAccessKeyId") == 0 ||
	    strcmp(code, "InvalidToken") == 0 || strcmp(code, "ExpiredToken") == 0 ||
	    strcmp(code, "InvalidSecurity") == 0)
		MCFS_ERR("S3 refused the credentials (%s) for %s: check the access key and secret "
			 "(from %s). The service said: %s",
			 code, what, s->sig.access_key ? s->creds.source : "anonymous access",
			 resp->error);
	else
		MCFS_ERR("S3 refused access (%s) to %s with %s. The service said: %s",
			 code[0] ? code : "HTTP 403", what,
			 s->sig.access_key ? "the credentials given" : "anonymous access",
			 resp->error);
}

/*
 * One ListObjectsV2 page of @dir_prefix (a key prefix, '/'-ended or "").
 * Appends to page. Returns 0 or a negative errno (logged).
 */
static int list_page(struct remote *r, struct s3 *s, const char *dir_prefix, unsigned max_keys,
		     const char *token, struct remote_s3_page *page)
{
	char query[3072], url[REMOTE_URL_MAX + 3072], what[REMOTE_URL_MAX], mk[16];
	const char *kv[10];
	size_t n = 0;
	struct remote_resp resp;
	struct remote_req req = {.method = "GET", .what = what, .max_body = S3_LIST_BODY_MAX};
	int rc;

	snprintf(mk, sizeof(mk), "%u", max_keys);
	kv[n++] = "list-type", kv[n++] = "2";
	kv[n++] = "delimiter", kv[n++] = "/";
	kv[n++] = "max-keys", kv[n++] = mk;
	kv[n++] = "prefix", kv[n++] = dir_prefix;
	if (token && *token)
		kv[n++] = "continuation-token", kv[n++] = token;
	rc = remote_query_build(kv, n / 2, query, sizeof(query));
	if (rc < 0)
		return rc;
	if ((size_t)snprintf(url, sizeof(url), "%s%s?%s", s->base, s->virtual_host ? "/" : "",
			     query) >= sizeof(url))
		return -ENAMETOOLONG;
	snprintf(what, sizeof(what), "s3://%s/%s (list)", s->bucket, dir_prefix);
	req.url = url;
	req.sig = s->sig.access_key ? &s->sig : NULL;
	req.quiet_404 = true;
	rc = remote_fetch_do(s->fetch, &req, &resp);
	if (resp.body && (rc == 0 || resp.status >= 400)) {
		int prc = remote_s3_parse_list(resp.body, resp.body_len, dir_prefix, page);

		if (rc == 0)
			rc = prc;
	}
	if (rc == -EACCES)
		log_refused(s, &resp, what);
	else if (rc == -ENOENT)
		MCFS_ERR("s3: %s: %s", what, resp.error);
	free(resp.body);
	remote_count(&r->requests, 1);
	return rc;
}

static int s3_list(struct remote *r, const char *path, struct cache_dirent **out, size_t *n)
{
	struct s3 *s = r->priv;
	struct remote_s3_page page;
	char dir[CFG_STR_MAX + REMOTE_URL_MAX / 2];
	char token[sizeof(page.token)] = "";
	int rc;

	memset(&page, 0, sizeof(page));
	snprintf(dir, sizeof(dir), "%s%s%s", s->prefix, path, path[0] ? "/" : "");
	do {
		rc = list_page(r, s, dir, 1000, token, &page);
		if (rc < 0) {
			free(page.ents);
			return rc;
		}
		if (page.truncated && !page.token[0]) {
			MCFS_ERR("s3: listing of s3://%s/%s is truncated but has no continuation "
				 "token",
				 s->bucket, dir);
			free(page.ents);
			return -EIO;
		}
		snprintf(token, sizeof(token), "%s", page.token);
	} while (page.truncated);
	if (page.n == 0 && path[0] && page.refused == 0) {
		free(page.ents);
		return -ENOENT;
	}
	*out = page.ents;
	*n = page.n;
	return 0;
}

/* HEAD of the object @path: 0 with *out filled, -ENOENT for no such key, or the error. */
static int head_object(struct s3 *s, const char *path, struct cache_attr *out)
{
	char url[REMOTE_URL_MAX], what[REMOTE_URL_MAX];
	struct remote_req req = {.method = "HEAD", .url = url, .what = what, .quiet_404 = true};
	struct remote_resp resp;
	int rc;

	rc = object_url(s, path, url, sizeof(url), what, sizeof(what));
	if (rc < 0)
		return rc;
	req.sig = s->sig.access_key ? &s->sig : NULL;
	rc = remote_fetch_do(s->fetch, &req, &resp);
	free(resp.body);
	if (rc == 0) {
		out->mode = S_IFREG | 0444;
		out->size = resp.content_length > 0 ? (uint64_t)resp.content_length : 0;
		out->mtime_ns = resp.mtime_ns;
		snprintf(out->version, sizeof(out->version), "%s", resp.etag);
	} else if (rc == -EACCES) {
		log_refused(s, &resp, what);
	}
	return rc;
}

static int s3_stat(struct remote *r, const char *path, struct cache_attr *out)
{
	struct s3 *s = r->priv;
	char dir[REMOTE_URL_MAX];
	struct remote_s3_page page;
	int rc;

	memset(out, 0, sizeof(*out));
	memset(&page, 0, sizeof(page));
	if (path[0]) {
		rc = head_object(s, path, out);
		if (rc != -ENOENT)
			return rc;
		memset(out, 0, sizeof(*out));
	}
	/* a directory is a prefix with at least one key under it; the root always is */
	snprintf(dir, sizeof(dir), "%s%s%s", s->prefix, path, path[0] ? "/" : "");
	rc = list_page(r, s, dir, 1, NULL, &page);
	free(page.ents);
	if (rc < 0)
		return rc;
	if (path[0] && page.n == 0 && page.refused == 0 && !page.truncated)
		return -ENOENT;
	out->mode = S_IFDIR | 0555;
	return 0;
}

/* For an open's confirmation: the HEAD alone; no such key gets the full stat
 * (a directory now, or gone). */
static int s3_stat_file(struct remote *r, const char *path, struct cache_attr *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	rc = head_object(r->priv, path, out);
	return rc == -ENOENT ? s3_stat(r, path, out) : rc;
}

static int s3_readlink(struct remote *r, const char *path, char *buf, size_t len)
{
	(void)r;
	(void)path;
	(void)buf;
	(void)len;
	return -EINVAL; /* S3 has no symlinks */
}

static ssize_t s3_read(struct remote *r, const struct remote_obj *obj, uint64_t off, void *buf,
		       size_t len)
{
	struct s3 *s = r->priv;
	char url[REMOTE_URL_MAX], what[REMOTE_URL_MAX];
	struct remote_req req = {.method = "GET", .url = url, .what = what, .buf = buf};
	struct remote_resp resp;
	bool strong = obj->version[0] == '"';
	int rc;

	if (off >= obj->size)
		return 0;
	req.off = off;
	req.len = (size_t)MCFS_MIN((uint64_t)len, obj->size - off);
	req.expect_total = obj->size;
	req.if_match = strong ? obj->version : NULL;
	req.expect_etag = obj->version;
	rc = object_url(s, obj->path, url, sizeof(url), what, sizeof(what));
	if (rc < 0)
		return rc;
	req.sig = s->sig.access_key ? &s->sig : NULL;
	rc = remote_fetch_do(s->fetch, &req, &resp);
	free(resp.body);
	if (rc == -ESTALE || rc == -ENOENT)
		MCFS_ERR("%s changed on the store since it was opened (version %s, %llu bytes; "
			 "now %s): read of bytes %llu-%llu refused, reopen to see the new version",
			 what, obj->version, (unsigned long long)obj->size,
			 rc == -ENOENT ? "gone" : (resp.etag[0] ? resp.etag : "HTTP 412"),
			 (unsigned long long)off, (unsigned long long)(off + req.len - 1));
	else if (rc == -EACCES)
		log_refused(s, &resp, what);
	if (rc < 0)
		return rc == -ENOENT ? -ESTALE : rc;
	return (ssize_t)resp.got; /* req.len: the fetch layer counted them */
}

static int s3_statfs(struct remote *r, uint64_t *total, uint64_t *avail)
{
	(void)r;
	*total = 0; /* an object store has no size; read-only, so nothing is free */
	*avail = 0;
	return 0;
}

const struct remote_ops remote_s3_ops = {
    .kind = "s3",
    .open = s3_open,
    .close = s3_close,
    .stat = s3_stat,
    .stat_file = s3_stat_file,
    .list = s3_list,
    .readlink = s3_readlink,
    .read = s3_read,
    .statfs = s3_statfs,
};
