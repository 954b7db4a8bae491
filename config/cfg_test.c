/*
 * cfg_test.c - unit test of config/: defaults, sizes with units, bounds,
 * error messages, bools, the INI file and the order file < -o.
 *
 * One program, many small checks, in the manner of liburing's test/: every
 * failed check prints where and why and the program goes on, so one run shows
 * all failures. Exits 0 (pass), 1 (fail) or 77 (skip: no scratch directory).
 *
 * argv[1] is a scratch directory (ctest passes the build dir) for the config
 * files; without it, the test uses /tmp.
 */
#define _GNU_SOURCE
#include "cfg.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB (1024ull)
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

static const char *scratch = "/tmp";

/* err must mention every one of the given strings (NULL-terminated list). */
static void check_msg(int line, const char *what, const char *err, ...)
{
	const char *want;
	va_list ap;

	va_start(ap, err);
	while ((want = va_arg(ap, const char *)) != NULL) {
		if (!strstr(err, want)) {
			fprintf(stderr, "%s:%d: FAIL: %s: message '%s' does not mention '%s'\n",
				__FILE__, line, what, err, want);
			failures++;
		}
	}
	va_end(ap);
}
#define CHECK_MSG(what, err, ...) check_msg(__LINE__, what, err, __VA_ARGS__, (const char *)NULL)

/* ---- defaults ----------------------------------------------------------- */

static void test_defaults(void)
{
	char err[CFG_ERR_MAX] = "";
	struct cfg c;

	cfg_init(&c);
	CHECK(c.block_size == 8 * MiB, "block_size %" PRIu64, c.block_size);
	CHECK(c.ram_cache == 2 * GiB, "ram_cache %" PRIu64, c.ram_cache);
	CHECK(c.connections == 16, "connections %u", c.connections);
	CHECK(c.attr_ttl == 3600, "attr_ttl %g", c.attr_ttl);
	CHECK(c.negative_ttl == 10, "negative_ttl %g", c.negative_ttl);
	CHECK(c.read_ahead_kb == 8192, "read_ahead_kb %u", c.read_ahead_kb);
	CHECK(c.keep_cache == true, "keep_cache");
	CHECK(c.splice == false, "splice");
	CHECK(c.odirect == true, "odirect");
	CHECK(c.allow_other == false, "allow_other");
	CHECK(c.max_threads == 16, "max_threads %u", c.max_threads);
	CHECK(c.max_request == 0, "max_request %" PRIu64, c.max_request);
	CHECK(strcmp(c.io_uring, "auto") == 0, "io_uring '%s'", c.io_uring);
	CHECK(c.log_level == MCFS_LOG_INFO, "log_level %d", c.log_level);
	CHECK(c.tls_verify == true, "tls_verify");
	CHECK(strcmp(c.region, "us-east-1") == 0, "region '%s'", c.region);
	CHECK(strcmp(c.addressing, "path") == 0, "addressing '%s'", c.addressing);
	CHECK(strcmp(c.symlinks, "contained") == 0, "symlinks '%s'", c.symlinks);
	CHECK(strcmp(c.open_check, "always") == 0, "open_check '%s'", c.open_check);
	CHECK(c.timeout == 30 && c.stall_timeout == 5, "timeout %g stall_timeout %g", c.timeout,
	      c.stall_timeout);
	CHECK(strcmp(c.cache_dir, "/var/cache/mcfs") == 0, "cache_dir '%s'", c.cache_dir);
	CHECK(c.metrics[0] == '\0', "metrics '%s'", c.metrics);
	CHECK(c.source[0] == '\0' && c.mountpoint[0] == '\0', "source/mountpoint not empty");
	CHECK(c.foreground == false, "foreground");
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "defaults do not validate: %s", err);
}

/* ---- sizes -------------------------------------------------------------- */

static void test_sizes(void)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
	    {"0", 0},		{"4096", 4096},	      {"1b", 1},
	    {"1k", KiB},	{"1K", KiB},	      {"2kb", 2 * KiB},
	    {"3KiB", 3 * KiB},	{"8M", 8 * MiB},      {"8m", 8 * MiB},
	    {"8MB", 8 * MiB},	{"8MiB", 8 * MiB},    {"8mib", 8 * MiB},
	    {"1g", GiB},	{"2G", 2 * GiB},      {"2GiB", 2 * GiB},
	    {"1T", 1024 * GiB}, {"1TiB", 1024 * GiB}, {"18446744073709551615", UINT64_MAX},
	};
	static const char *const bad[] = {
	    "",
	    "-1",
	    "+1",
	    "M",
	    "8X",
	    "8 M",
	    "1.5G",
	    "8MM",
	    "8Mi",
	    "0x10",
	    "abc",
	    "1e6",
	    "8M ",
	    "18446744073709551616",
	    "17179869184G",
	};
	uint64_t v;
	size_t i;
	int rc;

	for (i = 0; i < MCFS_ARRAY_SIZE(good); i++) {
		v = 12345;
		rc = cfg_parse_size(good[i].s, &v);
		CHECK(rc == 0 && v == good[i].v, "'%s' -> rc %d, %" PRIu64 " (want %" PRIu64 ")",
		      good[i].s, rc, v, good[i].v);
	}
	for (i = 0; i < MCFS_ARRAY_SIZE(bad); i++) {
		v = 12345;
		rc = cfg_parse_size(bad[i], &v);
		CHECK(rc == -EINVAL, "'%s' accepted (rc %d, %" PRIu64 ")", bad[i], rc, v);
		CHECK(v == 12345, "'%s' wrote the output on failure", bad[i]);
	}
	CHECK(cfg_parse_size(NULL, &v) == -EINVAL, "NULL accepted");
}

static void test_fmt_size(void)
{
	static const struct {
		uint64_t v;
		const char *s;
	} cases[] = {
	    {0, "0"},
	    {100, "100"},
	    {KiB, "1K"},
	    {1536 * KiB, "1536K"},
	    {8 * MiB, "8M"},
	    {3 * MiB, "3M"},
	    {2 * GiB, "2G"},
	    {1024 * GiB, "1T"},
	    {MiB + 1, "1048577"},
	};
	char buf[32];
	uint64_t back;
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(cases); i++) {
		cfg_fmt_size(cases[i].v, buf, sizeof(buf));
		CHECK(strcmp(buf, cases[i].s) == 0, "%" PRIu64 " -> '%s' (want '%s')", cases[i].v,
		      buf, cases[i].s);
		/* what is shown can be typed back */
		CHECK(cfg_parse_size(buf, &back) == 0 && back == cases[i].v, "'%s' reads back",
		      buf);
	}
}

/* ---- cfg_set: values, bounds, messages ----------------------------------- */

/*
 * Sets key=value on a default struct and validates it; returns the first
 * error (cfg_set's or cfg_validate's) with its message in err.
 */
static int set_validate(const char *key, const char *value, char *err, size_t len)
{
	struct cfg c;
	int rc;

	cfg_init(&c);
	err[0] = '\0';
	rc = cfg_set(&c, key, value, err, len);
	if (rc < 0)
		return rc;
	return cfg_validate(&c, err, len);
}

static void expect_ok(const char *key, const char *value)
{
	char err[CFG_ERR_MAX];
	int rc = set_validate(key, value, err, sizeof(err));

	CHECK(rc == 0, "%s=%s refused: %s", key, value, err);
}

/*
 * A refused value: the message names the key, the value (as given, or as
 * @shown where the check renders it, e.g. "16.0 MiB") and what is allowed.
 */
static void expect_bad_shown(const char *key, const char *value, const char *shown,
			     const char *allowed)
{
	char err[CFG_ERR_MAX];
	char what[128];
	int rc = set_validate(key, value, err, sizeof(err));

	snprintf(what, sizeof(what), "%s=%s", key, value);
	CHECK(rc == -EINVAL, "%s accepted (rc %d)", what, rc);
	if (rc == -EINVAL)
		CHECK_MSG(what, err, key, shown, allowed);
}

static void expect_bad(const char *key, const char *value, const char *allowed)
{
	expect_bad_shown(key, value, value, allowed);
}

static void test_values(void)
{
	/* block_size: a power of two, 1M to 64M */
	expect_ok("block_size", "1M");
	expect_ok("block_size", "2MiB");
	expect_ok("block_size", "64M");
	expect_ok("block_size", "1048576");
	expect_bad("block_size", "512K", "power of two");
	expect_bad("block_size", "128M", "power of two");
	expect_bad("block_size", "0", "power of two");
	expect_bad("block_size", "abc", "power of two");
	/* 3M is within bounds but no power of two: cfg_set or cfg_validate refuses it */
	{
		char err[CFG_ERR_MAX];
		int rc = set_validate("block_size", "3M", err, sizeof(err));

		CHECK(rc == -EINVAL, "block_size=3M accepted");
		if (rc == -EINVAL)
			CHECK_MSG("block_size=3M", err, "block_size", "power of two");
	}

	/* ram_cache: at least 4 blocks */
	expect_ok("ram_cache", "32M");
	/* messages echo what was typed, and derived sizes in the same units (issue 16) */
	{
		char err[CFG_ERR_MAX];

		CHECK(set_validate("block_size", "3M", err, sizeof(err)) == -EINVAL, "3M");
		CHECK_MSG("block_size=3M", err, "'3M'");
		CHECK(!strstr(err, "3145728"), "block_size=3M shown in bytes: %s", err);
		CHECK(set_validate("block_size", "3145728", err, sizeof(err)) == -EINVAL, "bytes");
		CHECK_MSG("block_size=3145728", err, "'3145728'");
		CHECK(set_validate("ram_cache", "4M", err, sizeof(err)) == -EINVAL, "4M");
		CHECK_MSG("ram_cache=4M", err, "'4M'", "block_size 8M", "32M or more");
		CHECK(!strstr(err, "33554432") && !strstr(err, "4.0 MiB"), "ram_cache=4M: %s", err);
		CHECK(set_validate("readahead_max", "1m", err, sizeof(err)) == -EINVAL, "1m");
		CHECK_MSG("readahead_max=1m", err, "'1m'", "8M");
	}
	expect_ok("ram_cache", "1G");
	expect_bad_shown("ram_cache", "16M", "16", "4 blocks");
	expect_bad("ram_cache", "lots", "4 blocks");

	expect_ok("connections", "1");
	expect_ok("connections", "256");
	expect_bad("connections", "0", "1 to 256");
	expect_bad("connections", "257", "1 to 256");
	expect_bad("connections", "1.5", "1 to 256");
	expect_bad("connections", "four", "1 to 256");
	expect_bad("connections", "-1", "1 to 256");
	expect_bad("connections", "", "1 to 256");

	expect_ok("max_threads", "1");
	expect_ok("max_threads", "1024");
	expect_bad("max_threads", "0", "1 to 1024");
	expect_bad("max_threads", "1025", "1 to 1024");

	expect_ok("attr_ttl", "0");
	expect_ok("attr_ttl", "0.5");
	expect_ok("attr_ttl", "86400");
	expect_bad("attr_ttl", "-1", "seconds");
	expect_bad("attr_ttl", "soon", "seconds");
	expect_bad("attr_ttl", "nan", "seconds");
	expect_bad("attr_ttl", "inf", "seconds");
	expect_ok("negative_ttl", "0");
	expect_bad("negative_ttl", "-0.1", "seconds");

	expect_ok("max_request", "0");
	expect_ok("max_request", "128K");
	expect_ok("max_request", "8M");
	expect_ok("max_request", "64M");
	expect_ok("max_request", "1028K");
	expect_bad("max_request", "65M", "128K to 64M");
	expect_bad("max_request", "-1", "128K to 64M");
	expect_bad("max_request", "big", "128K to 64M");
	/* below 128K, and not whole pages: refused by cfg_validate, with the value in bytes */
	expect_bad_shown("max_request", "64K", "65536", "128K to 64M");
	expect_bad_shown("max_request", "1000000", "1000000", "whole 4K pages");

	expect_ok("io_uring", "auto");
	expect_ok("io_uring", "on");
	expect_ok("io_uring", "off");
	expect_bad("io_uring", "yes", "auto, on or off");
	expect_bad("io_uring", "", "auto, on or off");
	expect_ok("passthrough", "auto");
	expect_ok("passthrough", "off");
	expect_bad("passthrough", "on", "auto or off");
	expect_ok("cold_direct_io", "auto");
	expect_ok("cold_direct_io", "off");
	expect_bad("cold_direct_io", "yes", "auto or off");
	expect_ok("cold_push", "true");
	expect_ok("cold_push", "false");
	expect_bad("cold_push", "auto", "true or false");

	expect_ok("read_ahead_kb", "0");
	expect_ok("read_ahead_kb", "1048576");
	expect_bad("read_ahead_kb", "1048577", "1048576");

	expect_ok("readahead_max", "0");
	expect_ok("readahead_max", "64M");
	/* less than one 8M block */
	expect_bad_shown("readahead_max", "1M", "1", "block_size");

	expect_ok("connect_timeout", "0.1");
	expect_bad("connect_timeout", "0", "0.1 to 3600");
	expect_bad("timeout", "3601", "0.1 to 3600");
	expect_ok("retries", "0");
	expect_bad("retries", "101", "0 to 100");

	expect_ok("log_level", "error");
	expect_ok("log_level", "warning");
	expect_ok("log_level", "info");
	expect_ok("log_level", "debug");
	expect_ok("log_level", "DEBUG");
	expect_bad("log_level", "verbose", "debug");
	expect_bad("log_level", "3", "debug");

	expect_ok("addressing", "path");
	expect_ok("addressing", "virtual");
	expect_bad("addressing", "host", "path or virtual");

	expect_ok("symlinks", "contained");
	expect_ok("symlinks", "any");
	expect_ok("symlinks", "none");
	expect_bad("symlinks", "inside", "contained, any or none");
	expect_ok("open_check", "always");
	expect_ok("open_check", "ttl");
	expect_bad("open_check", "never", "always or ttl");
	expect_ok("stall_timeout", "0");
	expect_ok("stall_timeout", "2.5");
	expect_bad("stall_timeout", "-1", "0 to 3600");

	expect_ok("disk_cache", "100G");
	expect_ok("disk_cache", "50%");
	expect_ok("disk_cache", "100%");
	expect_ok("disk_cache", "");
	expect_bad("disk_cache", "0%", "%");
	expect_bad("disk_cache", "101%", "%");
	expect_bad("disk_cache", "half", "%");

	expect_ok("metrics", "");
	expect_ok("metrics", "127.0.0.1:9464");
	expect_ok("metrics", "[::1]:9464");
	expect_bad("metrics", "9464", "host:port");
	expect_bad("metrics", ":9464", "host:port");
	expect_bad("metrics", "localhost:0", "host:port");
	expect_bad("metrics", "localhost:65536", "host:port");
	expect_bad("metrics", "localhost:http", "host:port");

	expect_ok("region", "eu-west-1");
	expect_ok("endpoint", "http://127.0.0.1:9000");

	/* the stored values */
	{
		char err[CFG_ERR_MAX];
		struct cfg c;

		cfg_init(&c);
		CHECK(cfg_set(&c, "block_size", "1M", err, sizeof(err)) == 0, "%s", err);
		CHECK(c.block_size == MiB, "block_size %" PRIu64, c.block_size);
		CHECK(cfg_set(&c, "ram_cache", "3g", err, sizeof(err)) == 0, "%s", err);
		CHECK(c.ram_cache == 3 * GiB, "ram_cache %" PRIu64, c.ram_cache);
		CHECK(cfg_set(&c, "connections", "7", err, sizeof(err)) == 0, "%s", err);
		CHECK(c.connections == 7, "connections %u", c.connections);
		CHECK(cfg_set(&c, "attr_ttl", "2.5", err, sizeof(err)) == 0, "%s", err);
		CHECK(c.attr_ttl == 2.5, "attr_ttl %g", c.attr_ttl);
		CHECK(cfg_set(&c, "log_level", "debug", err, sizeof(err)) == 0, "%s", err);
		CHECK(c.log_level == MCFS_LOG_DEBUG, "log_level %d", c.log_level);
		CHECK(cfg_set(&c, "region", "ap-south-1", err, sizeof(err)) == 0, "%s", err);
		CHECK(strcmp(c.region, "ap-south-1") == 0, "region '%s'", c.region);
		CHECK(cfg_set(&c, "cache_dir", "/var/cache/mcfs", err, sizeof(err)) == 0, "%s",
		      err);
		CHECK(strcmp(c.cache_dir, "/var/cache/mcfs") == 0, "cache_dir '%s'", c.cache_dir);
	}
}

/* A refused value leaves the struct as it was. */
static void test_unchanged_on_error(void)
{
	static const char *const kv[][2] = {
	    {"block_size", "12X"}, {"ram_cache", "-5"},	  {"connections", "0"},
	    {"attr_ttl", "x"},	   {"splice", "maybe"},	  {"log_level", "loud"},
	    {"addressing", "x"},   {"metrics", "nohost"}, {"disk_cache", "200%"},
	    {"symlinks", "some"},
	};
	char err[CFG_ERR_MAX];
	struct cfg a, b;
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(kv); i++) {
		cfg_init(&a);
		cfg_init(&b);
		CHECK(cfg_set(&a, kv[i][0], kv[i][1], err, sizeof(err)) == -EINVAL,
		      "%s=%s accepted", kv[i][0], kv[i][1]);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0, "%s=%s changed the struct", kv[i][0],
		      kv[i][1]);
	}
	/* a string too long for its field is refused, not truncated */
	{
		char longv[400];

		memset(longv, 'r', sizeof(longv) - 1);
		longv[sizeof(longv) - 1] = '\0';
		cfg_init(&a);
		CHECK(cfg_set(&a, "region", longv, err, sizeof(err)) == -EINVAL,
		      "400-char region accepted");
		CHECK(strcmp(a.region, "us-east-1") == 0, "region changed to '%.20s...'", a.region);
	}
}

static void test_unknown_key(void)
{
	char err[CFG_ERR_MAX] = "";
	struct cfg c;
	int rc;

	cfg_init(&c);
	rc = cfg_set(&c, "blocksize", "8M", err, sizeof(err));
	CHECK(rc == -EINVAL, "unknown key accepted (rc %d)", rc);
	CHECK_MSG("unknown key", err, "blocksize", "unknown", "did you mean 'block_size'");
	rc = cfg_set(&c, "ram_cahce", "1G", err, sizeof(err));
	CHECK(rc == -EINVAL, "typo accepted");
	CHECK_MSG("typo", err, "ram_cahce", "did you mean 'ram_cache'");
	rc = cfg_set(&c, "frobnicate", "1", err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "did you mean") == NULL, "a guess for '%s': %s",
	      "frobnicate", err);
	rc = cfg_set(&c, "Block_Size", "8M", err, sizeof(err));
	CHECK(rc == -EINVAL, "keys are case sensitive, 'Block_Size' accepted");
	rc = cfg_set(&c, "", "1", err, sizeof(err));
	CHECK(rc == -EINVAL, "empty key accepted");
	/* source and mountpoint are not keys */
	rc = cfg_set(&c, "source", "/tmp", err, sizeof(err));
	CHECK(rc == -EINVAL, "'source' accepted as a key");
}

/* Secrets are named in errors, never echoed. */
static void test_secret_hidden(void)
{
	char err[CFG_ERR_MAX] = "";
	char longv[3000];
	struct cfg c;
	int rc;

	memset(longv, 'S', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	memcpy(longv, "SeCrEt", 6);
	cfg_init(&c);
	rc = cfg_set(&c, "secret_key", longv, err, sizeof(err));
	CHECK(rc == -EINVAL, "3000-byte secret_key accepted");
	CHECK_MSG("secret_key", err, "secret_key");
	CHECK(!strstr(err, "SeCrEt"), "secret_key echoed: %s", err);
	rc = cfg_set(&c, "session_token", longv, err, sizeof(err));
	CHECK(rc == -EINVAL, "3000-byte session_token accepted");
	CHECK(!strstr(err, "SeCrEt"), "session_token echoed: %s", err);
	/* the shared cache's secrets, the same */
	rc = cfg_set(&c, "shared_secret_key", longv, err, sizeof(err));
	CHECK(rc == -EINVAL && !strstr(err, "SeCrEt"), "shared_secret_key: %s", err);
	CHECK_MSG("shared_secret_key", err, "shared_secret_key");
	rc = cfg_set(&c, "shared_session_token", longv, err, sizeof(err));
	CHECK(rc == -EINVAL && !strstr(err, "SeCrEt"), "shared_session_token: %s", err);
}

/* shared_cache=@v, with the key file it needs: accepted. Without one: refused, naming it. */
static void expect_shared_ok(const char *v)
{
	char err[CFG_ERR_MAX] = "";
	struct cfg c;

	cfg_init(&c);
	CHECK(cfg_set(&c, "shared_cache", v, err, sizeof(err)) == 0, "%s: %s", v, err);
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "shared_cache=%s without a key", v);
	CHECK_MSG("shared_cache without a key", err, "shared_key_file", "at least 32");
	CHECK(cfg_set(&c, "shared_key_file", "/etc/mcfs/cluster.key", err, sizeof(err)) == 0 &&
		  cfg_validate(&c, err, sizeof(err)) == 0,
	      "shared_cache=%s refused: %s", v, err);
}

/* The shared cache's keys: a place that is an S3 URL, its limits, its key pair, its key file. */
static void test_shared_cache(void)
{
	char err[CFG_ERR_MAX];
	struct cfg c;

	expect_ok("shared_cache", "");
	expect_ok("shared_key_file", "/etc/mcfs/cluster.key"); /* unused without shared_cache */
	expect_shared_ok("s3://bucket");
	expect_shared_ok("s3://bucket/some/prefix");
	expect_bad("shared_cache", "http://host/bucket", "s3://bucket[/prefix]");
	expect_bad("shared_cache", "s3://", "s3://bucket[/prefix]");
	expect_bad("shared_cache", "s3:///prefix", "s3://bucket[/prefix]");
	expect_bad("shared_cache", "/srv/cache", "s3://bucket[/prefix]");
	expect_ok("shared_addressing", "virtual");
	expect_bad("shared_addressing", "vhost", "path or virtual");
	expect_ok("shared_timeout", "0.5");
	expect_bad("shared_timeout", "0", "0.1 to 3600");
	expect_ok("shared_queue", "1");
	expect_bad("shared_queue", "0", "1 to 4096");
	expect_ok("shared_wait", "0");
	expect_bad("shared_wait", "-1", "0 to 3600");
	expect_ok("shared_run", "4M");
	expect_bad("shared_run", "512K", "1M to 64G");

	cfg_init(&c);
	CHECK(c.shared_timeout == 2 && c.shared_queue == 8 && c.shared_wait == 10 &&
		  c.shared_run == 256 * MiB && strcmp(c.shared_region, "us-east-1") == 0 &&
		  strcmp(c.shared_addressing, "path") == 0 && c.shared_cache[0] == '\0',
	      "shared_* defaults");
	snprintf(c.shared_secret_key, sizeof(c.shared_secret_key), "s3cr3t");
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "shared_secret_key alone accepted");
	CHECK_MSG("shared_secret_key alone", err, "shared_access_key", "shared_secret_key");
	CHECK(!strstr(err, "s3cr3t"), "secret in message");
	snprintf(c.shared_access_key, sizeof(c.shared_access_key), "AKIA");
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "shared key pair refused: %s", err);
	/* the store's keys and the shared cache's are separate pairs */
	snprintf(c.access_key, sizeof(c.access_key), "AKIA");
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "store access_key alone accepted");
}

static void test_bools(void)
{
	static const char *const yes[] = {"1", "true", "yes", "on", "TRUE", "Yes", "ON"};
	static const char *const no[] = {"0", "false", "no", "off", "FALSE", "No", "Off"};
	static const char *const bad[] = {"", "2", "maybe", "y", "n", "enable", "truee"};
	char err[CFG_ERR_MAX];
	struct cfg c;
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(yes); i++) {
		cfg_init(&c);
		c.splice = false;
		CHECK(cfg_set(&c, "splice", yes[i], err, sizeof(err)) == 0 && c.splice,
		      "splice=%s is not true", yes[i]);
	}
	for (i = 0; i < MCFS_ARRAY_SIZE(no); i++) {
		cfg_init(&c);
		c.keep_cache = true;
		CHECK(cfg_set(&c, "keep_cache", no[i], err, sizeof(err)) == 0 && !c.keep_cache,
		      "keep_cache=%s is not false", no[i]);
	}
	for (i = 0; i < MCFS_ARRAY_SIZE(bad); i++)
		expect_bad("odirect", bad[i], "true or false");
	/* a bare bool key means true */
	cfg_init(&c);
	CHECK(cfg_set(&c, "odirect", NULL, err, sizeof(err)) == 0 && c.odirect,
	      "bare odirect is not true");
}

/* ---- cfg_set_opts ------------------------------------------------------- */

static void test_opts(void)
{
	char err[CFG_ERR_MAX] = "";
	struct cfg c, d;
	int rc;

	cfg_init(&c);
	rc = cfg_set_opts(&c, "block_size=1M,ram_cache=64M,splice,keep_cache=false,attr_ttl=0", err,
			  sizeof(err));
	CHECK(rc == 0, "opts refused: %s", err);
	CHECK(c.block_size == MiB && c.ram_cache == 64 * MiB, "sizes %" PRIu64 " %" PRIu64,
	      c.block_size, c.ram_cache);
	CHECK(c.splice && !c.keep_cache && c.attr_ttl == 0, "bools/ttl not applied");
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "%s", err);

	/* later wins */
	cfg_init(&c);
	rc = cfg_set_opts(&c, "connections=3,connections=5", err, sizeof(err));
	CHECK(rc == 0 && c.connections == 5, "later value did not win: %u", c.connections);

	/* stops at the first error, naming it; later keys are not applied */
	cfg_init(&c);
	rc = cfg_set_opts(&c, "connections=4,bogus=1,max_threads=3", err, sizeof(err));
	CHECK(rc == -EINVAL, "bogus key accepted");
	CHECK_MSG("opts with bogus", err, "bogus");
	CHECK(c.max_threads == 16, "a key after the error was applied");
	cfg_init(&c);
	rc = cfg_set_opts(&c, "max_threads=0", err, sizeof(err));
	CHECK(rc == -EINVAL, "max_threads=0 accepted");
	CHECK_MSG("max_threads=0", err, "max_threads", "0", "1 to 1024");

	/* a bare non-bool key is an error that names it */
	cfg_init(&c);
	rc = cfg_set_opts(&c, "block_size", err, sizeof(err));
	CHECK(rc == -EINVAL, "bare block_size accepted");
	CHECK_MSG("bare block_size", err, "block_size");

	/* standard mount options are accepted and change nothing */
	cfg_init(&c);
	cfg_init(&d);
	rc = cfg_set_opts(&c,
			  "rw,ro,dev,nodev,suid,nosuid,exec,noexec,atime,noatime,relatime,"
			  "nodiratime,defaults,auto,noauto,user,nouser,users,_netdev,nofail,"
			  "async,sync,x-systemd.automount",
			  err, sizeof(err));
	CHECK(rc == 0, "mount options refused: %s", err);
	CHECK(memcmp(&c, &d, sizeof(c)) == 0, "mount options changed the struct");

	/* mixed: fstab-like line */
	cfg_init(&c);
	rc =
	    cfg_set_opts(&c, "ro,nodev,block_size=2M,nosuid,_netdev,allow_other", err, sizeof(err));
	CHECK(rc == 0 && c.block_size == 2 * MiB && c.allow_other, "fstab options: rc %d %s", rc,
	      err);

	/* an empty cache_dir (RAM only) overrides the default, with or without '=' */
	cfg_init(&c);
	rc = cfg_set_opts(&c, "cache_dir=,block_size=1M", err, sizeof(err));
	CHECK(rc == 0 && c.cache_dir[0] == '\0' && c.block_size == MiB,
	      "cache_dir= not applied: rc %d '%s' %s", rc, c.cache_dir, err);
	cfg_init(&c);
	rc = cfg_set_opts(&c, "cache_dir", err, sizeof(err));
	CHECK(rc == 0 && c.cache_dir[0] == '\0', "bare cache_dir: rc %d '%s' %s", rc, c.cache_dir,
	      err);

	/* empty option string and empty items */
	cfg_init(&c);
	CHECK(cfg_set_opts(&c, "", err, sizeof(err)) == 0, "empty opts refused: %s", err);
	CHECK(cfg_set_opts(&c, "splice,,odirect", err, sizeof(err)) == 0 && c.splice && c.odirect,
	      "empty item refused: %s", err);
}

/* ---- cfg_validate relations --------------------------------------------- */

static void test_validate(void)
{
	char err[CFG_ERR_MAX] = "";
	struct cfg c;

	cfg_init(&c);
	c.block_size = 16 * MiB;
	c.ram_cache = 48 * MiB;
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "3 blocks of RAM accepted");
	CHECK_MSG("ram_cache < 4 blocks", err, "ram_cache", "4 blocks");
	c.ram_cache = 64 * MiB;
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "4 blocks refused: %s", err);

	cfg_init(&c);
	c.block_size = 1 * MiB;
	c.ram_cache = 4 * MiB;
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "1M x 4 refused: %s", err);

	cfg_init(&c);
	c.readahead_max = 4 * MiB;
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "readahead_max < block accepted");
	CHECK_MSG("readahead_max", err, "readahead_max");

	cfg_init(&c);
	snprintf(c.access_key, sizeof(c.access_key), "AKIA");
	CHECK(cfg_validate(&c, err, sizeof(err)) == -EINVAL, "access_key alone accepted");
	CHECK_MSG("access_key alone", err, "access_key", "secret_key");
	snprintf(c.secret_key, sizeof(c.secret_key), "s3cr3t");
	CHECK(cfg_validate(&c, err, sizeof(err)) == 0, "key pair refused: %s", err);
	CHECK(!strstr(err, "s3cr3t"), "secret in message");
}

/* ---- config files ------------------------------------------------------- */

static char file_path[4096];

static const char *write_file(const char *name, const char *text)
{
	FILE *fp;

	snprintf(file_path, sizeof(file_path), "%s/cfg_test-%d-%s.conf", scratch, (int)getpid(),
		 name);
	fp = fopen(file_path, "w");
	if (!fp) {
		fprintf(stderr, "cannot write %s: %s\n", file_path, strerror(errno));
		exit(T_EXIT_FAIL);
	}
	fputs(text, fp);
	fclose(fp);
	return file_path;
}

static void test_file_good(void)
{
	char err[CFG_ERR_MAX] = "";
	const char *p;
	struct cfg c;
	int rc;

	/* keys at top level, comments, blank lines, spaces around '=' */
	p = write_file("top", "# mcfs config\n"
			      "; another comment\n"
			      "\n"
			      "block_size = 2M\n"
			      "ram_cache=256M\n"
			      "connections = 4\n"
			      "splice = yes\n"
			      "log_level = debug\n"
			      "region = eu-central-1\n");
	cfg_init(&c);
	rc = cfg_load_file(&c, p, err, sizeof(err));
	CHECK(rc == 0, "top-level file refused: %s", err);
	CHECK(c.block_size == 2 * MiB, "block_size %" PRIu64, c.block_size);
	CHECK(c.ram_cache == 256 * MiB, "ram_cache %" PRIu64, c.ram_cache);
	CHECK(c.connections == 4, "connections %u", c.connections);
	CHECK(c.splice, "splice");
	CHECK(c.log_level == MCFS_LOG_DEBUG, "log_level %d", c.log_level);
	CHECK(strcmp(c.region, "eu-central-1") == 0, "region '%s'", c.region);
	CHECK(c.max_threads == 16, "a key not in the file changed: max_threads %u", c.max_threads);
	unlink(p);

	/* keys in [mcfs], and top-level keys before it */
	p = write_file("section", "attr_ttl = 5\n"
				  "[mcfs]\n"
				  "block_size = 4M\n"
				  "keep_cache = off\n"
				  "read_ahead_kb = 0\n");
	cfg_init(&c);
	rc = cfg_load_file(&c, p, err, sizeof(err));
	CHECK(rc == 0, "[mcfs] file refused: %s", err);
	CHECK(c.attr_ttl == 5 && c.block_size == 4 * MiB && !c.keep_cache && c.read_ahead_kb == 0,
	      "[mcfs] keys not applied");
	unlink(p);

	/* "cache_dir =" with no value: RAM only */
	p = write_file("nocache", "[mcfs]\ncache_dir =\nblock_size = 2M\n");
	cfg_init(&c);
	rc = cfg_load_file(&c, p, err, sizeof(err));
	CHECK(rc == 0, "empty cache_dir refused: %s", err);
	CHECK(c.cache_dir[0] == '\0' && c.block_size == 2 * MiB, "cache_dir '%s'", c.cache_dir);
	unlink(p);

	/* an empty file is fine */
	p = write_file("empty", "");
	cfg_init(&c);
	CHECK(cfg_load_file(&c, p, err, sizeof(err)) == 0, "empty file refused: %s", err);
	unlink(p);

	/* -o overrides the file: file first, then opts */
	p = write_file("override", "[mcfs]\nconnections = 4\nmax_threads = 8\nblock_size = 2M\n");
	cfg_init(&c);
	rc = cfg_load_file(&c, p, err, sizeof(err));
	CHECK(rc == 0, "%s", err);
	rc = cfg_set_opts(&c, "connections=9,block_size=1M", err, sizeof(err));
	CHECK(rc == 0, "%s", err);
	CHECK(c.connections == 9 && c.block_size == MiB, "-o did not override the file");
	CHECK(c.max_threads == 8, "file-only key lost: max_threads %u", c.max_threads);
	unlink(p);
}

/* Loads text as a file; expects -EINVAL with a message naming path:line and more. */
static void expect_file_bad(const char *name, const char *text, int line, const char *w1,
			    const char *w2)
{
	char err[CFG_ERR_MAX] = "";
	char where[4200];
	struct cfg c, d;
	const char *p;
	int rc;

	p = write_file(name, text);
	snprintf(where, sizeof(where), "%s:%d:", p, line);
	cfg_init(&c);
	cfg_init(&d);
	rc = cfg_load_file(&c, p, err, sizeof(err));
	CHECK(rc == -EINVAL, "file '%s' accepted (rc %d)", name, rc);
	if (rc == -EINVAL)
		check_msg(__LINE__, name, err, where, w1, w2, (const char *)NULL);
	unlink(p);
}

static void test_file_bad(void)
{
	char err[CFG_ERR_MAX] = "";
	char missing[4200];
	struct cfg c;
	int rc;

	expect_file_bad("unknown-section", "block_size = 1M\n\n[other]\nfoo = 1\n", 4, "[other]",
			"[mcfs]");
	expect_file_bad("unknown-key", "[mcfs]\nblock_size = 1M\nbloc_size = 2M\n", 3, "bloc_size",
			"unknown");
	expect_file_bad("bad-value", "# c\n[mcfs]\nconnections = 4\nmax_threads = lots\n", 4,
			"max_threads", "lots");
	expect_file_bad("syntax", "[mcfs]\nblock_size = 1M\nthis line has no equals sign\n", 3,
			"syntax", "key = value");
	expect_file_bad("bad-bool", "splice = perhaps\n", 1, "splice", "perhaps");

	snprintf(missing, sizeof(missing), "%s/cfg_test-%d-does-not-exist.conf", scratch,
		 (int)getpid());
	cfg_init(&c);
	rc = cfg_load_file(&c, missing, err, sizeof(err));
	CHECK(rc == -ENOENT, "missing file: rc %d", rc);
	CHECK_MSG("missing file", err, missing);

	/* a NUL in a value would end it there: refused, naming line and key (issue 16) */
	{
		static const char nul[] = "[mcfs]\nconnections = 4\nblock_size = 1M\0junk\n";
		const char *p = write_file("nul", "");
		FILE *fp = fopen(p, "w");
		char where[4200];

		fwrite(nul, 1, sizeof(nul) - 1, fp);
		fclose(fp);
		cfg_init(&c);
		rc = cfg_load_file(&c, p, err, sizeof(err));
		CHECK(rc == -EINVAL, "NUL in a value accepted (rc %d)", rc);
		snprintf(where, sizeof(where), "%s:3:", p);
		CHECK_MSG("NUL", err, where, "block_size", "NUL");
		CHECK(c.block_size == 8 * MiB, "a value before the NUL was applied");
		unlink(p);
	}
	/* binary garbage: the message quotes it escaped, never raw (issue 16) */
	{
		static const char junk[] = "block_size = 1M\n\x01\x02\xff\x1b[2J = \x1b[31mred\n";
		const char *p = write_file("junk", junk);
		size_t i;

		cfg_init(&c);
		rc = cfg_load_file(&c, p, err, sizeof(err));
		CHECK(rc == -EINVAL, "garbage key accepted (rc %d)", rc);
		CHECK_MSG("garbage", err, "unknown option", "\\x01\\x02\\xff\\x1b[2J");
		for (i = 0; err[i]; i++)
			CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] < 0x7f,
			      "byte 0x%02x at %zu of the message", (unsigned char)err[i], i);
		unlink(p);
		p = write_file("junk-section", "[\x1b[2Jpwned\x07]\nx = 1\n");
		cfg_init(&c);
		rc = cfg_load_file(&c, p, err, sizeof(err));
		CHECK(rc == -EINVAL && strchr(err, '\x1b') == NULL && strchr(err, '\x07') == NULL,
		      "section quoted raw: %s", err);
		CHECK_MSG("junk section", err, "[\\x1b[2Jpwned\\x07]");
		unlink(p);
		cfg_init(&c);
		rc = cfg_set(&c, "splice", "y\x1b[1mes", err, sizeof(err));
		CHECK(rc == -EINVAL && strchr(err, '\x1b') == NULL, "value quoted raw: %s", err);
	}

	/* over CFG_FILE_MAX: refused whole, naming the file, its size and the limit
	 * (issue 22); exactly CFG_FILE_MAX is read (it was 2 MiB - 1 before) */
	{
		static const char line[] = "# padding padding padding padding padding padding\n";
		const char *p = write_file("big", "");
		char where[4200];
		size_t n;
		FILE *fp = fopen(p, "w");

		for (n = 0; n + sizeof(line) - 1 <= CFG_FILE_MAX - 16; n += sizeof(line) - 1)
			fputs(line, fp);
		fprintf(fp, "%-*s\n", (int)(CFG_FILE_MAX - n - 1), "connections = 4");
		fclose(fp);
		cfg_init(&c);
		rc = cfg_load_file(&c, p, err, sizeof(err));
		CHECK(rc == 0 && c.connections == 4, "a file of exactly 1 MiB: rc %d %s", rc, err);
		fp = fopen(p, "a");
		fputs("x", fp);
		fclose(fp);
		cfg_init(&c);
		rc = cfg_load_file(&c, p, err, sizeof(err));
		CHECK(rc == -EINVAL, "a file of 1 MiB + 1 byte: rc %d", rc);
		snprintf(where, sizeof(where), "config file %s", p);
		CHECK_MSG("over 1 MiB", err, where, "(1048577 bytes)",
			  "limit of 1 MiB (1048576 bytes)");
		CHECK(c.connections == 16, "a value of a file too large was applied");
		unlink(p);
	}

	/* a directory is not a config file (fopen succeeds, reads fail with EISDIR) */
	cfg_init(&c);
	rc = cfg_load_file(&c, scratch, err, sizeof(err));
	CHECK(rc < 0, "a directory loaded as a config file");
}

/* ---- help-config -------------------------------------------------------- */

static void test_print_keys(void)
{
	static const char *const names[] = {
	    "block_size", "ram_cache",	 "readahead_max", "prefetch_mem",  "connections",
	    "odirect",	  "attr_ttl",	 "negative_ttl",  "read_ahead_kb", "splice",
	    "keep_cache", "max_threads", "allow_other",	  "log_level",	   "cache_dir",
	    "metrics",	  "endpoint",	 "region",	  "retries",	   "timeout",
	};
	char *buf = NULL;
	size_t len = 0, i;
	FILE *fp = open_memstream(&buf, &len);

	if (!fp) {
		CHECK(fp != NULL, "open_memstream");
		return;
	}
	cfg_print_keys(fp);
	fclose(fp);
	for (i = 0; i < MCFS_ARRAY_SIZE(names); i++)
		CHECK(strstr(buf, names[i]) != NULL, "help does not list %s", names[i]);
	CHECK(strstr(buf, "power of two") != NULL, "help lacks block_size's rule");
	/* each key's default, as it would be typed (issue 16) */
	{
		static const char *const defaults[][2] = {
		    {"block_size", "8M"},      {"ram_cache", "2G"},
		    {"readahead_max", "512M"}, {"connections", "16"},
		    {"attr_ttl", "3600"},      {"odirect", "true"},
		    {"splice", "false"},       {"log_level", "info"},
		    {"region", "us-east-1"},   {"cache_dir", "/var/cache/mcfs"},
		    {"disk_cache", "50%"},     {"endpoint", "(empty)"},
		};
		char *line;
		char want[64];

		for (i = 0; i < MCFS_ARRAY_SIZE(defaults); i++) {
			snprintf(want, sizeof(want), "  %s ", defaults[i][0]);
			line = strstr(buf, want);
			CHECK(line != NULL, "no line for %s", defaults[i][0]);
			if (!line)
				continue;
			line += strlen(want);
			line += strspn(line, " ");
			CHECK(strncmp(line, defaults[i][1], strlen(defaults[i][1])) == 0 &&
				  line[strlen(defaults[i][1])] == ' ',
			      "%s: default shown as '%.20s', want '%s'", defaults[i][0], line,
			      defaults[i][1]);
		}
	}
	free(buf);
}

int main(int argc, char **argv)
{
	struct stat st;

	if (argc > 1)
		scratch = argv[1];
	if (stat(scratch, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "skip: scratch directory %s is not usable\n", scratch);
		return T_EXIT_SKIP;
	}
	test_defaults();
	test_sizes();
	test_fmt_size();
	test_values();
	test_unchanged_on_error();
	test_unknown_key();
	test_secret_hidden();
	test_shared_cache();
	test_bools();
	test_opts();
	test_validate();
	test_file_good();
	test_file_bad();
	test_print_keys();
	if (failures) {
		fprintf(stderr, "cfg_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
