/*
 * blob.h - a small S3 object client: GET, PUT and HEAD of whole objects
 * under s3://bucket[/prefix], for the shared block tier (cache/shared*.c)
 * only: fs/ never sees it, and the store's interface (remote.h) knows
 * nothing of it. Requests are built and signed as the s3 store's (s3.c) and
 * run by the store's fetch layer, with a pool of its own: one attempt each,
 * cut by the clocks blob.c describes, since a tier that is down must cost a
 * read little (the caller goes to the store instead).
 *
 * Logging: none for a request (the tier logs a change of its state); each
 * call fills a struct remote_blob_res with the cause. Threads: every call
 * may be made from many threads at once.
 */
#ifndef MCFS_REMOTE_BLOB_H
#define MCFS_REMOTE_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

struct remote_blob;

/* What one request came back with, for log lines. */
struct remote_blob_res {
	long status;	 /* the HTTP status; 0 when no answer came */
	char code[64];	 /* the S3 error code of an error document ("AccessDenied"), or "" */
	char error[512]; /* the cause in words ("HTTP 403 AccessDenied: ...", "Connection
			    refused"), as the fetch layer put it, or "" */
	bool unanswered; /* a PUT's body was sent whole, then no answer came in time: the
			  * service is slow to store, not gone */
	bool busy;	 /* it ran out of time while the service answered other requests
			  * of ours: the service is busy, not gone */
	bool quiet;	 /* cut because the service sent nothing, to any request of ours,
			  * for shared_timeout */
	/* The service's clock (ns since the epoch, to the second; 0 = not sent): its
	 * Date, when it answered, and the object's Last-Modified, when it stored it.
	 * Both from one clock, so that an object's age needs no node's. */
	int64_t date_ns, modified_ns;
};

/*
 * Opens a client of cfg->shared_cache. Returns 0 with *out set (close with
 * remote_blob_close()), -EINVAL for a bad URL or endpoint (logged), -ENOMEM.
 * Sends nothing: remote_blob_probe() checks the service. @cfg is borrowed
 * for the call only.
 */
MCFS_MUST_CHECK int remote_blob_open(const struct cfg *cfg, struct remote_blob **out);

/* Closes the client. No request may be in flight. NULL is ignored. */
void remote_blob_close(struct remote_blob *b);

/* When the service last sent us a byte, on any request (mcfs_now_ns()); 0 = never. */
unsigned long long remote_blob_heard(struct remote_blob *b);

/* "s3://bucket/prefix" for log lines. Borrowed: valid until remote_blob_close(). */
const char *remote_blob_name(const struct remote_blob *b);

/*
 * Checks the bucket and the credentials with a GET of a key that need not
 * exist. Returns 0 (reachable: the key was found or was not), -EACCES (the
 * credentials or the access were refused; res->code says which), -ENOENT (no
 * such bucket), -EIO (no answer, a timeout or a 5xx).
 */
MCFS_MUST_CHECK int remote_blob_probe(struct remote_blob *b, struct remote_blob_res *res);

/*
 * GET of the object @key (relative to the prefix), which must be exactly
 * len + tail_len bytes: the first len land in @buf, the last tail_len in
 * @tail. Returns 0, -ENOENT (no such object), -EBADMSG (an object of another
 * size: truncated, or not one of ours), -EACCES, -EIO (no answer, timeout,
 * 5xx, or the answer broke off). It is not cut while bytes keep coming.
 */
MCFS_MUST_CHECK int remote_blob_get(struct remote_blob *b, const char *key, void *buf, size_t len,
				    void *tail, size_t tail_len, struct remote_blob_res *res);

/*
 * GET of a small object whole: up to @cap bytes into @buf, the count in *n.
 * Returns 0, -ENOENT, -EBADMSG (larger than @cap), -EACCES, -EIO.
 */
MCFS_MUST_CHECK int remote_blob_get_small(struct remote_blob *b, const char *key, void *buf,
					  size_t cap, size_t *n, struct remote_blob_res *res);

/*
 * PUT of a block: @key with the body @a (alen bytes) then @t (tlen bytes, may
 * be 0), sent from these buffers (borrowed for the call). The body must keep
 * moving; its answer may then take longer than shared_timeout (the service
 * stores the object first). Returns 0, -EACCES, -EIO (see res->status: 0 or
 * 5xx is the service down, unless res->unanswered; 4xx or 507 a refusal).
 */
MCFS_MUST_CHECK int remote_blob_put(struct remote_blob *b, const char *key, const void *a,
				    size_t alen, const void *t, size_t tlen,
				    struct remote_blob_res *res);

/*
 * PUT of a small object (a lease, on a read's way): as remote_blob_put(), but
 * the service's silence cuts it also once its body is sent. With @if_absent,
 * sent with If-None-Match: *: -ESTALE (412) when the object exists, -EIO with
 * res->status 501 when the service takes no conditional PUT (Swift's s3api).
 */
MCFS_MUST_CHECK int remote_blob_put_small(struct remote_blob *b, const char *key, const void *body,
					  size_t len, bool if_absent, struct remote_blob_res *res);

/* HEAD of @key: 0 with its size in *size, -ENOENT, -EACCES, -EIO. */
MCFS_MUST_CHECK int remote_blob_head(struct remote_blob *b, const char *key, uint64_t *size,
				     struct remote_blob_res *res);

#endif
