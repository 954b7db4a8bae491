/*
 * blob.c - the S3 object client of the shared block tier (blob.h).
 *
 * Design: a thin layer over fetch.c and s3.c's request builder (struct
 * remote_s3_bucket: URL, addressing, signing), the store's own. The client
 * owns a fetch pool of its own, set up from the shared_* values (no retry,
 * the clocks below) and counting nothing of the store's: store_requests
 * stays the origin's traffic, which is what a cluster wants to see fall.
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
 * Why these clocks, measured: docs/benchmarks.md ("The shared tier's clocks").
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
	struct remote_fetch *fetch;
	struct remote_s3_bucket bucket; /* URL, prefix, signing */
	double quiet_time;		/* shared_timeout: see the clocks above */
	double idle_time;		/* BLOB_IDLE_FACTOR * shared_timeout */
	atomic_uint_fast64_t heard;	/* when the service last sent us a byte (ns) */
	char name[CFG_STR_MAX + 300];	/* s3://bucket/prefix, for logs */
};

int remote_blob_open(const struct cfg *cfg, struct remote_blob **out)
{
	struct remote_s3_conf conf = {
	    .url = cfg->shared_cache,
	    .endpoint = cfg->shared_endpoint,
	    .region = cfg->shared_region,
	    .addressing = cfg->shared_addressing,
	    .profile = cfg->shared_profile,
	    .access_key = cfg->shared_access_key,
	    .secret_key = cfg->shared_secret_key,
	    .session_token = cfg->shared_session_token,
	    .who = "shared cache",
	};
	/* One attempt: a failure sends the read to the store at once, and the
	 * tier's health (shared_lease.c) decides when to try again. */
	struct remote_fetch_conf fc = {
	    .connect_timeout = MCFS_MIN(cfg->connect_timeout, cfg->shared_timeout),
	    .timeout = cfg->timeout, /* replaced by the request's clocks (run()) */
	    .stall_timeout = cfg->stall_timeout,
	    .tls_verify = cfg->tls_verify,
	};
	struct remote_blob *b;
	int rc;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	snprintf(fc.ca_file, sizeof(fc.ca_file), "%s", cfg->ca_file);
	b->quiet_time = cfg->shared_timeout;
	b->idle_time = BLOB_IDLE_FACTOR * cfg->shared_timeout;
	rc = remote_s3_bucket_init(&b->bucket, &conf);
	snprintf(b->name, sizeof(b->name), "s3://%s/%s", b->bucket.bucket, b->bucket.prefix);
	if (rc == 0)
		rc = remote_fetch_new(&fc, &b->fetch);
	if (rc < 0) {
		remote_s3_bucket_clear(&b->bucket);
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
	remote_s3_bucket_clear(&b->bucket);
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
	rc = remote_s3_object(&b->bucket, key, req, url, what);
	if (rc < 0) {
		snprintf(res->error, sizeof(res->error), "key too long");
		return rc;
	}
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
			  bool if_absent, struct remote_blob_res *res)
{
	struct remote_req req = {.method = "PUT", .if_none_match = if_absent ? "*" : NULL};
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
