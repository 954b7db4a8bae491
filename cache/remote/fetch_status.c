/*
 * fetch_status.c - what an HTTP answer means, for the fetch layer: the status
 * table (which answers a request takes, and the errno of the others), the
 * words of a failed answer, the retry rules, and the shared tier's clocks
 * (remote_shared_cut()). Pure functions of the request and the answer (and
 * of the times passed in), so that ctest checks every row; fetch.c runs the
 * transfers.
 *
 * A ranged GET's answer is checked here too, once the transfer is done: the
 * range, all of it, of the object opened.
 *
 * Design: a status means something only for the request it answers. A 206 is
 * a ranged GET's answer and nobody else's; a 304 answers only a conditional
 * GET; a 201 or 204 only a PUT. So the table has a column per kind of request
 * (enum remote_want), and anything a request does not take is an error, never
 * a success with an empty or stale buffer: a 3xx that is still the final
 * answer (not followed, or with no Location) included.
 *
 * Words: the service's own are the useful ones. An S3 error document gives
 * its Code and Message ("HTTP 400 AuthorizationHeaderMalformed: ... expecting
 * 'eu-west-1'"); another body gives its first words, tags dropped, printable
 * ASCII only (a body is the server's text, and a log line is read on a
 * terminal). A Location is shown without user:password@ and without its query
 * (a signed URL's signature is a credential while it lasts).
 */
#define _GNU_SOURCE
#include "fetch_int.h"
#include "net_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_BASE_MS 100 /* first retry soon: most resets are one-offs */
#define BACKOFF_CAP_MS 5000 /* a restarting server is back within seconds */
#define BODY_WORDS_MAX 120  /* of a body that is not an S3 error document */
#define SHOWN_URL_MAX 200   /* of a Location or an Endpoint */

#define WANT_ALL (REMOTE_WANT_RANGE | REMOTE_WANT_WHOLE | REMOTE_WANT_COND | REMOTE_WANT_PUT)

/* The status table: the first row that holds the status decides. */
static const struct status_rule {
	long lo, hi;	/* statuses, inclusive */
	unsigned takes; /* the requests (enum remote_want bits) that take it as their answer */
	int err;	/* what it is to the others */
} status_table[] = {
    {200, 200, WANT_ALL, -EIO},		 /* a ranged GET's: checked to be the whole object */
    {201, 201, REMOTE_WANT_PUT, -EIO},	 /* Created */
    {204, 204, REMOTE_WANT_PUT, -EIO},	 /* No Content: no body, so no GET's answer */
    {206, 206, REMOTE_WANT_RANGE, -EIO}, /* checked to be the asked range, all of it */
    {304, 304, REMOTE_WANT_COND, -EIO},	 /* Not Modified: only to If-None-Match */
    {401, 401, 0, -EACCES},
    {403, 403, 0, -EACCES},
    {404, 404, 0, -ENOENT},
    {410, 410, 0, -ENOENT},
    {412, 412, 0, -ESTALE}, /* If-Match failed: another version */
    {416, 416, 0, -ERANGE}, /* the range starts past the end: a shorter object */
    /* the rest: 1xx, other 2xx, 3xx (a redirect not followed, or with no
     * Location), other 4xx, 5xx (after retries), 0 (no status line) */
    {LONG_MIN, LONG_MAX, 0, -EIO},
};

enum remote_want remote_req_want(const struct remote_req *req)
{
	if (strcmp(req->method, "PUT") == 0)
		return REMOTE_WANT_PUT;
	if (req->len > 0)
		return REMOTE_WANT_RANGE;
	if (req->if_none_match && req->if_none_match[0])
		return REMOTE_WANT_COND;
	return REMOTE_WANT_WHOLE;
}

int remote_status_errno(long status, enum remote_want want)
{
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(status_table); i++) {
		const struct status_rule *r = &status_table[i];

		if (status >= r->lo && status <= r->hi)
			return r->takes & (unsigned)want ? 0 : r->err;
	}
	return -EIO; /* not reached: the last row holds every status */
}

/* ---- words ---- */

/* Appends printf-style text to out, cut to fit. */
static void add(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(char *out, size_t len, const char *fmt, ...)
{
	size_t n = strlen(out);
	va_list ap;

	if (n + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(out + n, len - n, fmt, ap);
	va_end(ap);
}

/*
 * A server's text made fit for a log line: tags (<...>) dropped, each run of
 * white space one space, each run of other bytes that are not printable ASCII
 * one '?', at most @max characters ("..." when cut). Can't fail.
 */
static void words_of(const char *s, size_t len, size_t max, char *out, size_t outlen)
{
	size_t i, o = 0;
	bool tag = false, space = false, odd = false, cut = false;

	if (max > outlen - 4)
		max = outlen - 4;
	for (i = 0; i < len && s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool other = ch < 0x20 || ch >= 0x7f;

		if (tag || ch == '<') {
			tag = ch != '>';
			space = o > 0; /* a tag separates words */
			continue;
		}
		if (ch == ' ' || (ch >= '\t' && ch <= '\r')) {
			space = o > 0;
			continue;
		}
		if (other && odd && !space)
			continue; /* a run of them is one '?' */
		if (o + space + 1 > max) {
			cut = true;
			break;
		}
		if (space)
			out[o++] = ' ';
		out[o++] = other ? '?' : (char)ch;
		space = false;
		odd = other;
	}
	out[o] = '\0';
	if (cut)
		memcpy(out + o, "...", 4);
}

void remote_url_words(const char *url, char *out, size_t outlen)
{
	char bare[REMOTE_URL_MAX];
	size_t q;

	mcfs_url_redact(url, bare, sizeof(bare));
	q = strcspn(bare, "?#");
	words_of(bare, q, SHOWN_URL_MAX, out, outlen);
	if (bare[q] == '?')
		add(out, outlen, "?...");
}

/* Text, not bytes: no NUL and few control bytes in its first 512 bytes. */
static bool looks_text(const char *s, size_t len)
{
	size_t i, odd = 0, n = MCFS_MIN(len, (size_t)512);

	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == 0)
			return false;
		odd += (ch < 0x20 && !(ch >= '\t' && ch <= '\r')) || ch == 0x7f;
	}
	return odd * 16 <= n;
}

/* What a request takes, in words (for an answer it did not take). */
static const char *takes_words(enum remote_want want)
{
	switch (want) {
	case REMOTE_WANT_RANGE:
		return "a ranged GET takes only a 206 of the asked bytes or a 200 of the whole "
		       "object";
	case REMOTE_WANT_COND:
		return "a conditional GET takes only a 200 or a 304";
	case REMOTE_WANT_PUT:
		return "a PUT takes only a 200, 201 or 204";
	default:
		return "it takes only a 200";
	}
}

/* The hint of an answer, if one is known; "" otherwise. */
static void hint_of(const struct remote_resp *resp, const struct remote_s3_error *doc,
		    const struct remote_req *req, char *out, size_t len)
{
	const char *region = resp->bucket_region[0] ? resp->bucket_region : doc->region;
	bool moved = strcmp(doc->code, "PermanentRedirect") == 0 ||
		     (resp->status == 301 && resp->bucket_region[0]);
	char r[80];

	out[0] = '\0';
	words_of(region, strlen(region), 63, r, sizeof(r));
	if (strcmp(doc->code, "RequestTimeTooSkewed") == 0) {
		add(out, len,
		    "the node's clock differs from the service's by more than 15 "
		    "minutes: check NTP");
		if (resp->skew_known)
			add(out, len, " (the service's Date is %lld s %s this node's clock)",
			    (long long)(resp->skew_s < 0 ? -resp->skew_s : resp->skew_s),
			    resp->skew_s < 0 ? "behind" : "ahead of");
	} else if (r[0] && (moved || strcmp(doc->code, "AuthorizationHeaderMalformed") == 0)) {
		add(out, len, "the bucket is in region %s: set region=%s", r, r);
	} else if (moved) {
		add(out, len,
		    "the bucket is in another region, or behind another endpoint: set "
		    "region= or endpoint=");
	} else if (resp->status >= 300 && resp->status < 400 && resp->status != 304 &&
		   !req->follow) {
		add(out, len,
		    "mcfs does not follow an S3 redirect (a signed request goes to its "
		    "own endpoint only): set endpoint= or region= to the bucket's");
	} else if ((resp->status >= 200 && resp->status < 300) || resp->status == 304) {
		add(out, len, "%s", takes_words(remote_req_want(req)));
	}
}

void remote_status_words(struct remote_resp *resp, const struct remote_req *req)
{
	struct remote_s3_error doc;
	bool redirect = resp->status >= 300 && resp->status < 400 && resp->status != 304;
	char w[SHOWN_URL_MAX + 8], hint[256];
	size_t n = sizeof(resp->error);

	resp->code[0] = '\0';
	if (!resp->body || remote_s3_parse_error(resp->body, resp->body_len, &doc) < 0)
		memset(&doc, 0, sizeof(doc));
	words_of(doc.code, strlen(doc.code), sizeof(resp->code) - 4, resp->code,
		 sizeof(resp->code));
	snprintf(resp->error, n, "HTTP %ld", resp->status);
	if (resp->code[0])
		add(resp->error, n, " %s", resp->code);
	if (redirect && resp->location[0]) {
		remote_url_words(resp->location, w, sizeof(w));
		add(resp->error, n, " to %s", w);
	} else if (redirect && !resp->code[0]) { /* S3's 301 has none: its document says */
		add(resp->error, n, " with no Location");
	}
	if (doc.code[0])
		words_of(doc.message, strlen(doc.message), sizeof(doc.message), w, sizeof(w));
	else if (resp->body && looks_text(resp->body, resp->body_len))
		words_of(resp->body, resp->body_len, BODY_WORDS_MAX, w, sizeof(w));
	else
		w[0] = '\0';
	hint_of(resp, &doc, req, hint, sizeof(hint));
	if (w[0] && hint[0] && !doc.endpoint[0] && w[strlen(w) - 1] == '.')
		w[strlen(w) - 1] = '\0'; /* "too large; the node's clock", not "too large.;" */
	if (w[0])
		add(resp->error, n, ": %s", w);
	if (doc.endpoint[0]) {
		remote_url_words(doc.endpoint, w, sizeof(w));
		add(resp->error, n, " (endpoint %s)", w);
	}
	if (hint[0])
		add(resp->error, n, "; %s", hint);
}

void remote_curl_words(struct remote_resp *resp, int curl_code, const char *errbuf)
{
	CURLcode cc = (CURLcode)curl_code;
	char loc[256];

	remote_url_words(resp->location, loc, sizeof(loc));
	if (cc == CURLE_TOO_MANY_REDIRECTS)
		snprintf(resp->error, sizeof(resp->error),
			 "more than %d redirects (a loop?), the last to %s", REMOTE_MAX_REDIRS,
			 loc);
	else if (cc == CURLE_UNSUPPORTED_PROTOCOL && resp->location[0])
		snprintf(resp->error, sizeof(resp->error),
			 "HTTP %ld to %s, which is refused: redirects go to http or https only, "
			 "and from https to https only",
			 resp->status, loc);
	else
		remote_copy(resp->error, sizeof(resp->error),
			    errbuf[0] ? errbuf : curl_easy_strerror(cc));
}

/* ---- a ranged GET's answer ---- */

int remote_check_range(const struct remote_req *req, struct remote_resp *resp, const char *what)
{
	uint64_t a = 0, b = 0;

	/* another size first: a shorter object also answers another range */
	if (req->expect_total && resp->total >= 0 && (uint64_t)resp->total != req->expect_total) {
		snprintf(resp->error, sizeof(resp->error), "%" PRId64 " bytes, not %" PRIu64,
			 resp->total, req->expect_total);
		return -ESTALE;
	}
	/* a 206 is complete only with exactly the asked range (a multipart answer has none) */
	if (resp->status == 206 &&
	    (sscanf(resp->content_range, "bytes %" SCNu64 "-%" SCNu64, &a, &b) != 2 ||
	     a != req->off || b != req->off + req->len - 1)) {
		snprintf(resp->error, sizeof(resp->error),
			 "asked bytes %" PRIu64 "-%" PRIu64 ", HTTP 206 with %s%s", req->off,
			 req->off + req->len - 1,
			 resp->content_range[0] ? "Content-Range " : "no Content-Range",
			 resp->content_range);
		if (!req->quiet)
			MCFS_ERR("%s: %s", what, resp->error);
		return -EIO;
	}
	if (req->expect_etag && req->expect_etag[0] && resp->etag[0] &&
	    strcmp(resp->etag, req->expect_etag) != 0)
		return -ESTALE;
	if (resp->got != req->len) {
		snprintf(resp->error, sizeof(resp->error),
			 "bytes %" PRIu64 "-%" PRIu64 ": got %zu of %zu bytes", req->off,
			 req->off + req->len - 1, resp->got, req->len);
		if (!req->quiet)
			MCFS_ERR("%s: %s", what, resp->error);
		return -EIO;
	}
	return 0;
}

/* ---- the shared tier's clocks ---- */

enum remote_cut remote_shared_cut(uint64_t now, uint64_t own, uint64_t svc, bool stored,
				  uint64_t quiet_ns, uint64_t idle_ns)
{
	uint64_t mine = mcfs_since_ns(now, own);

	if (stored)
		return mine >= idle_ns ? REMOTE_CUT_STORED : REMOTE_CUT_NONE;
	/* saturated: a byte another thread heard after we read the clock */
	if (mcfs_since_ns(now, MCFS_MAX(own, svc)) >= quiet_ns)
		return REMOTE_CUT_QUIET;
	return mine >= idle_ns ? REMOTE_CUT_BUSY : REMOTE_CUT_NONE;
}

/* ---- retries ---- */

bool remote_retryable(int curl_code, long status)
{
	switch ((CURLcode)curl_code) {
	case CURLE_OK:
		return status == 429 || (status >= 500 && status <= 599);
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

unsigned remote_backoff_ms(unsigned attempt, unsigned *seed)
{
	unsigned d = BACKOFF_BASE_MS;

	while (attempt-- > 0 && d < BACKOFF_CAP_MS)
		d *= 2;
	if (d > BACKOFF_CAP_MS)
		d = BACKOFF_CAP_MS;
	return d / 2 + (unsigned)rand_r(seed) % (d / 2 + 1);
}

unsigned remote_retry_wait_ms(unsigned backoff_ms, unsigned retry_after_s)
{
	uint64_t asked = (uint64_t)retry_after_s * 1000; /* up to ~4.3e12: no overflow */

	if (asked <= backoff_ms)
		return backoff_ms;
	return (unsigned)MCFS_MIN(asked, (uint64_t)BACKOFF_CAP_MS);
}
