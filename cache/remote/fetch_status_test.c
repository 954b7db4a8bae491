/*
 * fetch_status_test.c - unit tests of fetch_status.c: every row and column of
 * the status table (a 3xx, a 204 or a 206 of other bytes is never a block's
 * answer), a ranged GET's checks (the asked range, all of it), the words of
 * failed answers (S3 error documents, redirects, bodies of servers that are
 * not S3, hints, what is kept out of a log line), the retry wait (a huge
 * Retry-After) and S3 error documents. Exits 0 on pass, 1 on failure.
 */
#define _GNU_SOURCE
#include "fetch_int.h"
#include "mcfs_test.h"
#include "net_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_HAS(hay, needle)                                                                     \
	CHECK(strstr((hay), (needle)) != NULL, "'%s' is not in '%s'", (needle), (hay))

#define RANGE REMOTE_WANT_RANGE
#define WHOLE REMOTE_WANT_WHOLE
#define COND REMOTE_WANT_COND
#define PUT REMOTE_WANT_PUT

/* One status, what each kind of request makes of it: range, whole, cond, put. */
static const struct {
	long status;
	int range, whole, cond, put;
} rows[] = {
    {0, -EIO, -EIO, -EIO, -EIO}, /* no status line */
    {100, -EIO, -EIO, -EIO, -EIO},
    {101, -EIO, -EIO, -EIO, -EIO},
    {200, 0, 0, 0, 0},
    {201, -EIO, -EIO, -EIO, 0},
    {202, -EIO, -EIO, -EIO, -EIO},
    {203, -EIO, -EIO, -EIO, -EIO},
    {204, -EIO, -EIO, -EIO, 0},
    {205, -EIO, -EIO, -EIO, -EIO},
    {206, 0, -EIO, -EIO, -EIO},
    {207, -EIO, -EIO, -EIO, -EIO},
    {299, -EIO, -EIO, -EIO, -EIO},
    {300, -EIO, -EIO, -EIO, -EIO},
    {301, -EIO, -EIO, -EIO, -EIO},
    {302, -EIO, -EIO, -EIO, -EIO},
    {303, -EIO, -EIO, -EIO, -EIO},
    {304, -EIO, -EIO, 0, -EIO},
    {307, -EIO, -EIO, -EIO, -EIO},
    {308, -EIO, -EIO, -EIO, -EIO},
    {399, -EIO, -EIO, -EIO, -EIO},
    {400, -EIO, -EIO, -EIO, -EIO},
    {401, -EACCES, -EACCES, -EACCES, -EACCES},
    {403, -EACCES, -EACCES, -EACCES, -EACCES},
    {404, -ENOENT, -ENOENT, -ENOENT, -ENOENT},
    {405, -EIO, -EIO, -EIO, -EIO},
    {410, -ENOENT, -ENOENT, -ENOENT, -ENOENT},
    {412, -ESTALE, -ESTALE, -ESTALE, -ESTALE},
    {416, -ERANGE, -ERANGE, -ERANGE, -ERANGE},
    {429, -EIO, -EIO, -EIO, -EIO},
    {500, -EIO, -EIO, -EIO, -EIO},
    {503, -EIO, -EIO, -EIO, -EIO},
    {599, -EIO, -EIO, -EIO, -EIO},
    {600, -EIO, -EIO, -EIO, -EIO},
    {-1, -EIO, -EIO, -EIO, -EIO},
    {LONG_MAX, -EIO, -EIO, -EIO, -EIO},
};

static void test_table(void)
{
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(rows); i++) {
		long s = rows[i].status;

		CHECK(remote_status_errno(s, RANGE) == rows[i].range, "%ld range", s);
		CHECK(remote_status_errno(s, WHOLE) == rows[i].whole, "%ld whole", s);
		CHECK(remote_status_errno(s, COND) == rows[i].cond, "%ld cond", s);
		CHECK(remote_status_errno(s, PUT) == rows[i].put, "%ld put", s);
	}
}

static void test_want(void)
{
	char buf[8];
	struct remote_req get = {.method = "GET", .url = "http://h/f"};
	struct remote_req ranged = {.method = "GET", .off = 8, .len = 8, .buf = buf};
	struct remote_req cond = {.method = "GET", .if_none_match = "\"e\""};
	struct remote_req head = {.method = "HEAD"};
	struct remote_req put = {.method = "PUT", .put_len = {8, 0}};

	CHECK(remote_req_want(&get) == WHOLE);
	CHECK(remote_req_want(&ranged) == RANGE);
	CHECK(remote_req_want(&cond) == COND);
	CHECK(remote_req_want(&head) == WHOLE);
	CHECK(remote_req_want(&put) == PUT);
}

/* Words of an answer: status, Location, body (copied: words may not keep it). */
static const char *words(struct remote_resp *resp, const struct remote_req *req, long status,
			 const char *location, const char *body)
{
	static char copy[8192];

	resp->status = status;
	snprintf(resp->location, sizeof(resp->location), "%s", location);
	snprintf(copy, sizeof(copy), "%s", body ? body : "");
	resp->body = body ? copy : NULL;
	resp->body_len = body ? strlen(copy) : 0;
	remote_status_words(resp, req);
	return resp->error;
}

#define S3_ERROR(code, message, extra)                                                             \
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" code                           \
	"</Code><Message>" message "</Message>" extra                                              \
	"<RequestId>4442587FB7D0A2F9</RequestId></Error>"

static void test_s3_words(void)
{
	struct remote_req list = {.method = "GET"}, s3read = {.method = "GET", .len = 4096};
	struct remote_resp r;

	memset(&r, 0, sizeof(r));
	CHECK_STR(words(&r, &list, 400, "",
			S3_ERROR("AuthorizationHeaderMalformed",
				 "The authorization header is malformed; the region 'us-east-1' "
				 "is wrong; expecting 'eu-west-1'",
				 "<Region>eu-west-1</Region>")),
		  "HTTP 400 AuthorizationHeaderMalformed: The authorization header is malformed; "
		  "the region 'us-east-1' is wrong; expecting 'eu-west-1'; the bucket is in region "
		  "eu-west-1: set region=eu-west-1");
	CHECK_STR(r.code, "AuthorizationHeaderMalformed");

	r.skew_known = true;
	r.skew_s = -1200;
	CHECK_STR(
	    words(&r, &list, 403, "",
		  S3_ERROR("RequestTimeTooSkewed",
			   "The difference between the request time and the current time "
			   "is too large.",
			   "<MaxAllowedSkewMilliseconds>900000</MaxAllowedSkewMilliseconds>")),
	    "HTTP 403 RequestTimeTooSkewed: The difference between the request time and the "
	    "current time is too large; the node's clock differs from the service's by more "
	    "than 15 minutes: check NTP (the service's Date is 1200 s behind this node's "
	    "clock)");
	r.skew_known = false;

	/* a bucket in another region: the document, or only the header (a HEAD) */
	CHECK_STR(words(&r, &list, 301, "",
			S3_ERROR("PermanentRedirect",
				 "Please send all future requests to this "
				 "endpoint.",
				 "<Endpoint>b.s3.eu-west-1.amazonaws.com</Endpoint>")),
		  "HTTP 301 PermanentRedirect: Please send all future requests to this endpoint. "
		  "(endpoint b.s3.eu-west-1.amazonaws.com); the bucket is in another region, or "
		  "behind another endpoint: set region= or endpoint=");
	snprintf(r.bucket_region, sizeof(r.bucket_region), "eu-west-1");
	CHECK_STR(words(&r, &list, 301, "", NULL),
		  "HTTP 301 with no Location; the bucket is in region eu-west-1: set "
		  "region=eu-west-1");
	r.bucket_region[0] = '\0';

	/* a redirect not followed: the Location without its credentials and query */
	CHECK_STR(words(&r, &s3read, 307,
			"https://user:secret@b.s3.eu-west-1.amazonaws.com/k?X-Amz-Signature=abc",
			S3_ERROR("TemporaryRedirect",
				 "Please re-send this request to the "
				 "specified temporary endpoint.",
				 "")),
		  "HTTP 307 TemporaryRedirect to https://b.s3.eu-west-1.amazonaws.com/k?...: "
		  "Please re-send this request to the specified temporary endpoint; mcfs does not "
		  "follow an S3 redirect (a signed request goes to its own endpoint only): set "
		  "endpoint= or region= to the bucket's");
	CHECK_STR(words(&r, &s3read, 503, "",
			S3_ERROR("SlowDown",
				 "Please reduce your request "
				 "rate.",
				 "")),
		  "HTTP 503 SlowDown: Please reduce your request rate.");
	CHECK_STR(r.code, "SlowDown");
	CHECK_STR(words(&r, &s3read, 404, "", NULL), "HTTP 404");
	CHECK_STR(r.code, "");
}

static void test_other_words(void)
{
	struct remote_req follows = {.method = "GET", .len = 4096, .follow = true};
	struct remote_req head = {.method = "HEAD", .follow = true};
	struct remote_resp r;
	char big[600];

	memset(&r, 0, sizeof(r));
	CHECK_STR(words(&r, &follows, 302, "", "<html><body>moved</body></html>\n"),
		  "HTTP 302 with no Location: moved");
	CHECK_STR(words(&r, &follows, 500, "",
			"<html><head><title>500 Internal Server Error</title></head>\n<body>"
			"<h1>the disk\tis   gone</h1>\x1b[31m\x01\x02 </body></html>\n"),
		  "HTTP 500: 500 Internal Server Error the disk is gone ?[31m?");
	CHECK_STR(
	    words(&r, &follows, 203, "", "\x89PNG\r\n\x1a\n\0\0\0"),
	    "HTTP 203; a ranged GET takes only a 206 of the asked bytes or a 200 of the whole "
	    "object");
	CHECK_STR(
	    words(&r, &follows, 304, "", NULL),
	    "HTTP 304; a ranged GET takes only a 206 of the asked bytes or a 200 of the whole "
	    "object");
	CHECK_STR(words(&r, &head, 204, "", NULL), "HTTP 204; it takes only a 200");
	/* a redirect that was followed needs no S3 hint */
	CHECK_STR(words(&r, &follows, 308, "http://h/x", NULL), "HTTP 308 to http://h/x");
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	words(&r, &follows, 502, "", big);
	CHECK(strlen(r.error) == strlen("HTTP 502: ") + 120 + 3, "%zu", strlen(r.error));
	CHECK(strcmp(r.error + strlen(r.error) - 3, "...") == 0);
	/* an error document of another shape is a body like any other */
	CHECK_STR(words(&r, &follows, 400, "", "<Fault><Code>X</Code></Fault>"), "HTTP 400: X");
	CHECK_STR(r.code, "");
}

static void test_url_words(void)
{
	char out[256], longurl[1000];

	remote_url_words("https://u:p@h:9/a/b?sig=1#f", out, sizeof(out));
	CHECK_STR(out, "https://h:9/a/b?...");
	remote_url_words("http://h/a\x1b[2Jb", out, sizeof(out));
	CHECK_STR(out, "http://h/a?[2Jb");
	memset(longurl, 'x', sizeof(longurl) - 1);
	longurl[sizeof(longurl) - 1] = '\0';
	remote_url_words(longurl, out, sizeof(out));
	CHECK(strlen(out) == 203, "%zu", strlen(out));
}

/* A ranged GET of bytes 100-199 of a 1000-byte object with ETag "e", answered so. */
static int ranged(long status, const char *content_range, const char *etag, size_t got,
		  int64_t total, struct remote_resp *r)
{
	static char buf[100];
	struct remote_req req = {.method = "GET",
				 .off = 100,
				 .len = 100,
				 .buf = buf,
				 .expect_total = 1000,
				 .expect_etag = "\"e\"",
				 .quiet = true};

	memset(r, 0, sizeof(*r));
	r->status = status;
	snprintf(r->content_range, sizeof(r->content_range), "%s", content_range);
	snprintf(r->etag, sizeof(r->etag), "%s", etag);
	r->got = got;
	r->total = total;
	return remote_check_range(&req, r, "test");
}

static void test_check_range(void)
{
	struct remote_resp r;

	CHECK(ranged(206, "bytes 100-199/1000", "\"e\"", 100, 1000, &r) == 0);
	CHECK(ranged(206, "bytes 100-199/*", "", 100, -1, &r) == 0);
	/* another range, or none (a multipart answer), or part of it */
	CHECK(ranged(206, "bytes 0-99/1000", "\"e\"", 100, 1000, &r) == -EIO);
	CHECK_STR(r.error, "asked bytes 100-199, HTTP 206 with Content-Range bytes 0-99/1000");
	CHECK(ranged(206, "bytes 100-198/1000", "\"e\"", 99, 1000, &r) == -EIO);
	CHECK(ranged(206, "", "\"e\"", 100, -1, &r) == -EIO);
	CHECK_STR(r.error, "asked bytes 100-199, HTTP 206 with no Content-Range");
	CHECK(ranged(206, "bytes 100-199/1000", "\"e\"", 60, 1000, &r) == -EIO);
	CHECK_STR(r.error, "bytes 100-199: got 60 of 100 bytes");
	CHECK(ranged(206, "bytes 100-199/1000", "\"e\"", 0, 1000, &r) == -EIO);
	/* another object: another size or ETag */
	CHECK(ranged(206, "bytes 100-199/999", "\"e\"", 100, 999, &r) == -ESTALE);
	CHECK(ranged(206, "bytes 100-199/1000", "\"f\"", 100, 1000, &r) == -ESTALE);
}

static void test_retry_wait(void)
{
	CHECK(remote_retry_wait_ms(100, 0) == 100);
	CHECK(remote_retry_wait_ms(3000, 1) == 3000);
	CHECK(remote_retry_wait_ms(100, 2) == 2000);
	CHECK(remote_retry_wait_ms(100, 10) == 5000);
	/* seconds * 1000 past 32 bits: 4294968 s would wrap to 672 ms */
	CHECK(remote_retry_wait_ms(100, 4294968) == 5000, "%u", remote_retry_wait_ms(100, 4294968));
	CHECK(remote_retry_wait_ms(100, UINT_MAX) == 5000, "%u",
	      remote_retry_wait_ms(100, UINT_MAX));
}

/* The shared tier's clocks: quiet_time 2 s, idle_time 4 s. */
static void test_shared_cut(void)
{
	const uint64_t s = 1000000000ull, q = 2 * s, i = 4 * s, t = 1000 * s;

	CHECK(remote_shared_cut(t, t - s, t - s, false, q, i) == REMOTE_CUT_NONE);
	/* nothing from the service, on any request, for quiet_time: gone */
	CHECK(remote_shared_cut(t, t - q, t - q, false, q, i) == REMOTE_CUT_QUIET);
	/* this request silent for idle_time while others hear bytes: busy */
	CHECK(remote_shared_cut(t, t - i, t - s, false, q, i) == REMOTE_CUT_BUSY);
	/* a block PUT's body out: the service stores it, quiet_time stops */
	CHECK(remote_shared_cut(t, t - 3 * s, t - 3 * s, true, q, i) == REMOTE_CUT_NONE);
	CHECK(remote_shared_cut(t, t - i, t - i, true, q, i) == REMOTE_CUT_STORED);
	/* Another thread heard a byte after this one read the clock (@svc later
	 * than @now): the service just spoke. "now - svc" wrapped to 584 years
	 * and cut a sound GET as silent for quiet_time (CI: one block of a run
	 * another node wrote went to the store). */
	CHECK(remote_shared_cut(t, t - s, t + 1, false, q, i) == REMOTE_CUT_NONE, "%d",
	      (int)remote_shared_cut(t, t - s, t + 1, false, q, i));
	CHECK(remote_shared_cut(t, t - i, t + 1, false, q, i) == REMOTE_CUT_BUSY);
	CHECK(remote_shared_cut(t, t + 1, t + 1, false, q, i) == REMOTE_CUT_NONE);
	CHECK(remote_shared_cut(t, t + 1, t, true, q, i) == REMOTE_CUT_NONE);
	CHECK(mcfs_since_ns(t, t + 1) == 0 && mcfs_since_ns(t + 1, t) == 1);
}

static void test_s3_error_doc(void)
{
	static const char doc[] = S3_ERROR("AuthorizationHeaderMalformed", "the region is wrong",
					   "<Region>eu-west-1</Region><Endpoint>e</Endpoint>");
	struct remote_s3_error e;

	CHECK(remote_s3_parse_error(doc, strlen(doc), &e) == 0);
	CHECK_STR(e.code, "AuthorizationHeaderMalformed");
	CHECK_STR(e.message, "the region is wrong");
	CHECK_STR(e.region, "eu-west-1");
	CHECK_STR(e.endpoint, "e");
	/* cut short (a capped body): what came before the cut */
	CHECK(remote_s3_parse_error(doc, strlen(doc) - 30, &e) == 0);
	CHECK_STR(e.code, "AuthorizationHeaderMalformed");
	CHECK(remote_s3_parse_error("<ListBucketResult><Code>X</Code></ListBucketResult>", 51,
				    &e) == -EINVAL);
	CHECK_STR(e.code, "");
	CHECK(remote_s3_parse_error("<Error><Message>m</Message></Error>", 35, &e) == -EINVAL);
	CHECK(remote_s3_parse_error("not xml", 7, &e) == -EINVAL);
	CHECK(remote_s3_parse_error("", 0, &e) == -EINVAL);
}

int main(void)
{
	mcfs_log_setup(MCFS_LOG_ERR, false);
	test_table();
	test_want();
	test_s3_words();
	test_other_words();
	test_url_words();
	test_check_range();
	test_retry_wait();
	test_shared_cut();
	test_s3_error_doc();
	if (failures) {
		fprintf(stderr, "fetch_status_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("fetch_status_test: ok\n");
	return 0;
}
