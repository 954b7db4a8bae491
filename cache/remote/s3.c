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
	struct remote_s3_bucket b; /* the bucket's URL, prefix and signing */
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

/* Splits s3://bucket[/prefix] into b->bucket and b->prefix ("" or "p/q/"). */
static int parse_url(struct remote_s3_bucket *b, const char *url, const char *who)
{
	const char *s = url + 5, *slash = strchr(s, '/');
	size_t blen = slash ? (size_t)(slash - s) : strlen(s), n;

	if (strncmp(url, "s3://", 5) != 0 || blen == 0 || blen >= sizeof(b->bucket)) {
		MCFS_ERR("%s: no bucket in '%s' (expected s3://bucket[/prefix])", who, url);
		return -EINVAL;
	}
	memcpy(b->bucket, s, blen);
	b->bucket[blen] = '\0';
	b->prefix[0] = '\0';
	if (!slash)
		return 0;
	while (*slash == '/')
		slash++;
	snprintf(b->prefix, sizeof(b->prefix) - 1, "%s", slash);
	n = strlen(b->prefix);
	while (n > 0 && b->prefix[n - 1] == '/')
		b->prefix[--n] = '\0';
	if (n > 0 && remote_check_path(b->prefix) < 0) {
		MCFS_ERR("%s: prefix '%s' has empty, '.' or '..' components", who, b->prefix);
		return -EINVAL;
	}
	if (n > 0)
		strcat(b->prefix, "/");
	return 0;
}

int remote_s3_bucket_init(struct remote_s3_bucket *b, const struct remote_s3_conf *conf)
{
	int rc;

	memset(b, 0, sizeof(*b));
	snprintf(b->region, sizeof(b->region), "%s", conf->region);
	b->virtual_host = strcmp(conf->addressing, "virtual") == 0;
	rc = parse_url(b, conf->url, conf->who);
	if (rc == 0)
		rc = remote_s3_base_url(conf->endpoint, b->bucket, b->region, b->virtual_host,
					b->base, sizeof(b->base));
	if (rc < 0 || conf->anonymous)
		return rc;
	if (remote_creds_resolve(conf, &b->creds) < 0) {
		MCFS_WARN("%s: no credentials in the options, the environment or "
			  "~/.aws/credentials: sending unsigned (anonymous) requests",
			  conf->who);
		return 0;
	}
	b->sig.access_key = b->creds.access_key;
	b->sig.secret_key = b->creds.secret_key;
	b->sig.session_token = b->creds.session_token;
	b->sig.region = b->region;
	MCFS_INFO("%s: signing with credentials from %s, region %s", conf->who, b->creds.source,
		  b->region);
	return 0;
}

void remote_s3_bucket_clear(struct remote_s3_bucket *b)
{
	memset(&b->creds, 0, sizeof(b->creds));
	memset(&b->sig, 0, sizeof(b->sig));
}

int remote_s3_object(const struct remote_s3_bucket *b, const char *key, struct remote_req *req,
		     char url[REMOTE_URL_MAX], char what[REMOTE_URL_MAX])
{
	char full[REMOTE_URL_MAX], enc[REMOTE_URL_MAX];
	int n;

	if ((size_t)snprintf(full, sizeof(full), "%s%s", b->prefix, key) >= sizeof(full))
		return -ENAMETOOLONG;
	n = remote_uri_encode(full, true, enc, sizeof(enc));
	if (n < 0)
		return n;
	if ((size_t)snprintf(url, REMOTE_URL_MAX, "%s/%s", b->base, enc) >= REMOTE_URL_MAX ||
	    (size_t)snprintf(what, REMOTE_URL_MAX, "s3://%s/%s", b->bucket, full) >= REMOTE_URL_MAX)
		return -ENAMETOOLONG;
	req->url = url;
	req->what = what;
	req->sig = b->sig.access_key ? &b->sig : NULL;
	return 0;
}

static int s3_open(struct remote *r)
{
	const struct cfg *cfg = r->cfg;
	struct remote_fetch_conf fc;
	struct remote_s3_conf conf = {
	    .url = cfg->source,
	    .endpoint = cfg->endpoint,
	    .region = cfg->region,
	    .addressing = cfg->addressing,
	    .profile = cfg->profile,
	    .access_key = cfg->access_key,
	    .secret_key = cfg->secret_key,
	    .session_token = cfg->session_token,
	    .anonymous = cfg->anonymous,
	    .who = "s3",
	};
	struct s3 *s;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* the default region is us-east-1; the SDKs' variables override only that */
	if (strcmp(cfg->region, "us-east-1") == 0 && env_or_null("AWS_REGION"))
		conf.region = env_or_null("AWS_REGION");
	else if (strcmp(cfg->region, "us-east-1") == 0 && env_or_null("AWS_DEFAULT_REGION"))
		conf.region = env_or_null("AWS_DEFAULT_REGION");
	rc = remote_s3_bucket_init(&s->b, &conf);
	remote_fetch_conf_of(r, &fc);
	if (rc == 0)
		rc = remote_fetch_new(&fc, &s->fetch);
	if (rc < 0) {
		remote_s3_bucket_clear(&s->b);
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
	remote_s3_bucket_clear(&s->b);
	free(s);
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
			 code, what, s->b.sig.access_key ? s->b.creds.source : "anonymous access",
			 resp->error);
	else
		MCFS_ERR("S3 refused access (%s) to %s with %s. The service said: %s",
			 code[0] ? code : "HTTP 403", what,
			 s->b.sig.access_key ? "the credentials given" : "anonymous access",
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
	if ((size_t)snprintf(url, sizeof(url), "%s%s?%s", s->b.base, s->b.virtual_host ? "/" : "",
			     query) >= sizeof(url))
		return -ENAMETOOLONG;
	snprintf(what, sizeof(what), "s3://%s/%s (list)", s->b.bucket, dir_prefix);
	req.url = url;
	req.sig = s->b.sig.access_key ? &s->b.sig : NULL;
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
	snprintf(dir, sizeof(dir), "%s%s%s", s->b.prefix, path, path[0] ? "/" : "");
	do {
		rc = list_page(r, s, dir, 1000, token, &page);
		if (rc < 0) {
			free(page.ents);
			return rc;
		}
		if (page.truncated && !page.token[0]) {
			MCFS_ERR("s3: listing of s3://%s/%s is truncated but has no continuation "
				 "token",
				 s->b.bucket, dir);
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

	rc = remote_s3_object(&s->b, path, &req, url, what);
	if (rc < 0)
		return rc;
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
	snprintf(dir, sizeof(dir), "%s%s%s", s->b.prefix, path, path[0] ? "/" : "");
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
	rc = remote_s3_object(&s->b, obj->path, &req, url, what);
	if (rc < 0)
		return rc;
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
