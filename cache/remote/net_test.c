/*
 * net_test.c - unit tests of the network stores' pure logic: SigV4 URI and
 * query encoding, retry classification and backoff, ISO 8601 dates,
 * ListObjectsV2 parsing (pages, continuation, CommonPrefixes, refused keys,
 * error documents), credentials files and their precedence, URL redaction.
 * Exits 0 on pass, 1 on failure.
 */
#define _GNU_SOURCE
#include "fetch_int.h"
#include "mcfs_test.h"
#include "net_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_uri_encode(void)
{
	char out[64];

	CHECK(remote_uri_encode("dir one/a+b=c.txt", true, out, sizeof(out)) > 0);
	CHECK_STR(out, "dir%20one/a%2Bb%3Dc.txt");
	CHECK(remote_uri_encode("a/b~c_d-e.f", false, out, sizeof(out)) > 0);
	CHECK_STR(out, "a%2Fb~c_d-e.f");
	CHECK(remote_uri_encode("\xc3\xa9", true, out, sizeof(out)) == 6);
	CHECK_STR(out, "%C3%A9");
	CHECK(remote_uri_encode("", true, out, sizeof(out)) == 0);
	CHECK(remote_uri_encode("abcdef", true, out, 6) == -ENAMETOOLONG);
	CHECK(remote_uri_encode("      ", true, out, 10) == -ENAMETOOLONG);
}

static void test_query(void)
{
	const char *kv[] = {
	    "prefix", "models/dir one/",    "list-type", "2", "max-keys", "1000", "delimiter",
	    "/",      "continuation-token", "1/a+b=="};
	char out[256];

	CHECK(remote_query_build(kv, 5, out, sizeof(out)) > 0);
	/* sorted by key, values encoded, '/' encoded in values */
	CHECK_STR(out, "continuation-token=1%2Fa%2Bb%3D%3D&delimiter=%2F&list-type=2&max-keys=1000"
		       "&prefix=models%2Fdir%20one%2F");
	CHECK(remote_query_build(kv, 2, out, sizeof(out)) > 0);
	CHECK_STR(out, "list-type=2&prefix=models%2Fdir%20one%2F");
	CHECK(remote_query_build(kv, 5, out, 20) == -ENAMETOOLONG);
	{
		const char *empty[] = {"prefix", "", "list-type", "2"};

		CHECK(remote_query_build(empty, 2, out, sizeof(out)) > 0);
		CHECK_STR(out, "list-type=2&prefix=");
	}
}

static void test_retry(void)
{
	unsigned seed = 1, i, ms;

	CHECK(remote_retryable(CURLE_OK, 500));
	CHECK(remote_retryable(CURLE_OK, 503));
	CHECK(remote_retryable(CURLE_OK, 429));
	CHECK(!remote_retryable(CURLE_OK, 200));
	CHECK(!remote_retryable(CURLE_OK, 206));
	CHECK(!remote_retryable(CURLE_OK, 400));
	CHECK(!remote_retryable(CURLE_OK, 403));
	CHECK(!remote_retryable(CURLE_OK, 404));
	CHECK(!remote_retryable(CURLE_OK, 412));
	CHECK(remote_retryable(CURLE_OPERATION_TIMEDOUT, 0));
	CHECK(remote_retryable(CURLE_COULDNT_CONNECT, 0));
	CHECK(remote_retryable(CURLE_RECV_ERROR, 0));
	CHECK(remote_retryable(CURLE_SEND_ERROR, 0));
	CHECK(remote_retryable(CURLE_GOT_NOTHING, 0));
	CHECK(remote_retryable(CURLE_PARTIAL_FILE, 0));
	CHECK(!remote_retryable(CURLE_PEER_FAILED_VERIFICATION, 0));
	CHECK(!remote_retryable(CURLE_URL_MALFORMAT, 0));
	CHECK(!remote_retryable(CURLE_WRITE_ERROR, 0));
	/* exponential with equal jitter: within [d/2, d], capped */
	for (i = 0; i < 200; i++) {
		ms = remote_backoff_ms(0, &seed);
		CHECK(ms >= 50 && ms <= 100);
		ms = remote_backoff_ms(3, &seed);
		CHECK(ms >= 400 && ms <= 800);
		ms = remote_backoff_ms(30, &seed);
		CHECK(ms >= 2500 && ms <= 5000);
	}
}

static void test_dates_and_redact(void)
{
	int64_t ns = 0;
	char out[128];

	CHECK(remote_parse_iso8601("2023-11-22T10:00:00.000Z", &ns) == 0);
	CHECK(ns == 1700647200LL * 1000000000);
	CHECK(remote_parse_iso8601("2023-11-22T10:00:00.25Z", &ns) == 0);
	CHECK(ns == 1700647200LL * 1000000000 + 250000000);
	CHECK(remote_parse_iso8601("yesterday", &ns) == -EINVAL);
	mcfs_url_redact("https://user:secret@host:9000/b/k?x=1", out, sizeof(out));
	CHECK_STR(out, "https://host:9000/b/k?x=1");
	mcfs_url_redact("http://host/a@b", out, sizeof(out));
	CHECK_STR(out, "http://host/a@b");
}

static const char page1[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>models</Name><Prefix>m/</Prefix><KeyCount>4</KeyCount><MaxKeys>1000</MaxKeys>"
    "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
    "<NextContinuationToken>tok/1+=</NextContinuationToken>"
    "<Contents><Key>m/</Key><Size>0</Size><ETag>&quot;d41d&quot;</ETag></Contents>"
    "<Contents><Key>m/a &amp; b.bin</Key><LastModified>2023-11-22T10:00:00.000Z</LastModified>"
    "<ETag>&quot;abc-2&quot;</ETag><Size>8589934592</Size><StorageClass>STANDARD</StorageClass>"
    "</Contents>"
    "<Contents><Key>m/..</Key><Size>1</Size></Contents>"
    "<CommonPrefixes><Prefix>m/sub/</Prefix></CommonPrefixes>"
    "<CommonPrefixes><Prefix>m//</Prefix></CommonPrefixes>"
    "</ListBucketResult>";

static const char page2[] =
    "<ListBucketResult><IsTruncated>false</IsTruncated>"
    "<Contents><Key>m/z.txt</Key><Size>3</Size><ETag>\"e\"</ETag></Contents>"
    "</ListBucketResult>";

static const char error_doc[] =
    "<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>SignatureDoesNotMatch</Code>"
    "<Message>The request signature we calculated does not match</Message></Error>";

static void test_list_xml(void)
{
	struct remote_s3_page page;

	memset(&page, 0, sizeof(page));
	CHECK(remote_s3_parse_list(page1, sizeof(page1) - 1, "m/", &page) == 0);
	CHECK(page.truncated);
	CHECK_STR(page.token, "tok/1+=");
	CHECK(page.n == 2);
	CHECK(page.refused == 2);
	if (page.n == 2) {
		CHECK_STR(page.ents[0].name, "a & b.bin");
		CHECK(page.ents[0].attr.size == 8589934592ULL);
		CHECK_STR(page.ents[0].attr.version, "\"abc-2\"");
		CHECK(page.ents[0].attr.mtime_ns == 1700647200LL * 1000000000);
		CHECK(S_ISREG(page.ents[0].attr.mode));
		CHECK_STR(page.ents[1].name, "sub");
		CHECK(S_ISDIR(page.ents[1].attr.mode));
	}
	/* the continuation page appends */
	CHECK(remote_s3_parse_list(page2, sizeof(page2) - 1, "m/", &page) == 0);
	CHECK(!page.truncated);
	CHECK(page.token[0] == '\0');
	CHECK(page.n == 3);
	if (page.n == 3)
		CHECK_STR(page.ents[2].name, "z.txt");
	free(page.ents);

	memset(&page, 0, sizeof(page));
	CHECK(remote_s3_parse_list(error_doc, sizeof(error_doc) - 1, "", &page) == 0);
	CHECK_STR(page.code, "SignatureDoesNotMatch");
	CHECK(page.n == 0);
	CHECK(remote_s3_parse_list("<a><b></a>", 10, "", &page) == -EIO);
	free(page.ents);
}

/* Keys whose names can't be shown are refused, none cut short; a NUL can't come. */
static void test_list_refusals(void)
{
	size_t cap = 1 << 16, o = 0, i;
	char *xml = malloc(cap), prefix[2000];
	struct remote_s3_page page;

	if (!xml)
		return;
	memset(prefix, 'p', 1989);
	memcpy(prefix + 1989, "/", 2); /* 1990 bytes: a long key prefix */
	o += (size_t)snprintf(xml + o, cap - o,
			      "<ListBucketResult><Contents><Key>%sok</Key>"
			      "<Size>1</Size></Contents><Contents><Key>%s",
			      prefix, prefix);
	for (i = 0; i < 300; i++)
		xml[o++] = 'L'; /* a 300-byte name */
	o += (size_t)snprintf(xml + o, cap - o, "</Key><Size>2</Size></Contents><Contents><Key>%s",
			      prefix);
	for (i = 0; i < 1000; i++)
		xml[o++] = 'C'; /* a 2990-byte key: kept whole it can't be, cut it must not be */
	o += (size_t)snprintf(xml + o, cap - o,
			      "</Key><Size>3</Size></Contents><CommonPrefixes><Prefix>%sd/</Prefix>"
			      "</CommonPrefixes></ListBucketResult>",
			      prefix);
	memset(&page, 0, sizeof(page));
	CHECK(remote_s3_parse_list(xml, o, prefix, &page) == 0);
	CHECK(page.n == 2, "n %zu", page.n);
	CHECK(page.refused == 2, "refused %u", page.refused);
	for (i = 0; i < page.n; i++)
		CHECK(page.ents[i].name[0] != 'L' && page.ents[i].name[0] != 'C',
		      "'%.20s...' shown", page.ents[i].name);
	if (page.n == 2) {
		CHECK_STR(page.ents[0].name, "ok");
		CHECK_STR(page.ents[1].name, "d");
	}
	free(page.ents);

	/* XML 1.0 has no NUL: the page is malformed, not a name cut short */
	memset(&page, 0, sizeof(page));
	o = (size_t)snprintf(xml, cap,
			     "<ListBucketResult><Contents><Key>k/evil&#0;tail</Key>"
			     "</Contents></ListBucketResult>");
	CHECK(remote_s3_parse_list(xml, o, "k/", &page) == -EIO);
	CHECK(page.n == 0);
	free(page.ents);
	free(xml);
}

static void test_many_keys(void)
{
	struct remote_s3_page page;
	size_t cap = 1 << 20, o = 0;
	char *xml = malloc(cap);
	int i;

	o += (size_t)snprintf(xml + o, cap - o, "<ListBucketResult>");
	for (i = 0; i < 1000; i++)
		o += (size_t)snprintf(xml + o, cap - o,
				      "<Contents><Key>k/f%04d</Key><Size>%d</Size></Contents>", i,
				      i);
	o += (size_t)snprintf(xml + o, cap - o, "</ListBucketResult>");
	memset(&page, 0, sizeof(page));
	CHECK(remote_s3_parse_list(xml, o, "k/", &page) == 0);
	CHECK(page.n == 1000);
	if (page.n == 1000) {
		CHECK_STR(page.ents[999].name, "f0999");
		CHECK(page.ents[999].attr.size == 999);
	}
	free(page.ents);
	free(xml);
}

/* remote_creds_resolve() of the store's keys in @cfg. */
static int resolve(const struct cfg *cfg, struct remote_creds *c)
{
	struct remote_s3_conf conf = {.profile = cfg->profile,
				      .access_key = cfg->access_key,
				      .secret_key = cfg->secret_key,
				      .session_token = cfg->session_token};

	return remote_creds_resolve(&conf, c);
}

static void test_creds(const char *dir)
{
	char file[512];
	struct remote_creds c;
	struct cfg cfg;
	FILE *fp;

	snprintf(file, sizeof(file), "%s/net_test_credentials", dir);
	fp = fopen(file, "w");
	CHECK(fp != NULL);
	if (!fp)
		return;
	fprintf(fp, "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = s:e=c\n\n"
		    "[other]\naws_access_key_id=test:tester\naws_secret_access_key=testing\n"
		    "aws_session_token = tok\n[empty]\nregion = x\n");
	fclose(fp);
	CHECK(remote_aws_profile_load(file, "default", &c) == 0);
	CHECK_STR(c.access_key, "AKDEF");
	CHECK_STR(c.secret_key, "s:e=c");
	CHECK(remote_aws_profile_load(file, "other", &c) == 0);
	CHECK_STR(c.access_key, "test:tester");
	CHECK_STR(c.session_token, "tok");
	{
		/* the source names the file; a path too long for it is visibly cut */
		char want[600], longpath[3000];
		size_t o;

		snprintf(want, sizeof(want), "profile 'other' in %s", file);
		CHECK_STR(c.source, want);
		o = (size_t)snprintf(longpath, sizeof(longpath), "%s", dir);
		while (o < 2900)
			o += (size_t)snprintf(longpath + o, sizeof(longpath) - o, "/.");
		snprintf(longpath + o, sizeof(longpath) - o, "/net_test_credentials");
		CHECK(remote_aws_profile_load(longpath, "default", &c) == 0);
		CHECK(strncmp(c.source, "profile 'default' in ", 21) == 0);
		CHECK(strlen(c.source) == sizeof(c.source) - 1);
		CHECK(strcmp(c.source + sizeof(c.source) - 4, "...") == 0);
	}
	CHECK(remote_aws_profile_load(file, "empty", &c) == -ENOENT);
	CHECK(remote_aws_profile_load(file, "missing", &c) == -ENOENT);
	CHECK(remote_aws_profile_load("/nonexistent/creds", "default", &c) == -ENOENT);

	/* precedence: options > environment > profile */
	cfg_init(&cfg);
	setenv("AWS_SHARED_CREDENTIALS_FILE", file, 1);
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK(resolve(&cfg, &c) == 0);
	CHECK_STR(c.access_key, "AKDEF");
	setenv("AWS_PROFILE", "other", 1);
	CHECK(resolve(&cfg, &c) == 0);
	CHECK_STR(c.access_key, "test:tester");
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
	CHECK(resolve(&cfg, &c) == 0);
	CHECK_STR(c.access_key, "ENVKEY");
	snprintf(cfg.profile, sizeof(cfg.profile), "default");
	CHECK(resolve(&cfg, &c) == 0);
	CHECK_STR(c.access_key, "AKDEF");
	snprintf(cfg.access_key, sizeof(cfg.access_key), "OPTKEY");
	snprintf(cfg.secret_key, sizeof(cfg.secret_key), "OPTSECRET");
	CHECK(resolve(&cfg, &c) == 0);
	CHECK_STR(c.access_key, "OPTKEY");
	CHECK(strstr(c.source, "OPT") == NULL);
	cfg_init(&cfg);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	setenv("AWS_PROFILE", "missing", 1);
	CHECK(resolve(&cfg, &c) == -ENOENT);
	unlink(file);
}

int main(int argc, char **argv)
{
	mcfs_log_setup(MCFS_LOG_ERR, false);
	test_uri_encode();
	test_query();
	test_retry();
	test_dates_and_redact();
	test_list_xml();
	test_many_keys();
	test_list_refusals();
	test_creds(argc > 1 ? argv[1] : "/tmp");
	if (failures) {
		fprintf(stderr, "net_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("net_test: ok\n");
	return 0;
}
