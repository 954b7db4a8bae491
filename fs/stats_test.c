/*
 * stats_test.c - unit test of the renderings of the counter table (stats.c):
 *  - the user.mcfs.stats text keeps the keys that scripts and tests read, in
 *    their order, and no key twice;
 *  - parsing a text and rendering it again gives it back, every key in a
 *    place of its own, and each source (CACHE, DISK, FS) lands in its field;
 *  - a key missing or not a number is an error naming the key, never a 0;
 *    a key the parser does not know (a newer daemon) is fine;
 *  - Prometheus: each family once with HELP and TYPE, counters named
 *    _total, the disk tier's samples only with a disk tier;
 *  - the evict answer: per tier, back and forth; an older daemon's single
 *    number is refused.
 * Exits 0 (pass) or 1 (fail).
 */
#define _GNU_SOURCE
#include "stats.h"
#include "mcfs_test.h"
#include "cache_ram.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_MAX 16384

/* The keys of user.mcfs.stats before the table existed, in their order. */
static const char legacy_keys[] =
    "pid block_size slots slots_used hits misses waits evictions fetches fetch_errors "
    "fetched_bytes prefetches prefetch_unused inflight store_requests store_reads store_bytes "
    "store_errors store_retries fuse_reads fuse_read_bytes ram_prefault ram_faulted_bytes "
    "disk_state disk_slots disk_slots_used disk_bytes_limit disk_bytes_used disk_hits "
    "disk_misses disk_read_bytes disk_writes disk_written_bytes disk_write_drops "
    "disk_csum_errors disk_io_errors disk_evictions disk_queued";

/* Splits a stats text into its keys (in place); returns how many. */
static size_t keys_of(char *text, char **keys, size_t cap)
{
	char *save = NULL, *line;
	size_t n = 0;

	for (line = strtok_r(text, "\n", &save); line && n < cap;
	     line = strtok_r(NULL, "\n", &save)) {
		*strchrnul(line, ' ') = '\0';
		keys[n++] = line;
	}
	return n;
}

static void test_keys_kept_in_order(void)
{
	char text[TEXT_MAX], legacy[sizeof(legacy_keys)], *keys[256], *k, *save = NULL;
	struct fs_stats st;
	size_t n, i, j;
	int len;

	memset(&st, 0, sizeof(st));
	len = fs_stats_text(&st, text, sizeof(text));
	CHECK(len > 0 && len < TEXT_MAX, "length %d", len);
	n = keys_of(text, keys, MCFS_ARRAY_SIZE(keys));
	memcpy(legacy, legacy_keys, sizeof(legacy));
	for (i = 0, k = strtok_r(legacy, " ", &save); k; i++, k = strtok_r(NULL, " ", &save))
		CHECK(i < n && strcmp(keys[i], k) == 0, "key %zu is %s, was %s", i,
		      i < n ? keys[i] : "(none)", k);
	CHECK(i == 38, "%zu legacy keys", i);
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			CHECK(strcmp(keys[i], keys[j]) != 0, "key %s twice", keys[i]);
}

/* A text of every key with value 1000 + its line number, into out. */
static void numbered_text(char *out, size_t len)
{
	struct fs_stats st;
	char text[TEXT_MAX], *keys[256];
	size_t n, i, at = 0;

	memset(&st, 0, sizeof(st));
	(void)fs_stats_text(&st, text, sizeof(text));
	n = keys_of(text, keys, MCFS_ARRAY_SIZE(keys));
	out[0] = '\0';
	for (i = 0; i < n; i++)
		at += (size_t)snprintf(out + at, len - at, "%s %zu\n", keys[i], 1000 + i);
}

/* The value of @key in a numbered text. */
static uint64_t numbered(const char *text, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\n%s ", key);
	if (strncmp(text, pat + 1, strlen(pat + 1)) == 0)
		p = text + strlen(pat + 1);
	else
		p = strstr(text, pat) ? strstr(text, pat) + strlen(pat) : "0";
	return strtoull(p, NULL, 10);
}

static void test_round_trip(void)
{
	char text[TEXT_MAX], again[TEXT_MAX];
	struct fs_stats st;
	const char *key = "unset";

	numbered_text(text, sizeof(text));
	CHECK(fs_stats_parse(text, &st, &key) == 0 && key == NULL, "key %s", key ? key : "-");
	(void)fs_stats_text(&st, again, sizeof(again));
	CHECK(strcmp(text, again) == 0, "rendered back:\n%s\nparsed from:\n%s", again, text);
	/* one row of each source, where its field is */
	CHECK(st.pid == numbered(text, "pid"));
	CHECK(st.cache.hits == numbered(text, "hits"));
	CHECK(st.cache.store_bytes == numbered(text, "store_bytes"));
	CHECK(st.cache.disk.hits == numbered(text, "disk_hits"));
	CHECK(st.cache.disk.queued == numbered(text, "disk_queued"));
	CHECK(st.cache.reads == numbered(text, "fuse_reads"));
	CHECK(st.gpu_load_ns == numbered(text, "gpu_load_ns"));
	CHECK(st.cache.disk_off_reason == numbered(text, "disk_off_reason"));
}

/* Parses @text with the line of @key replaced by @line ("" drops it). */
static int parse_with(const char *key, const char *line, const char **bad)
{
	char text[TEXT_MAX], out[TEXT_MAX], *p, *save = NULL;
	struct fs_stats st;
	size_t at = 0, klen = strlen(key);

	numbered_text(text, sizeof(text));
	for (p = strtok_r(text, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
			at += (size_t)snprintf(out + at, sizeof(out) - at, "%s", line);
		else
			at += (size_t)snprintf(out + at, sizeof(out) - at, "%s\n", p);
	}
	return fs_stats_parse(out, &st, bad);
}

static void test_missing_key_is_an_error(void)
{
	static const char *const keys[] = {
	    "pid", "hits", "disk_hits", "fuse_reads", "disk_off_reason", "gpu_load_ns"};
	const char *bad;
	size_t i;
	int rc;

	for (i = 0; i < MCFS_ARRAY_SIZE(keys); i++) {
		bad = NULL;
		rc = parse_with(keys[i], "", &bad);
		CHECK(rc == -ENOENT && bad && strcmp(bad, keys[i]) == 0, "%s: rc %d, key %s",
		      keys[i], rc, bad ? bad : "-");
	}
	bad = NULL;
	rc = parse_with("hits", "hits many\n", &bad);
	CHECK(rc == -EINVAL && bad && strcmp(bad, "hits") == 0, "rc %d", rc);
	rc = parse_with("hits", "hits 12x\n", &bad);
	CHECK(rc == -EINVAL, "rc %d", rc);
	rc = parse_with("hits", "hits 99999999999999999999999\n", &bad);
	CHECK(rc == -EINVAL, "overflow: rc %d", rc);
	rc = parse_with("hits", "hits 5\nsome_future_counter 7\n", &bad);
	CHECK(rc == 0, "an unknown key: rc %d", rc);
}

/* The Prometheus lines of the last prom() (an array, so never NULL). */
static char expo[TEXT_MAX];

/* Renders the Prometheus lines of @st into expo, NUL ended. */
static void prom(const struct fs_stats *st)
{
	FILE *fp = fmemopen(expo, sizeof(expo), "w");

	if (!fp)
		abort();
	fs_stats_prom(fp, st);
	if (fclose(fp) != 0 || strlen(expo) >= sizeof(expo) - 1) /* cut short: raise TEXT_MAX */
		abort();
}

/* Each family once, TYPE after HELP, samples after both, counters end in _total. */
static void check_exposition(void)
{
	char fam[128], seen[64][128], type[16];
	size_t at, eol, nseen = 0, i, flen = 0;
	bool counter = false;
	const char *line;

	fam[0] = '\0';
	for (at = 0; expo[at]; at = eol + 1) {
		eol = at + strcspn(expo + at, "\n");
		line = expo + at;
		if (strncmp(line, "# HELP mcfs_", 12) == 0) {
			flen = strcspn(expo + at + 7, " ");
			snprintf(fam, sizeof(fam), "%.*s", (int)flen, expo + at + 7);
			for (i = 0; i < nseen; i++)
				CHECK(strcmp(seen[i], fam) != 0, "family %s twice", fam);
			if (nseen < MCFS_ARRAY_SIZE(seen))
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", fam);
			CHECK(at + 7 + flen + 1 < eol, "%s has no help", fam);
		} else if (strncmp(line, "# TYPE ", 7) == 0) {
			CHECK(strncmp(expo + at + 7, fam, flen) == 0, "TYPE of %.*s in %s",
			      (int)(eol - at), expo + at, fam);
			CHECK(sscanf(expo + at + 7 + flen, " %15s", type) == 1);
			counter = strcmp(type, "counter") == 0;
			CHECK(counter || strcmp(type, "gauge") == 0, "type %s", type);
			CHECK(counter == (flen > 6 && strncmp(fam + flen - 6, "_total", 6) == 0),
			      "%s is a %s", fam, type);
		} else {
			CHECK(flen && strncmp(line, fam, flen) == 0 &&
				  (expo[at + flen] == ' ' || expo[at + flen] == '{'),
			      "sample '%.*s' outside its family %s", (int)(eol - at), expo + at,
			      fam);
		}
		if (!expo[eol])
			break;
	}
}

static void test_prometheus(void)
{
	struct fs_stats st;

	memset(&st, 0, sizeof(st));
	st.cache.hits = 7;
	st.cache.disk.hits = 8;
	st.cache.ram_bytes_limit = 9;
	st.cache.disk.bytes_limit = 10;
	st.cache.disk.read_bytes = 11;
	st.cache.fetches = 12; /* exported by result, by fs/metrics.c: not here */
	prom(&st);
	check_exposition();
	CHECK(strstr(expo, "\nmcfs_cache_hits_total{tier=\"ram\"} 7\n"), "%s", expo);
	CHECK(strstr(expo, "\nmcfs_cache_capacity_bytes{tier=\"ram\"} 9\n"), "%s", expo);
	CHECK(!strstr(expo, "tier=\"disk\""), "a disk sample without a disk tier:\n%s", expo);
	CHECK(!strstr(expo, "mcfs_disk_"), "a disk family without a disk tier:\n%s", expo);
	CHECK(!strstr(expo, " 12\n"), "fetches exported as is:\n%s", expo);

	st.cache.disk_state = 1;
	prom(&st);
	check_exposition();
	CHECK(strstr(expo, "\nmcfs_cache_hits_total{tier=\"disk\"} 8\n"), "%s", expo);
	CHECK(strstr(expo, "\nmcfs_cache_capacity_bytes{tier=\"disk\"} 10\n"), "%s", expo);
	CHECK(strstr(expo, "\nmcfs_disk_read_bytes_total 11\n"), "%s", expo);
	CHECK(strstr(expo, "# HELP mcfs_cache_hits_total Block gets answered from a cache tier.\n"
			   "# TYPE mcfs_cache_hits_total counter\n"),
	      "%s", expo);
}

static void test_evict_answer(void)
{
	struct cache_evicted ev = {6 << 20, 6 << 20, 2}, back;
	struct cache_evicted max = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
	char buf[FS_EVICT_TEXT_MAX + 1];
	int n;

	n = fs_evict_text(&ev, buf, sizeof(buf));
	CHECK(n > 0 && (size_t)n < sizeof(buf));
	CHECK(fs_evict_parse(buf, &back) == 0 && back.ram_bytes == ev.ram_bytes &&
		  back.disk_bytes == ev.disk_bytes && back.held_open == 2,
	      "%s", buf);
	CHECK(fs_evict_parse("ram_bytes 1\ndisk_bytes 2\n", &back) == 0 && back.held_open == 0,
	      "a daemon from before held_open");
	CHECK(fs_evict_parse("ram_bytes 1\ndisk_bytes 2\nheld_open x\n", &back) == -EINVAL,
	      "held_open not a number");
	n = fs_evict_text(&max, buf, sizeof(buf));
	CHECK((size_t)n == FS_EVICT_TEXT_MAX, "%d", n);
	CHECK(fs_evict_parse("12582912", &back) == -EINVAL, "an older daemon's answer");
	CHECK(fs_evict_parse("ram_bytes 1\n", &back) == -EINVAL, "no disk_bytes");
}

int main(void)
{
	test_keys_kept_in_order();
	test_round_trip();
	test_missing_key_is_an_error();
	test_prometheus();
	test_evict_answer();
	if (failures) {
		fprintf(stderr, "stats_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
