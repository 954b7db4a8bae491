/*
 * fetch_xfer.c - one transfer's libcurl callbacks, for the fetch layer: the
 * body as it comes, the headers into struct remote_resp, a PUT's body as it
 * goes, and the progress clocks that cut a stalled answer, with their state,
 * struct xfer (fetch_int.h). fetch.c sets them on a handle, runs the transfer
 * and its retries, and reads what they left. Split from fetch.c, which keeps
 * the pool, a request's options and the retry loop: what libcurl calls back
 * during one transfer is here, what runs around the transfers is there.
 *
 * Threads: libcurl calls them on the thread in curl_easy_perform(), so a
 * transfer's struct xfer and struct remote_resp have one thread; only
 * req->heard, a stamp that the shared tier's requests share, is atomic.
 *
 * Bodies: a ranged GET is written straight into the caller's buffer by the
 * write callback, which refuses a single byte past the asked range; anything
 * else (listings, manifests, error documents) is collected into a malloc'd
 * buffer with a cap. Nothing is staged twice.
 *
 * Clocks: the progress callback cuts an answer that stopped for
 * cfg->stall_timeout once bytes flowed (fetch.c tries again on a new
 * connection). The shared tier's requests (blob.c, req->heard set) run other
 * clocks, all in remote_xfer_on_progress (fetch_int.h words them): a busy
 * shared service answers each of many requests late but keeps sending bytes on
 * some, and that is no dead flow; one that sends nothing on any of them for
 * quiet_time is.
 *
 * PUT (the shared block tier, blob.c): the body is read by libcurl from the
 * caller's buffers (a RAM slot and a 32-byte trailer) without a copy, and
 * read again from where libcurl seeks when it rewinds (a retry on a reused
 * connection).
 */
#define _GNU_SOURCE
#include "fetch_int.h"

#include <curl/curl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static bool body_append(struct xfer *x, const char *data, size_t n)
{
	struct remote_resp *resp = x->resp;

	if (resp->body_len + n > x->cap)
		return false;
	if (resp->body_len + n + 1 > x->body_cap) {
		size_t cap = x->body_cap ? x->body_cap : 16384;
		char *b;

		while (cap < resp->body_len + n + 1)
			cap *= 2;
		b = realloc(resp->body, cap);
		if (!b)
			return false;
		resp->body = b;
		x->body_cap = cap;
	}
	memcpy(resp->body + resp->body_len, data, n);
	resp->body_len += n;
	resp->body[resp->body_len] = '\0';
	return true;
}

/* Puts bytes [at, at+n) of a ranged answer in place: buf, then tail for the last tail_len. */
static void land(const struct remote_req *req, size_t at, const char *data, size_t n)
{
	size_t in_buf = req->len - req->tail_len, k;

	if (at < in_buf) {
		k = MCFS_MIN(n, in_buf - at);
		memcpy((char *)req->buf + at, data, k);
		at += k;
		data += k;
		n -= k;
	}
	if (n > 0)
		memcpy((char *)req->tail + (at - in_buf), data, n);
}

/* Bytes came from the server now: this request's clock, and the service's. */
static void heard(struct xfer *x)
{
	x->last_rx_ns = mcfs_now_ns();
	if (x->req->heard)
		atomic_store_explicit(x->req->heard, x->last_rx_ns, memory_order_relaxed);
}

size_t remote_xfer_on_body(char *data, size_t size, size_t nmemb, void *user)
{
	struct xfer *x = user;
	struct remote_resp *resp = x->resp;
	const struct remote_req *req = x->req;
	size_t n = size * nmemb;

	heard(x);
	if (resp->status < 200 || resp->status >= 300 ||
	    (req->len > 0 && resp->status != 200 && resp->status != 206)) {
		/* an answer the request won't take: keep the start, for its words */
		if (resp->body_len < REMOTE_ERROR_BODY_MAX)
			(void)body_append(x, data,
					  MCFS_MIN(n, REMOTE_ERROR_BODY_MAX - resp->body_len));
		return n;
	}
	if (req->len == 0) {
		/* an unranged body: bounded, collected */
		if (!body_append(x, data, n)) {
			x->overflow = true;
			return 0;
		}
		return n;
	}
	if (resp->status == 200 &&
	    (req->off != 0 || resp->total < 0 || (uint64_t)resp->total != req->len)) {
		/* a whole (other?) object instead of our range: stop before a byte lands */
		x->unranged = true;
		return 0;
	}
	if (resp->got + n > req->len) {
		x->overflow = true;
		return 0;
	}
	land(req, resp->got, data, n);
	resp->got += n;
	return n;
}

/* PUT: hands libcurl the next bytes of put[0] then put[1]. */
size_t remote_xfer_on_put_read(char *out, size_t size, size_t nmemb, void *user)
{
	struct xfer *x = user;
	const struct remote_req *req = x->req;
	size_t room = size * nmemb, n = 0, k, skip = x->put_off;
	int i;

	for (i = 0; i < 2 && n < room; i++) {
		if (skip >= req->put_len[i]) {
			skip -= req->put_len[i];
			continue;
		}
		k = MCFS_MIN(room - n, req->put_len[i] - skip);
		memcpy(out + n, (const char *)req->put[i] + skip, k);
		n += k;
		skip = 0;
	}
	x->put_off += n;
	return n;
}

/* PUT: libcurl rewinds the body (a retry on a reused connection). */
int remote_xfer_on_put_seek(void *user, curl_off_t offset, int origin)
{
	struct xfer *x = user;

	if (origin != SEEK_SET || offset < 0)
		return CURL_SEEKFUNC_CANTSEEK;
	x->put_off = (size_t)offset;
	return CURL_SEEKFUNC_OK;
}

static void copy_value(char *dst, size_t dstlen, const char *v, size_t n)
{
	while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	while (n > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static bool header_is(const char *line, size_t n, const char *name, const char **val)
{
	size_t k = strlen(name);

	if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
		return false;
	*val = line + k + 1;
	return true;
}

void remote_xfer_reset_resp(struct remote_resp *resp)
{
	resp->status = 0;
	resp->etag[0] = resp->last_modified[0] = resp->location[0] = '\0';
	resp->bucket_region[0] = '\0';
	resp->skew_known = false;
	resp->skew_s = 0;
	resp->content_range[0] = '\0';
	resp->retry_after_s = 0;
	resp->content_type[0] = '\0';
	resp->mtime_ns = resp->date_ns = 0;
	resp->content_length = -1;
	resp->total = -1;
	resp->body_len = 0;
	resp->got = 0;
	if (resp->body)
		resp->body[0] = '\0';
}

size_t remote_xfer_on_header(char *line, size_t size, size_t nmemb, void *user)
{
	struct xfer *x = user;
	struct remote_resp *resp = x->resp;
	size_t n = size * nmemb;
	const char *v;
	char tmp[128];

	heard(x);
	if (n > 5 && strncmp(line, "HTTP/", 5) == 0) {
		const char *sp = memchr(line, ' ', n);

		remote_xfer_reset_resp(resp);
		resp->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return n;
	}
	if (header_is(line, n, "etag", &v)) {
		copy_value(resp->etag, sizeof(resp->etag), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "last-modified", &v)) {
		copy_value(resp->last_modified, sizeof(resp->last_modified), v,
			   n - (size_t)(v - line));
		time_t t = curl_getdate(resp->last_modified, NULL);
		resp->mtime_ns = t > 0 ? (int64_t)t * 1000000000 : 0;
	} else if (header_is(line, n, "date", &v)) {
		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		time_t t = curl_getdate(tmp, NULL);
		resp->date_ns = t > 0 ? (int64_t)t * 1000000000 : 0;
		resp->skew_known = t > 0;
		resp->skew_s = t > 0 ? (int64_t)t - (int64_t)time(NULL) : 0;
	} else if (header_is(line, n, "content-length", &v)) {
		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		resp->content_length = strtoll(tmp, NULL, 10);
		if (resp->status == 200)
			resp->total = resp->content_length;
	} else if (header_is(line, n, "content-range", &v)) {
		const char *slash;

		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		slash = strchr(tmp, '/');
		if (slash && slash[1] != '*')
			resp->total = strtoll(slash + 1, NULL, 10);
		/* the start and end are checked against the request after the transfer */
		remote_copy(resp->content_range, sizeof(resp->content_range), tmp);
	} else if (header_is(line, n, "location", &v)) {
		copy_value(resp->location, sizeof(resp->location), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "content-type", &v)) {
		copy_value(resp->content_type, sizeof(resp->content_type), v,
			   n - (size_t)(v - line));
	} else if (header_is(line, n, "retry-after", &v)) {
		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		if (resp->status == 429 || resp->status == 503)
			resp->retry_after_s = (unsigned)MCFS_MIN(strtoul(tmp, NULL, 10), UINT_MAX);
	} else if (header_is(line, n, "x-amz-bucket-region", &v)) {
		copy_value(resp->bucket_region, sizeof(resp->bucket_region), v,
			   n - (size_t)(v - line));
	}
	return n;
}

/*
 * The shared tier's clocks (req->heard; fetch_int.h): 1 to cut the transfer,
 * with x->cut naming the clock, else 0.
 */
static int shared_clock(struct xfer *x, uint64_t now)
{
	uint64_t own = x->last_rx_ns ? x->last_rx_ns : x->start_ns;
	uint64_t svc = atomic_load_explicit(x->req->heard, memory_order_relaxed);
	/* the body is out, its answer not begun: the service is storing it */
	bool storing = x->sent_ns && x->resp->status < 200;

	x->cut =
	    remote_shared_cut(now, own, svc, storing && x->req->stores, x->quiet_ns, x->idle_ns);
	if (x->cut == REMOTE_CUT_NONE)
		return 0;
	x->stalled = true;
	return 1;
}

/*
 * libcurl calls this often while bytes flow and about once a second while
 * none do: the clock that finds a stalled answer. Returns non-zero to abort.
 */
int remote_xfer_on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			    curl_off_t ulnow)
{
	struct xfer *x = user;

	(void)dltotal;
	(void)dlnow;
	if (ulnow > x->ul_seen) { /* a PUT's body moving is progress too */
		x->ul_seen = ulnow;
		x->last_rx_ns = mcfs_now_ns();
		if (ultotal > 0 && ulnow >= ultotal)
			x->sent_ns = x->last_rx_ns;
	}
	if (x->req->heard)
		return shared_clock(x, mcfs_now_ns());
	if (x->stall_ns == 0 || x->last_rx_ns == 0)
		return 0; /* off, or the answer has not begun: cfg->timeout's part */
	if (mcfs_now_ns() - x->last_rx_ns < x->stall_ns)
		return 0;
	x->stalled = true;
	return 1;
}

/* Words the shared clock that cut a transfer into @errbuf, and sets resp's flags. */
void remote_xfer_shared_cut(const struct remote_req *req, struct remote_resp *resp,
			    const struct xfer *x, char *errbuf, size_t len)
{
	uint64_t now = mcfs_now_ns();

	switch (x->cut) {
	case REMOTE_CUT_STORED:
		resp->unanswered = true;
		snprintf(errbuf, len, "no answer %.1f s after the %zu bytes of the body were sent",
			 (double)(now - x->sent_ns) / 1e9, req->put_len[0] + req->put_len[1]);
		break;
	case REMOTE_CUT_QUIET:
		resp->quiet = true;
		snprintf(errbuf, len, "no byte from the service for %.1f s", req->quiet_time);
		break;
	default:
		resp->busy = true;
		snprintf(errbuf, len,
			 "no byte of this request for %.1f s while the service sent "
			 "others",
			 req->idle_time);
	}
}
