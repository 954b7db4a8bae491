/*
 * fetch_int.h - the one HTTP fetch layer under the http and s3 backends.
 * Not for use outside cache/remote/.
 *
 * A struct remote_fetch is a pool of libcurl easy handles. Each handle keeps
 * its own connections alive between requests, so a handle taken from the pool
 * usually reuses a warm TCP (and TLS) connection; the handles share one DNS and
 * TLS-session cache. Every request goes through remote_fetch_do(), which owns:
 *  - timeouts (cfg->connect_timeout; cfg->timeout of no progress; the shared
 *    tier's clocks, below);
 *  - retries with exponential backoff and jitter, on timeouts, resets, refused
 *    connections, 5xx and 429, never on other 4xx;
 *  - the one translation of CURLcode and HTTP status into a negative errno;
 *  - bounded bodies: a ranged GET lands straight in the caller's buffer and a
 *    server that sends more than was asked is an error, never an overflow;
 *  - the ranged-GET checks: 206 with the asked Content-Range (or 200 for the
 *    whole object), the object's total size, the validator;
 *  - PUT of a body held in memory (the shared block tier's writes, blob.c),
 *    sent from the caller's buffers without a copy.
 * Proxy settings come from the environment (libcurl's default), TLS is
 * verified unless cfg->tls_verify is off. Credentials travel only through
 * CURLOPT_USERNAME/PASSWORD (SigV4) and never reach a log line.
 *
 * Threads: remote_fetch_do() may be called from many threads at once; the pool
 * lock is held only to push or pop a handle, never across a transfer.
 */
#ifndef MCFS_FETCH_INT_H
#define MCFS_FETCH_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "remote_int.h"

#define REMOTE_URL_MAX 4096
#define REMOTE_ETAG_MAX 130 /* a quoted ETag we keep; CACHE_VERSION_MAX holds it */

struct remote_fetch;

/* SigV4 credentials; borrowed by the request. NULL access_key = unsigned. */
struct remote_sigv4 {
	const char *access_key;
	const char *secret_key;
	const char *session_token; /* NULL or "" = none */
	const char *region;
};

struct remote_req {
	const char *method;		 /* "GET", "HEAD" or "PUT" */
	const char *url;		 /* full URL, query already canonical */
	const char *what;		 /* for log lines: e.g. "s3://b/k"; NULL = url */
	const struct remote_sigv4 *sig;	 /* NULL = no signing */
	const char *if_match;		 /* validator for If-Match; NULL = none */
	const char *if_range;		 /* strong ETag or HTTP date for If-Range */
	const char *if_unmodified_since; /* HTTP date */
	const char *if_none_match;	 /* for conditional GETs of listings */
	const char *expect_etag;	 /* an answer with another ETag is -ESTALE */
	/* Ranged GET into buf: [off, off+len). len 0 = not ranged. With tail_len
	 * set, the range's last tail_len bytes land in tail instead, and buf
	 * holds len - tail_len (a block and the trailer stored after it). */
	uint64_t off;
	size_t len;
	void *buf;
	void *tail;
	size_t tail_len;
	uint64_t expect_total; /* the object's size at open, checked; 0 = unknown */
	/* Unranged GET: the body is collected up to max_body bytes (0 = no body). */
	size_t max_body;
	bool quiet_404; /* 404 is expected here: don't log it */
	/* Log nothing, failures and retries included: the caller words them (the
	 * shared tier logs one line per change of its state, not per request). */
	bool quiet;
	/* PUT: the body, put[0] then put[1] back to back (len 0 = absent). Sent
	 * unsigned (x-amz-content-sha256: UNSIGNED-PAYLOAD); the bytes are read
	 * again from the start on a retry. Borrowed for the call. */
	const void *put[2];
	size_t put_len[2];
	/*
	 * The shared tier's clocks (blob.c), in place of cfg->timeout and
	 * cfg->stall_timeout when @heard is set; seconds. A service that many
	 * requests of ours share is busy, not gone, while it sends bytes:
	 *  - quiet_time: no byte received from the service (on this request or,
	 *    through @heard, any other) for this long: it went silent, cut;
	 *  - idle_time: no byte of this request, either way, for this long: cut,
	 *    even while the service answers others (queued behind them, or stuck);
	 *  - stores (a block PUT): once the body is sent, quiet_time stops, since
	 *    the service stores the object before it answers; idle_time runs.
	 */
	atomic_uint_fast64_t *heard; /* when the service last sent a byte (ns); NULL = cfg's */
	double quiet_time;
	double idle_time;
	bool stores;
};

struct remote_resp {
	long status;		    /* final HTTP status, 0 if none */
	char etag[REMOTE_ETAG_MAX]; /* as sent, quotes kept; "" if none */
	char last_modified[64];	    /* as sent; "" if none */
	int64_t mtime_ns;	    /* Last-Modified parsed; 0 if none */
	int64_t date_ns;	    /* Date parsed (the server's clock at its answer); 0 if none */
	int64_t content_length;	    /* -1 if none */
	int64_t total;		    /* Content-Range total, or Content-Length of a 200 */
	char location[512];	    /* Location of a 3xx; "" if none */
	char content_range[96];	    /* as sent; "" if none */
	unsigned retry_after_s;	    /* Retry-After of a 429/503 in seconds; 0 if none */
	char content_type[128];	    /* "" if none */
	char *body;		    /* unranged GET: NUL-terminated; caller frees with free() */
	size_t body_len;	    /* bytes in body */
	size_t got;		    /* ranged GET: bytes written to req->buf (and tail) */
	char error[160]; /* a failure's cause in words ("HTTP 503", curl's text); "" if none */
	/* With req->heard: which clock cut it. quiet: the service sent nothing for
	 * quiet_time (gone); busy: it sent bytes on other requests, not this one's,
	 * for idle_time; unanswered: a PUT's body went out whole, then no answer
	 * for idle_time (the service stores slowly). */
	bool quiet, busy, unanswered;
};

/*
 * Creates the pool for @r (its cfg and counters). Returns 0 with *out set (free
 * with remote_fetch_free()), or a negative errno.
 */
MCFS_MUST_CHECK int remote_fetch_new(struct remote *r, struct remote_fetch **out);

/* Frees the pool and its connections. No request may be in flight. */
void remote_fetch_free(struct remote_fetch *f);

/*
 * Runs one request with retries. On return resp is filled (caller frees
 * resp->body with free(), also on failure). Returns 0 for 2xx (and 3xx, which
 * are not followed), or:
 *   -ENOENT 404/410, -EACCES 401/403, -ESTALE 412 or a ranged answer for
 *   another version or size, -ERANGE 416, -EIO anything else after retries.
 * Failures other than -ENOENT (when quiet_404), -ESTALE and -EACCES are
 * logged here, with req->what, the byte range and the cause; the caller logs
 * -ESTALE and -EACCES, which need its context.
 */
MCFS_MUST_CHECK int remote_fetch_do(struct remote_fetch *f, const struct remote_req *req,
				    struct remote_resp *resp);

/*
 * Percent-encodes @in into out as SigV4 wants it (RFC 3986 unreserved kept;
 * '/' kept if keep_slash). Returns the length, or -ENAMETOOLONG.
 */
MCFS_MUST_CHECK int remote_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen);

/*
 * Builds a canonical query string from n key/value pairs (values may be NULL
 * for "key="): sorted by key, each key and value encoded. Returns the length,
 * or -ENAMETOOLONG.
 */
MCFS_MUST_CHECK int remote_query_build(const char *const *kv, size_t n, char *out, size_t outlen);

/* Copies a string, truncating to fit (listing fields, log text). Can't fail. */
void remote_copy(char *dst, size_t dstlen, const char *src);

/* Does this failure deserve another attempt? (CURLcode as int, HTTP status.) */
bool remote_retryable(int curl_code, long status);

/* Backoff before retry number @attempt (0-based) in ms, with jitter. */
unsigned remote_backoff_ms(unsigned attempt, unsigned *seed);

/* Parses an ISO 8601 UTC time ("2023-11-22T10:00:00.000Z") into ns; -EINVAL. */
MCFS_MUST_CHECK int remote_parse_iso8601(const char *s, int64_t *ns);

#endif
