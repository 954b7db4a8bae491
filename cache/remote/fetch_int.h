/*
 * fetch_int.h - the one HTTP fetch layer under the http and s3 backends.
 * Not for use outside cache/remote/.
 *
 * A struct remote_fetch is a pool of libcurl easy handles. Each handle keeps
 * its own connections alive between requests, so a handle taken from the pool
 * usually reuses a warm TCP (and TLS) connection; the handles share one DNS and
 * TLS-session cache. Every request goes through remote_fetch_do(), which owns:
 *  - timeouts (the pool's struct remote_fetch_conf: connect_timeout; timeout
 *    of no progress; the shared tier's clocks, below);
 *  - retries with exponential backoff and jitter, on timeouts, resets, refused
 *    connections, 5xx and 429, never on other 4xx;
 *  - the one translation of CURLcode and HTTP status into a negative errno
 *    (the status table, fetch_status.c), and of an error answer into words:
 *    the status, a redirect's Location, an S3 error document's code and
 *    message or the first words of another body, and a hint where one is
 *    known (the bucket's region, the node's clock);
 *  - redirects: followed for req->follow (the http store's GETs and HEADs), at
 *    most REMOTE_MAX_REDIRS hops, to http or https (https only from https),
 *    credentials in the URL sent to their own host only; refused otherwise
 *    (s3 and the shared tier: a signed request goes to its own endpoint only);
 *    a redirect that is still the final answer is an error;
 *  - bounded bodies: a ranged GET lands straight in the caller's buffer and a
 *    server that sends more than was asked is an error, never an overflow; an
 *    error answer's body is kept up to a cap, the rest dropped;
 *  - the ranged-GET checks: a read is complete only with a 206 whose
 *    Content-Range is exactly the asked range, or a 200 for the whole object,
 *    carrying exactly the bytes asked for (resp->got == req->len); then the
 *    object's total size and the validator;
 *  - PUT of a body held in memory (the shared block tier's writes, blob.c),
 *    sent from the caller's buffers without a copy.
 * Proxy settings come from the environment (libcurl's default), TLS is
 * verified unless the pool's tls_verify is off. Credentials travel only through
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

#include <curl/curl.h>

#include "net_int.h"
#include "remote_int.h"

#define REMOTE_URL_MAX 4096
#define REMOTE_ETAG_MAX 130 /* a quoted ETag we keep; CACHE_VERSION_MAX holds it */
/* Redirect hops a followed request may take: a CDN's one or two, with room to
 * spare; a loop ends here. */
#define REMOTE_MAX_REDIRS 5
/* Bytes kept of an error answer's body (an S3 <Error>), for its words. */
#define REMOTE_ERROR_BODY_MAX 65536

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
	bool follow; /* GET/HEAD: follow redirects (the policy above); false: a 3xx is an error */
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
	char location[512];	    /* Location of the last 3xx; "" if none */
	char content_range[96];	    /* as sent; "" if none */
	unsigned retry_after_s;	    /* Retry-After of a 429/503 in seconds; 0 if none */
	char content_type[128];	    /* "" if none */
	char *body;		    /* unranged GET: NUL-terminated; caller frees with free() */
	size_t body_len;	    /* bytes in body */
	size_t got;		    /* ranged GET: bytes written to req->buf (and tail) */
	/* A failure's cause in words, "" if none: curl's text, or an answer's
	 * (remote_status_words(): "HTTP 403 AccessDenied: Access Denied"). */
	char error[512];
	char code[64];		/* an S3 error document's <Code> ("AccessDenied"); "" if none */
	char bucket_region[64]; /* x-amz-bucket-region (S3 names the bucket's region); "" if none */
	bool skew_known;	/* the answer had a Date: */
	int64_t skew_s;		/* then its Date minus this node's clock when it came, seconds */
	unsigned redirects;	/* redirects followed (req->follow) */
	/* The redirects ended at the asked URL's path plus '/': a web server's
	 * answer to a directory named without its '/' (nginx's autoindex). */
	bool dir_redirect;
	/* With req->heard: which clock cut it. quiet: the service sent nothing for
	 * quiet_time (gone); busy: it sent bytes on other requests, not this one's,
	 * for idle_time; unanswered: a PUT's body went out whole, then no answer
	 * for idle_time (the service stores slowly). */
	bool quiet, busy, unanswered;
};

/* A pool's settings: the clocks, retries and TLS of one service's requests. */
struct remote_fetch_conf {
	double connect_timeout; /* seconds to connect */
	double timeout;		/* seconds without a byte before the answer begins */
	double stall_timeout;	/* seconds without a byte once it flows; 0 = off */
	unsigned retries;	/* attempts after the first */
	bool tls_verify;
	char ca_file[CFG_STR_MAX]; /* "" = the system's */
	/* bumped for each retry (both) when set; relaxed; borrowed for the pool's life */
	_Atomic uint64_t *requests, *retried;
};

/* The store's pool settings: @r's cfg, and its counters. Can't fail. */
void remote_fetch_conf_of(struct remote *r, struct remote_fetch_conf *out);

/*
 * Creates a pool with settings @conf (copied). Returns 0 with *out set (free
 * with remote_fetch_free()), or a negative errno.
 */
MCFS_MUST_CHECK int remote_fetch_new(const struct remote_fetch_conf *conf,
				     struct remote_fetch **out);

/* Frees the pool and its connections. No request may be in flight. */
void remote_fetch_free(struct remote_fetch *f);

/*
 * Runs one request with retries. On return resp is filled (caller frees
 * resp->body with free(), also on failure). Returns 0 when the final answer is
 * one the request takes (remote_status_errno(); a ranged GET's also passed its
 * checks, so resp->got == req->len), or:
 *   -ENOENT 404/410, -EACCES 401/403, -ESTALE 412 or a ranged answer for
 *   another version or size, -ERANGE 416, -EIO anything else after retries
 *   (a redirect not followed, a 2xx the request does not take, 5xx...).
 * resp->error words every failure. Failures other than -ENOENT (when
 * quiet_404), -ESTALE and -EACCES are logged here, with req->what, the byte
 * range and resp->error; the caller logs -ESTALE and -EACCES, which need its
 * context (it may quote resp->error).
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

/* ---- s3.c: one S3 bucket's requests, for the s3 store and the shared tier ---- */

/* A bucket, resolved once: where its objects are and how requests are signed. */
struct remote_s3_bucket {
	char bucket[256];
	char prefix[CFG_STR_MAX];  /* "" or "dir/sub/": the keys' common prefix */
	char base[REMOTE_URL_MAX]; /* URL of the bucket, no trailing '/' */
	char region[64];
	bool virtual_host;
	struct remote_creds creds;
	struct remote_sigv4 sig; /* points into creds; access_key NULL = unsigned */
};

/*
 * Resolves @conf into @b: splits conf->url, builds the bucket's URL, finds the
 * credentials (unless anonymous; none found: unsigned, a warning) and logs
 * their source, never a key. Returns 0, or -EINVAL for a bad URL, prefix or
 * endpoint (logged, naming conf->who), -ENAMETOOLONG. Clear with
 * remote_s3_bucket_clear(), also on failure.
 */
MCFS_MUST_CHECK int remote_s3_bucket_init(struct remote_s3_bucket *b,
					  const struct remote_s3_conf *conf);

/* Wipes @b's credentials. Can't fail. */
void remote_s3_bucket_clear(struct remote_s3_bucket *b);

/*
 * Points @req at the object @key (relative to the prefix): its URL into @url,
 * "s3://bucket/prefix+key" into @what (for logs), and the signing. Returns 0
 * or -ENAMETOOLONG.
 */
MCFS_MUST_CHECK int remote_s3_object(const struct remote_s3_bucket *b, const char *key,
				     struct remote_req *req, char url[REMOTE_URL_MAX],
				     char what[REMOTE_URL_MAX]);

/* Copies a string, truncating to fit (listing fields, log text). Can't fail. */
void remote_copy(char *dst, size_t dstlen, const char *src);

/* ---- fetch_status.c: HTTP status, in errno and in words ---- */

/* What a request takes as its answer: the status table's columns. */
enum remote_want {
	REMOTE_WANT_RANGE = 1, /* ranged GET: 206, or 200 (the whole object: checked after) */
	REMOTE_WANT_WHOLE = 2, /* GET or HEAD of a whole resource: 200 */
	REMOTE_WANT_COND = 4,  /* GET with If-None-Match: 200, or 304 (unchanged) */
	REMOTE_WANT_PUT = 8,   /* PUT: 200, 201 or 204 */
};

/* Which column of the status table @req reads. Can't fail. */
enum remote_want remote_req_want(const struct remote_req *req);

/*
 * The one translation of a final HTTP status: 0 if a request wanting @want
 * takes it as its answer, else -EACCES (401, 403), -ENOENT (404, 410),
 * -ESTALE (412), -ERANGE (416) or -EIO (any other: 1xx, another 2xx, 3xx,
 * 4xx, 5xx, 0 for no answer). Can't fail.
 */
int remote_status_errno(long status, enum remote_want want);

/*
 * Words a final answer that was not taken into resp->error, and an S3 error
 * document's code into resp->code:
 *   "HTTP <status>[ <Code>][ to <Location> | with no Location][: <Message,
 *   or the first words of another body>][; <hint>]"
 * The Location loses its user:password@ and its query (a signed URL's
 * signature); the body's words are printable ASCII only, and a body that is
 * not text gives none. Hints: a 3xx not followed (!req->follow) says that
 * mcfs does not follow an S3 redirect; PermanentRedirect and
 * AuthorizationHeaderMalformed name the bucket's region when the answer does;
 * RequestTimeTooSkewed says to check the node's clock; a 2xx or 304 the
 * request does not take says what it takes. Reads resp->status, location,
 * body, bucket_region and skew, and req's method, len, if_none_match and
 * follow. Can't fail.
 */
void remote_status_words(struct remote_resp *resp, const struct remote_req *req);

/*
 * Words a transfer that failed with CURLcode @curl_code into resp->error:
 * curl's @errbuf, or for a redirect curl would not follow, the status and the
 * Location ("more than 5 redirects (a loop?), the last to URL"). Can't fail.
 */
void remote_curl_words(struct remote_resp *resp, int curl_code, const char *errbuf);

/*
 * Checks a ranged GET whose status was taken (200 or 206): the object's total
 * size (another: -ESTALE), a 206's Content-Range (exactly the asked range, else
 * -EIO), the ETag (another: -ESTALE) and the bytes received (resp->got ==
 * req->len, else -EIO). Words the failure into resp->error; logs the -EIO
 * ones naming @what unless req->quiet. Returns 0 or the negative errno.
 */
MCFS_MUST_CHECK int remote_check_range(const struct remote_req *req, struct remote_resp *resp,
				       const char *what);

/*
 * A URL for a message, in out: no user:password@, no query (a signed URL's
 * signature: "?..." instead), printable ASCII only, cut to about 200
 * characters. Can't fail.
 */
void remote_url_words(const char *url, char *out, size_t outlen);

/*
 * The wait before a retry, in ms: @backoff_ms (remote_backoff_ms()), or a
 * 429's or 503's Retry-After (@retry_after_s, seconds; 0 = none) when longer,
 * capped at the backoff's cap (5 s: a longer wait is the next retry's). Any
 * retry_after_s is safe (no overflow). Can't fail.
 */
unsigned remote_retry_wait_ms(unsigned backoff_ms, unsigned retry_after_s);

/* Which of the shared tier's clocks (remote_req.heard) cuts a transfer. */
enum remote_cut { REMOTE_CUT_NONE, REMOTE_CUT_QUIET, REMOTE_CUT_BUSY, REMOTE_CUT_STORED };

/*
 * The shared tier's clocks (remote_req: quiet_time @quiet_ns, idle_time
 * @idle_ns) at @now for a transfer whose own last byte moved, either way, at
 * @own (its start if none yet), on a service last heard at @svc by any
 * request: remote_req.heard, which other threads stamp, so @svc may be later
 * than @now, and that is no silence. @stored: a block PUT's body is out and
 * its answer not begun (the service stores it; quiet_time stops). All times
 * are mcfs_now_ns(). Returns the clock that cuts it, or REMOTE_CUT_NONE.
 * Can't fail.
 */
enum remote_cut remote_shared_cut(uint64_t now, uint64_t own, uint64_t svc, bool stored,
				  uint64_t quiet_ns, uint64_t idle_ns);

/* Does this failure deserve another attempt? (CURLcode as int, HTTP status.) */
bool remote_retryable(int curl_code, long status);

/* Backoff before retry number @attempt (0-based) in ms, with jitter. */
unsigned remote_backoff_ms(unsigned attempt, unsigned *seed);

/* Parses an ISO 8601 UTC time ("2023-11-22T10:00:00.000Z") into ns; -EINVAL. */
MCFS_MUST_CHECK int remote_parse_iso8601(const char *s, int64_t *ns);

/* ---- fetch_xfer.c: one transfer's libcurl callbacks ---- */

/*
 * Per-transfer state shared by the callbacks. remote_fetch_do() fills it for
 * a request and clears the per-attempt fields before each attempt; the
 * callbacks, set on the handle with the struct as their user pointer, keep it.
 */
struct xfer {
	const struct remote_req *req;
	struct remote_resp *resp;
	size_t cap;	     /* bytes the body buffer may grow to */
	size_t body_cap;     /* allocated bytes of resp->body */
	bool overflow;	     /* the server sent more than allowed */
	bool unranged;	     /* a 200 came back to a ranged GET */
	uint64_t stall_ns;   /* cfg->stall_timeout in ns; 0 = off */
	uint64_t last_rx_ns; /* when bytes last moved, either way; 0 = none yet */
	curl_off_t ul_seen;  /* PUT: bytes sent when last seen by remote_xfer_on_progress */
	bool stalled;	     /* the progress callback cut a stalled answer */
	uint64_t start_ns;   /* req->heard: when the attempt began */
	uint64_t sent_ns;    /* PUT: when the body's last byte went out; 0 = not yet */
	uint64_t quiet_ns;   /* req->quiet_time in ns */
	uint64_t idle_ns;    /* req->idle_time in ns */
	enum remote_cut cut; /* req->heard: the clock that cut it */
	size_t put_off;	     /* PUT: bytes of the body handed to libcurl so far */
};

/*
 * The callbacks below are libcurl's, with @user a struct xfer *; libcurl calls
 * them on the thread in curl_easy_perform(). Each stamps the transfer's clock
 * (and req->heard, atomic) when bytes come.
 */

/*
 * CURLOPT_WRITEFUNCTION: a ranged GET's bytes land in req->buf (and req->tail);
 * another body is collected in resp->body up to x->cap; an answer the request
 * won't take keeps its first REMOTE_ERROR_BODY_MAX bytes, for its words.
 * Returns @size * @nmemb, or 0 to abort: a 200 to a ranged GET that is not
 * exactly the asked bytes as the whole object (x->unranged), or more bytes than allowed
 * (x->overflow).
 */
size_t remote_xfer_on_body(char *data, size_t size, size_t nmemb, void *user);

/*
 * CURLOPT_HEADERFUNCTION: a status line resets @resp's answer
 * (remote_xfer_reset_resp()) and sets its status; the headers the fetch layer
 * and the stores read (ETag, Last-Modified, Date, Content-Length, Content-Range, Location,
 * Content-Type, Retry-After of a 429 or 503, x-amz-bucket-region) are parsed
 * into resp. Returns @size * @nmemb.
 */
size_t remote_xfer_on_header(char *line, size_t size, size_t nmemb, void *user);

/*
 * CURLOPT_READFUNCTION of a PUT: copies the next bytes of req->put[0] then
 * req->put[1] into @out from x->put_off, and advances it. Returns the bytes
 * copied, 0 at the end of the body.
 */
size_t remote_xfer_on_put_read(char *out, size_t size, size_t nmemb, void *user);

/*
 * CURLOPT_SEEKFUNCTION of a PUT (libcurl rewinds the body for a retry on a
 * reused connection): CURL_SEEKFUNC_OK, or CURL_SEEKFUNC_CANTSEEK for other
 * than SEEK_SET to a non-negative offset.
 */
int remote_xfer_on_put_seek(void *user, curl_off_t offset, int origin);

/*
 * CURLOPT_XFERINFOFUNCTION: the clock that finds a stalled answer: with
 * req->heard, the shared tier's clocks (remote_shared_cut(), naming the one
 * in x->cut); else no byte either way for x->stall_ns once the answer began.
 * A PUT's body going out counts as bytes moving. Returns 1 to abort (and sets
 * x->stalled), else 0.
 */
int remote_xfer_on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			    curl_off_t ulnow);

/*
 * Clears @resp's answer for a new one (status, headers parsed, body and bytes
 * got; resp->body's buffer is kept). Can't fail.
 */
void remote_xfer_reset_resp(struct remote_resp *resp);

/*
 * After a transfer the shared tier's clocks cut (x->cut set): words the clock
 * into @errbuf (@len bytes) and sets resp's quiet, busy or unanswered. Can't
 * fail.
 */
void remote_xfer_shared_cut(const struct remote_req *req, struct remote_resp *resp,
			    const struct xfer *x, char *errbuf, size_t len);

#endif
