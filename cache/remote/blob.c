/*
 * blob.c - the S3 object client of the shared block tier (blob.h).
 *
 * Design: a thin layer over fetch.c. The client owns a fetch pool of its own
 * and, for it, a struct remote that is only a counter block and a copy of the
 * configuration with the shared_* values in the places fetch.c reads:
 * endpoint, region, credentials, and the limits (below; no retry). That
 * keeps fetch.c's interface as it is for the stores, and keeps the tier's
 * requests out of the store's counters (store_requests stays the origin's
 * traffic, which is what a cluster wants to see fall).
 *
 * Clocks (fetch.c runs them): shared_timeout bounds how long the service may
 * show no progress, not how long a request may take, since a busy service
 * that answers late but answers still saves the origin a read:
 *  - connecting: shared_timeout (or connect_timeout, if shorter);
 *  - then, every request: cut when the service has sent no byte, on it or on
 *    any other request of this node, for shared_timeout (it went silent: the
 *    tier goes down if it stays so, shared.c); while the service sends bytes
 *    on others, a request waits up to BLOB_IDLE_FACTOR times shared_timeout
 *    for bytes of its own (queued behind them; beyond that it is stuck, and
 *    its read goes to the store, the tier staying up);
 *  - a block PUT, once its body is sent: the service stores the object before
 *    it answers (Swift writes and fsyncs it, then updates the container),
 *    silent meanwhile; that wait is bounded by BLOB_IDLE_FACTOR times
 *    shared_timeout alone.
 * Measured with 8 nodes loading 2 GiB at once from one Swift on 2 CPUs
 * (tests/bench/bench_shared.py, 2026-11-25): Swift answered block PUTs 0.7 s
 * after their body at the median and up to 4.2 s, lease PUTs up to 2.7 s,
 * and a block GET's answer sometimes began more than 2 s after it was sent.
 * A no-byte clock of 2 s per request cut those, sent their reads to the
 * origin and counted that working service down: 4.2 times the model from
 * the origin; 3.8 with the PUT's wait for its answer alone; 1.0 with the
 * clocks above and shared.c's patience (a busy service is not down, a
 * leased block waits for room in the write queue).
 *
 * Keys are relative to the URL's prefix and percent-encoded here (SigV4
 * canonical form); requests are signed with the resolved credentials, or sent
 * unsigned when there are none (a bucket open to the cluster's network).
 *
 * Refuses: to log a key or a secret; the credential source is named at open.
 */
#define _GNU_SOURCE
#include "blob.h"

#include "fetch_int.h"
#include "net_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An error document (S3 <Error>) is small; a listing we never ask for. */
#define BLOB_SMALL_MAX 65536
/* A request may wait this many shared_timeouts while the service answers others,
 * and a block PUT as long for its answer (above). */
#define BLOB_IDLE_FACTOR 10

struct remote_blob {
	struct remote shell;	    /* fetch.c's view: cfg (below) and counters; no ops */
	double quiet_time;	    /* shared_timeout: see the clocks above */
	double idle_time;	    /* BLOB_IDLE_FACTOR * shared_timeout */
	atomic_uint_fast64_t heard; /* when the service last sent us a byte (ns) */
	struct cfg cfg;		    /* the daemon's, with the shared_* values in place */
	struct remote_fetch *fetch;
	char bucket[256];
	char prefix[CFG_STR_MAX];  /* "" or "dir/sub/" */
	char base[REMOTE_URL_MAX]; /* URL of the bucket, no trailing '/' */
	char name[CFG_STR_MAX];	   /* s3://bucket/prefix, for logs */
	bool virtual_host;
	struct remote_creds creds;
	struct remote_sigv4 sig; /* points into creds; access_key NULL = unsigned */
};

/* Splits s3://bucket[/prefix] into b->bucket and b->prefix ("" or "p/q/"). */
static int parse_url(struct remote_blob *b, const char *url)
{
	const char *s = url + 5, *slash = strchr(s, '/');
	size_t blen = slash ? (size_t)(slash - s) : strlen(s), n;

	if (strncmp(url, "s3://", 5) != 0 || blen == 0 || blen >= sizeof(b->bucket)) {
		MCFS_ERR("shared_cache '%s': expected s3://bucket[/prefix]", url);
		return -EINVAL;
	}
	memcpy(b->bucket, s, blen);
	b->bucket[blen] = '\0';
	b->prefix[0] = '\0';
	if (slash) {
		while (*slash == '/')
			slash++;
		snprintf(b->prefix, sizeof(b->prefix) - 1, "%s", slash);
		n = strlen(b->prefix);
		while (n > 0 && b->prefix[n - 1] == '/')
			b->prefix[--n] = '\0';
		if (n > 0 && remote_check_path(b->prefix) < 0) {
			MCFS_ERR("shared_cache '%s': the prefix has empty, '.' or '..' parts", url);
			return -EINVAL;
		}
		if (n > 0)
			strcat(b->prefix, "/");
	}
	snprintf(b->name, sizeof(b->name), "s3://%s/%s", b->bucket, b->prefix);
	return 0;
}

/* The config fetch.c and the credential lookup see: the shared_* values in place. */
static void shared_view(const struct cfg *in, struct cfg *c)
{
	*c = *in;
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", in->shared_endpoint);
	snprintf(c->region, sizeof(c->region), "%s", in->shared_region);
	snprintf(c->profile, sizeof(c->profile), "%s", in->shared_profile);
	snprintf(c->access_key, sizeof(c->access_key), "%s", in->shared_access_key);
	snprintf(c->secret_key, sizeof(c->secret_key), "%s", in->shared_secret_key);
	snprintf(c->session_token, sizeof(c->session_token), "%s", in->shared_session_token);
	snprintf(c->addressing, sizeof(c->addressing), "%s", in->shared_addressing);
	/* the rest of the clocks are the request's own (run()) */
	c->connect_timeout = MCFS_MIN(in->connect_timeout, in->shared_timeout);
	/* One attempt: a failure sends the read to the store at once, and the
	 * tier's state machine (shared.c) decides when to try again. */
	c->retries = 0;
}

int remote_blob_open(const struct cfg *cfg, struct remote_blob **out)
{
	struct remote_blob *b;
	int rc;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	shared_view(cfg, &b->cfg);
	b->shell.cfg = &b->cfg;
	b->quiet_time = cfg->shared_timeout;
	b->idle_time = BLOB_IDLE_FACTOR * cfg->shared_timeout;
	rc = parse_url(b, cfg->shared_cache);
	b->virtual_host = strcmp(b->cfg.addressing, "virtual") == 0;
	if (rc == 0)
		rc = remote_s3_base_url(b->cfg.endpoint, b->bucket, b->cfg.region, b->virtual_host,
					b->base, sizeof(b->base));
	if (rc == 0 && remote_creds_resolve(&b->cfg, &b->creds) < 0) {
		MCFS_WARN("shared cache %s: no credentials in shared_access_key, the environment "
			  "or ~/.aws/credentials: sending unsigned requests",
			  b->name);
	} else if (rc == 0) {
		b->sig.access_key = b->creds.access_key;
		b->sig.secret_key = b->creds.secret_key;
		b->sig.session_token = b->creds.session_token;
		b->sig.region = b->cfg.region;
		MCFS_INFO("shared cache %s: signing with credentials from %s, region %s", b->name,
			  b->creds.source, b->cfg.region);
	}
	if (rc == 0)
		rc = remote_fetch_new(&b->shell, &b->fetch);
	if (rc < 0) {
		memset(&b->creds, 0, sizeof(b->creds));
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

void remote_blob_close(struct remote_blob *b)
{
	if (!b)
		return;
	remote_fetch_free(b->fetch);
	memset(&b->creds, 0, sizeof(b->creds));
	memset(&b->cfg, 0, sizeof(b->cfg)); /* its secrets */
	free(b);
}

unsigned long long remote_blob_heard(struct remote_blob *b)
{
	return atomic_load_explicit(&b->heard, memory_order_relaxed);
}

const char *remote_blob_name(const struct remote_blob *b)
{
	return b->name;
}

/* URL and log name of prefix + key. */
static int object_url(const struct remote_blob *b, const char *key, char *url, size_t len,
		      char *what, size_t wlen)
{
	char full[REMOTE_URL_MAX], enc[REMOTE_URL_MAX];
	int n;

	if ((size_t)snprintf(full, sizeof(full), "%s%s", b->prefix, key) >= sizeof(full))
		return -ENAMETOOLONG;
	n = remote_uri_encode(full, true, enc, sizeof(enc));
	if (n < 0)
		return n;
	if ((size_t)snprintf(url, len, "%s/%s", b->base, enc) >= len)
		return -ENAMETOOLONG;
	if ((size_t)snprintf(what, wlen, "s3://%s/%s", b->bucket, full) >= wlen)
		return -ENAMETOOLONG;
	return 0;
}

/* Fills res from an answer: the status, the cause, an error document's code. */
static void note(struct remote_blob_res *res, const struct remote_resp *resp)
{
	struct remote_s3_page page;

	res->status = resp->status;
	remote_copy(res->error, sizeof(res->error), resp->error);
	res->code[0] = '\0';
	if (resp->status < 400 || !resp->body || !strstr(resp->body, "<Error>"))
		return;
	memset(&page, 0, sizeof(page));
	if (remote_s3_parse_list(resp->body, resp->body_len, "", &page) == 0)
		remote_copy(res->code, sizeof(res->code), page.code);
	free(page.ents);
	if (res->code[0] && !strstr(res->error, res->code)) /* the fetch layer's words name it */
		snprintf(res->error, sizeof(res->error), "HTTP %ld %s", resp->status, res->code);
}

/* Runs one request on @key; req's method and body are the caller's. */
static int run(struct remote_blob *b, const char *key, struct remote_req *req,
	       struct remote_resp *resp, struct remote_blob_res *res)
{
	char url[REMOTE_URL_MAX], what[REMOTE_URL_MAX];
	int rc;

	memset(res, 0, sizeof(*res));
	memset(resp, 0, sizeof(*resp));
	rc = object_url(b, key, url, sizeof(url), what, sizeof(what));
	if (rc < 0) {
		snprintf(res->error, sizeof(res->error), "key too long");
		return rc;
	}
	req->url = url;
	req->what = what;
	req->sig = b->sig.access_key ? &b->sig : NULL;
	req->quiet = true;
	req->quiet_404 = true;
	req->heard = &b->heard;
	req->quiet_time = b->quiet_time;
	req->idle_time = b->idle_time;
	rc = remote_fetch_do(b->fetch, req, resp);
	note(res, resp);
	res->busy = resp->busy;
	res->quiet = resp->quiet;
	res->unanswered = resp->unanswered;
	res->date_ns = resp->date_ns;
	res->modified_ns = resp->mtime_ns;
	return rc;
}

int remote_blob_probe(struct remote_blob *b, struct remote_blob_res *res)
{
	char buf[64];
	size_t n;
	int rc = remote_blob_get_small(b, "mcfs-probe", buf, sizeof(buf), &n, res);

	if (rc == -ENOENT && strcmp(res->code, "NoSuchBucket") == 0)
		return -ENOENT;
	if (rc == 0 || rc == -ENOENT || rc == -EBADMSG)
		return 0;
	return rc == -EACCES ? rc : -EIO;
}

int remote_blob_get(struct remote_blob *b, const char *key, void *buf, size_t len, void *tail,
		    size_t tail_len, struct remote_blob_res *res)
{
	struct remote_req req = {.method = "GET", .buf = buf, .tail = tail, .tail_len = tail_len};
	struct remote_resp resp;
	int rc;

	req.off = 0;
	req.len = len + tail_len;
	req.expect_total = len + tail_len;
	rc = run(b, key, &req, &resp, res);
	free(resp.body);
	/* -ESTALE: another total size; -ERANGE: shorter than the range's start */
	return rc == -ESTALE || rc == -ERANGE ? -EBADMSG : rc;
}

int remote_blob_get_small(struct remote_blob *b, const char *key, void *buf, size_t cap, size_t *n,
			  struct remote_blob_res *res)
{
	struct remote_req req = {.method = "GET", .max_body = BLOB_SMALL_MAX};

	struct remote_resp resp;
	int rc;

	*n = 0;
	rc = run(b, key, &req, &resp, res);
	if (rc == 0 && resp.body_len > cap)
		rc = -EBADMSG;
	if (rc == 0 && resp.body_len > 0) {
		memcpy(buf, resp.body, resp.body_len);
		*n = resp.body_len;
	}
	free(resp.body);
	return rc;
}

int remote_blob_put(struct remote_blob *b, const char *key, const void *a, size_t alen,
		    const void *t, size_t tlen, struct remote_blob_res *res)
{
	struct remote_req req = {.method = "PUT"};
	struct remote_resp resp;
	int rc;

	req.stores = true;
	req.put[0] = a;
	req.put_len[0] = alen;
	req.put[1] = t;
	req.put_len[1] = tlen;
	rc = run(b, key, &req, &resp, res);
	free(resp.body);
	return rc;
}

int remote_blob_put_small(struct remote_blob *b, const char *key, const void *body, size_t len,
			  struct remote_blob_res *res)
{
	struct remote_req req = {.method = "PUT"};
	struct remote_resp resp;
	int rc;

	req.put[0] = body;
	req.put_len[0] = len;
	rc = run(b, key, &req, &resp, res);
	free(resp.body);
	return rc;
}

int remote_blob_head(struct remote_blob *b, const char *key, uint64_t *size,
		     struct remote_blob_res *res)
{
	struct remote_req req = {.method = "HEAD"};
	struct remote_resp resp;
	int rc;

	*size = 0;
	rc = run(b, key, &req, &resp, res);
	free(resp.body);
	if (rc == 0)
		*size = resp.content_length > 0 ? (uint64_t)resp.content_length : 0;
	return rc;
}
