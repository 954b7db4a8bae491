/*
 * fetch.c - the shared libcurl layer of the http and s3 backends: the pool of
 * handles, a request's options, and the retry loop around its transfers.
 *
 * Design: a request is described by a struct remote_req and run by
 * remote_fetch_do() on an easy handle popped from the pool. The handle is
 * reset and fully configured for every request (curl_easy_reset keeps the
 * live connections), so no option leaks from one request into the next, and
 * pushed back afterwards, keeping its connection alive for the next request.
 * Handles are created on demand: the pool holds as many as were ever in use
 * at once, which the cache's fetch threads bound (cfg->connections) plus a
 * few metadata callers. One transfer's callbacks (its body, its headers, its
 * clocks) are in fetch_xfer.c.
 *
 * Retries: one loop here, so the backends never retry. Attempt n waits
 * base * 2^n (capped) with "equal jitter" (half fixed, half random), so that
 * clients that failed together do not come back together, yet each still
 * waits long enough for a restarting server. A Retry-After of a 429 or 503 is
 * honoured up to the cap. The rules, and what each status means, are in
 * fetch_status.c.
 *
 * Stalls: two clocks. cfg->timeout (libcurl's low-speed limit of 1 byte/s)
 * bounds the wait for an answer to begin, which a busy object store may take
 * seconds over. Once bytes flow, a pause of cfg->stall_timeout is a stalled
 * connection (a peer that died mid-answer, a middlebox that dropped the flow):
 * the progress callback (fetch_xfer.c) cuts it, and the retry runs on a new
 * connection (CURLOPT_FRESH_CONNECT), since the stalled one, or its route, is
 * suspect. With the timeout alone, a stalled answer held its read for the
 * whole timeout (docs/benchmarks.md, "Stalled connections"). The shared
 * tier's requests (blob.c, req->heard set) run other clocks in place of both
 * (fetch_int.h words them; fetch_xfer.c runs them); a transfer they cut is
 * not tried again.
 *
 * PUT (the shared block tier, blob.c): the body is read by libcurl from the
 * caller's buffers (fetch_xfer.c), sent with Content-Length, and signed with
 * UNSIGNED-PAYLOAD: curl 7.88 does not hash a body, and the block carries its
 * own checksum, verified at every read.
 *
 * Redirects (fetch_int.h states the policy): libcurl follows them for a
 * request with req->follow, at most REMOTE_MAX_REDIRS hops, to http(s) only
 * (https only, from https: no downgrade under a validator's trust). The Range
 * and the validators go with each hop; credentials in the URL do not leave
 * their host (CURLOPT_UNRESTRICTED_AUTH stays off). A signed request (s3, the
 * shared tier) never follows: curl would not sign the next hop, and the
 * session token, a header of ours, would go with it to another host.
 *
 * Refuses: to take an answer the request did not ask for as its answer (a
 * 3xx, a 204, a 206 of other bytes: fetch_status.c), to log credentials, URLs
 * with userinfo or a Location's query.
 */
#define _GNU_SOURCE
#include "fetch_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CURL_BUF_SIZE 524288 /* libcurl's maximum receive buffer: fewer callbacks */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

struct remote_fetch {
	struct remote_fetch_conf conf; /* settings and counters (these borrowed) */
	CURLSH *share;		       /* DNS and TLS sessions, shared by all handles */
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	pthread_mutex_t lock; /* guards idle, n_idle, cap_idle */
	CURL **idle;	      /* handles not in use; their connections stay open */
	size_t n_idle, cap_idle;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_ALL);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *user)
{
	struct remote_fetch *f = user;

	(void)h;
	(void)access;
	pthread_mutex_lock(&f->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *user)
{
	struct remote_fetch *f = user;

	(void)h;
	pthread_mutex_unlock(&f->share_locks[data]);
}

void remote_fetch_conf_of(struct remote *r, struct remote_fetch_conf *out)
{
	const struct cfg *cfg = r->cfg;

	memset(out, 0, sizeof(*out));
	out->connect_timeout = cfg->connect_timeout;
	out->timeout = cfg->timeout;
	out->stall_timeout = cfg->stall_timeout;
	out->retries = cfg->retries;
	out->tls_verify = cfg->tls_verify;
	snprintf(out->ca_file, sizeof(out->ca_file), "%s", cfg->ca_file);
	out->requests = &r->requests;
	out->retried = &r->retries;
}

int remote_fetch_new(const struct remote_fetch_conf *conf, struct remote_fetch **out)
{
	struct remote_fetch *f;
	int i;

	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK) {
		MCFS_ERR("libcurl initialisation failed: %s", curl_easy_strerror(global_rc));
		return -EIO;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->conf = *conf;
	pthread_mutex_init(&f->lock, NULL);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&f->share_locks[i], NULL);
	f->share = curl_share_init();
	if (!f->share) {
		free(f);
		return -ENOMEM;
	}
	curl_share_setopt(f->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(f->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(f->share, CURLSHOPT_USERDATA, f);
	curl_share_setopt(f->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(f->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = f;
	return 0;
}

void remote_fetch_free(struct remote_fetch *f)
{
	size_t i;
	int j;

	if (!f)
		return;
	for (i = 0; i < f->n_idle; i++)
		curl_easy_cleanup(f->idle[i]);
	free(f->idle);
	curl_share_cleanup(f->share);
	for (j = 0; j < CURL_LOCK_DATA_LAST; j++)
		pthread_mutex_destroy(&f->share_locks[j]);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static CURL *pool_get(struct remote_fetch *f)
{
	CURL *h = NULL;

	pthread_mutex_lock(&f->lock);
	if (f->n_idle > 0)
		h = f->idle[--f->n_idle];
	pthread_mutex_unlock(&f->lock);
	if (!h)
		h = curl_easy_init();
	return h;
}

static void pool_put(struct remote_fetch *f, CURL *h)
{
	pthread_mutex_lock(&f->lock);
	if (f->n_idle == f->cap_idle) {
		size_t cap = f->cap_idle ? 2 * f->cap_idle : 16;
		CURL **n = realloc(f->idle, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&f->lock);
			curl_easy_cleanup(h);
			return;
		}
		f->idle = n;
		f->cap_idle = cap;
	}
	f->idle[f->n_idle++] = h;
	pthread_mutex_unlock(&f->lock);
}

/* ---- one request: its options, its attempts ---- */

static struct curl_slist *add_header(struct curl_slist *l, const char *name, const char *value,
				     bool *ok)
{
	char line[2200];
	struct curl_slist *n;

	if (!value || !*value)
		return l;
	snprintf(line, sizeof(line), "%s: %s", name, value);
	n = curl_slist_append(l, line);
	if (!n) {
		*ok = false;
		return l;
	}
	return n;
}

static int setup(struct remote_fetch *f, CURL *h, const struct remote_req *req, struct xfer *x,
		 struct curl_slist **hdrs, char *range, size_t rangelen)
{
	const struct remote_fetch_conf *cfg = &f->conf;
	char sigparam[128];
	bool ok = true;
	long low_time = (long)(cfg->timeout + 0.999);

	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, req->url);
	curl_easy_setopt(h, CURLOPT_SHARE, f->share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, (long)CURL_BUF_SIZE);
	if (req->follow && (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0)) {
		bool tls = strncasecmp(req->url, "https:", 6) == 0;

		curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)REMOTE_MAX_REDIRS);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85 has the string form, and deprecates the other */
		curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, tls ? "https" : "http,https");
#else
		curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS,
				 tls ? CURLPROTO_HTTPS : (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
		curl_easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L);
	} else {
		curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	}
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(cfg->connect_timeout * 1000));
	/* "timeout" is a stall detector, not a cap: an 8 MiB block may take long on a
	 * slow link, but no byte for this long means the connection is dead. The
	 * shared tier's clocks replace it (remote_xfer_on_progress). */
	if (!req->heard) {
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, low_time > 0 ? low_time : 1L);
	}
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, cfg->tls_verify ? 1L : 0L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, cfg->tls_verify ? 2L : 0L);
	if (cfg->ca_file[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, cfg->ca_file);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "mcfs/" MCFS_VERSION);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, remote_xfer_on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, remote_xfer_on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	x->stall_ns = (uint64_t)(cfg->stall_timeout * 1e9);
	x->quiet_ns = (uint64_t)(req->quiet_time * 1e9);
	x->idle_ns = (uint64_t)(req->idle_time * 1e9);
	if (x->stall_ns || req->heard) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, remote_xfer_on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	if (strcmp(req->method, "HEAD") == 0)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	if (strcmp(req->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, (long)CURL_BUF_SIZE);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, remote_xfer_on_put_read);
		curl_easy_setopt(h, CURLOPT_READDATA, x);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, remote_xfer_on_put_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(req->put_len[0] + req->put_len[1]));
		/* "Expect: 100-continue" stays: curl 7.88 signs an "Expect:" that
		 * removes it as a header of its own, and the signature fails */
	}
	if (req->len > 0) {
		snprintf(range, rangelen, "%" PRIu64 "-%" PRIu64, req->off,
			 req->off + req->len - 1);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	}
	*hdrs = add_header(*hdrs, "If-Match", req->if_match, &ok);
	*hdrs = add_header(*hdrs, "If-Range", req->if_range, &ok);
	*hdrs = add_header(*hdrs, "If-Unmodified-Since", req->if_unmodified_since, &ok);
	*hdrs = add_header(*hdrs, "If-None-Match", req->if_none_match, &ok);
	if (req->sig && req->sig->access_key) {
		/* curl 7.88 neither adds nor computes the payload hash; a bodiless
		 * request's hash is that of the empty string, always right. A PUT's
		 * body is not hashed (see the top of this file). */
		*hdrs = add_header(
		    *hdrs, "x-amz-content-sha256",
		    req->put_len[0] + req->put_len[1] ? UNSIGNED_PAYLOAD : EMPTY_SHA256, &ok);
		*hdrs = add_header(*hdrs, "x-amz-security-token", req->sig->session_token, &ok);
		snprintf(sigparam, sizeof(sigparam), "aws:amz:%s:s3", req->sig->region);
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigparam);
		/* USERNAME/PASSWORD, never USERPWD: access keys may contain ':' */
		curl_easy_setopt(h, CURLOPT_USERNAME, req->sig->access_key);
		curl_easy_setopt(h, CURLOPT_PASSWORD, req->sig->secret_key);
	}
	if (!ok)
		return -ENOMEM;
	if (*hdrs)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
	return 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* " bytes A-B" of a ranged request, "" otherwise, in @buf (for log lines). */
static const char *range_text(const struct remote_req *req, char *buf, size_t len)
{
	buf[0] = '\0';
	if (req->len > 0)
		snprintf(buf, len, " bytes %" PRIu64 "-%" PRIu64, req->off,
			 req->off + req->len - 1);
	return buf;
}

/* The path of a URL: from the '/' after the host to the query; "" if none. */
static size_t url_path(const char *url, const char **path)
{
	const char *host = strstr(url, "://");

	*path = host ? host + 3 + strcspn(host + 3, "/?#") : url + strlen(url);
	return strcspn(*path, "?#");
}

/* After a followed request: how many hops, and did they only add a '/'? */
static void followed(CURL *h, const struct remote_req *req, struct remote_resp *resp)
{
	const char *final = NULL, *a, *b;
	long n = 0;
	size_t na, nb;

	curl_easy_getinfo(h, CURLINFO_REDIRECT_COUNT, &n);
	resp->redirects = n > 0 ? (unsigned)n : 0;
	if (n <= 0 || curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &final) != CURLE_OK || !final)
		return;
	na = url_path(req->url, &a);
	nb = url_path(final, &b);
	resp->dir_redirect = nb == na + 1 && memcmp(a, b, na) == 0 && b[na] == '/';
}

/* Logs a failure worded in resp->error, unless req->quiet. */
static void log_failure(const struct remote_req *req, struct remote_resp *resp, const char *what,
			unsigned attempts)
{
	char range[64];

	if (req->quiet)
		return;
	range_text(req, range, sizeof(range));
	MCFS_ERR("%s %s%s failed after %u attempt(s): %s", req->method, what, range, attempts,
		 resp->error);
}

int remote_fetch_do(struct remote_fetch *f, const struct remote_req *req, struct remote_resp *resp)
{
	static _Thread_local unsigned seed;
	char errbuf[CURL_ERROR_SIZE], range[64], range_log[64], what[REMOTE_URL_MAX];
	unsigned attempt, max_attempts = f->conf.retries + 1;
	struct curl_slist *hdrs = NULL;
	struct xfer x = {.req = req, .resp = resp};
	CURLcode cc = CURLE_OK;
	CURL *h;
	int rc = 0;

	if (!seed)
		seed = (unsigned)mcfs_now_ns() ^ (unsigned)(uintptr_t)&x;
	mcfs_url_redact(req->what ? req->what : req->url, what, sizeof(what));
	memset(resp, 0, sizeof(*resp));
	remote_xfer_reset_resp(resp);
	x.cap = req->len ? REMOTE_ERROR_BODY_MAX
			 : MCFS_MAX(req->max_body, (size_t)REMOTE_ERROR_BODY_MAX);
	h = pool_get(f);
	if (!h)
		return -ENOMEM;
	if (setup(f, h, req, &x, &hdrs, range, sizeof(range)) < 0) {
		curl_slist_free_all(hdrs);
		pool_put(f, h);
		return -ENOMEM;
	}
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	for (attempt = 0; attempt < max_attempts; attempt++) {
		if (attempt > 0) {
			unsigned ms = remote_retry_wait_ms(remote_backoff_ms(attempt - 1, &seed),
							   resp->retry_after_s);

			MCFS_DEBUG("%s %s: retry %u in %u ms", req->method, what, attempt, ms);
			sleep_ms(ms);
			if (f->conf.retried)
				remote_count(f->conf.retried, 1);
			if (f->conf.requests)
				remote_count(f->conf.requests, 1);
		}
		errbuf[0] = '\0';
		remote_xfer_reset_resp(resp);
		x.overflow = x.unranged = x.stalled = false;
		x.last_rx_ns = x.sent_ns = 0;
		x.start_ns = mcfs_now_ns();
		x.cut = REMOTE_CUT_NONE;
		x.put_off = 0;
		x.ul_seen = 0;
		cc = curl_easy_perform(h);
		if (cc == CURLE_ABORTED_BY_CALLBACK && x.cut != REMOTE_CUT_NONE) {
			remote_xfer_shared_cut(req, resp, &x, errbuf, sizeof(errbuf));
			break; /* the shared tier makes one attempt */
		}
		if (cc == CURLE_ABORTED_BY_CALLBACK && x.stalled) {
			/* not the server's answer: a dead flow. Name it, then try a new one. */
			snprintf(errbuf, sizeof(errbuf),
				 "stalled: no byte for %.1f s after %zu bytes of the answer",
				 f->conf.stall_timeout, req->len ? resp->got : resp->body_len);
			if (attempt + 1 >= max_attempts)
				break;
			if (!req->quiet)
				MCFS_WARN("%s %s%s: %s; retrying on a new connection (%u of %u)",
					  req->method, what,
					  range_text(req, range_log, sizeof(range_log)), errbuf,
					  attempt + 1, max_attempts - 1);
			curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
			continue;
		}
		if (cc == CURLE_WRITE_ERROR && x.unranged) {
			/* If-Range failed (another version) or the server ignores Range */
			rc =
			    req->if_range && resp->etag[0] && strcmp(resp->etag, req->if_range) != 0
				? -ESTALE
				: -EIO;
			snprintf(resp->error, sizeof(resp->error),
				 "HTTP 200 with %" PRId64 " bytes to a ranged GET", resp->total);
			if (rc == -EIO && !req->quiet)
				MCFS_ERR("%s %s: the server ignored the Range header (%s)",
					 req->method, what, resp->error);
			goto out;
		}
		if (cc == CURLE_WRITE_ERROR && x.overflow) {
			snprintf(resp->error, sizeof(resp->error),
				 "the server sent more bytes than asked (%zu)",
				 req->len ? req->len : x.cap);
			if (!req->quiet)
				MCFS_ERR("%s %s: %s", req->method, what, resp->error);
			rc = -EIO;
			goto out;
		}
		if (!remote_retryable(cc, resp->status) || attempt + 1 >= max_attempts)
			break;
		if (cc == CURLE_OK)
			remote_status_words(resp, req);
		if (!req->quiet)
			MCFS_INFO("%s %s: %s; retrying (%u of %u)", req->method, what,
				  cc != CURLE_OK ? (errbuf[0] ? errbuf : curl_easy_strerror(cc))
						 : resp->error,
				  attempt + 1, max_attempts - 1);
	}
	if (cc != CURLE_OK) {
		remote_curl_words(resp, cc, errbuf);
		log_failure(req, resp, what, MCFS_MIN(attempt + 1, max_attempts));
		rc = -EIO;
		goto out;
	}
	if (req->follow)
		followed(h, req, resp);
	rc = remote_status_errno(resp->status, remote_req_want(req));
	if (rc < 0)
		remote_status_words(resp, req);
	if (rc == -EIO || rc == -ERANGE)
		log_failure(req, resp, what, MCFS_MIN(attempt + 1, max_attempts));
	else if (rc == -ENOENT && !req->quiet_404 && !req->quiet)
		MCFS_WARN("%s %s: not found (%s)", req->method, what, resp->error);
	if (rc == 0 && req->len > 0)
		rc = remote_check_range(req, resp, what);
out:
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(hdrs);
	pool_put(f, h);
	return rc;
}
