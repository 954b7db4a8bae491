/*
 * tiers_test.c - unit test of the name of a store's directory under
 * cache_dir (cache_store_dir_name): one store, one name, whatever its
 * spelling ("file://", trailing '/'); another store, another name, also for
 * one bucket name on two S3 services; a readable, bounded slug; and a name
 * that does not change between versions, or a restart would find the cache
 * cold. Exits 0 (pass) or 1 (fail).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "mcfs_test.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 128

/* The name for @source (and, for s3, @endpoint and @region), or "" on error. */
static const char *name_of(const char *kind, const char *source, const char *endpoint,
			   const char *region, char *out)
{
	struct cfg c;

	cfg_init(&c);
	cfg_set_source(&c, source);
	snprintf(c.endpoint, sizeof(c.endpoint), "%s", endpoint);
	snprintf(c.region, sizeof(c.region), "%s", region);
	if (cache_store_dir_name(&c, kind, out, NAME_MAX_LEN) < 0)
		out[0] = '\0';
	return out;
}

static void test_one_store_one_name(void)
{
	static const char *const spellings[] = {"/srv/models/", "file:///srv/models",
						"file:///srv/models//", "/srv/models///"};
	char a[NAME_MAX_LEN], b[NAME_MAX_LEN];
	size_t i;

	name_of("posix", "/srv/models", "", "us-east-1", a);
	CHECK(strncmp(a, "posix-srv_models-", 17) == 0 && strlen(a) == 17 + 16, "name '%s'", a);
	CHECK(strspn(a + 17, "0123456789abcdef") == 16, "hash part of '%s'", a);
	for (i = 0; i < MCFS_ARRAY_SIZE(spellings); i++) {
		name_of("posix", spellings[i], "", "us-east-1", b);
		CHECK(strcmp(a, b) == 0, "'%s' names %s, not %s", spellings[i], b, a);
	}
	/* credentials in a URL are no part of the name (nor its identity) */
	name_of("http", "http://127.0.0.1:8080/models", "", "us-east-1", a);
	name_of("http", "http://user:s3cr3t@127.0.0.1:8080/models", "", "us-east-1", b);
	CHECK(strcmp(a, b) == 0 && !strstr(b, "s3cr3t"), "'%s' vs '%s'", a, b);
	name_of("posix", "/srv/models", "", "us-east-1", a);
	/* endpoint and region mean nothing to a directory */
	name_of("posix", "/srv/models", "http://127.0.0.1:9000", "eu-west-1", b);
	CHECK(strcmp(a, b) == 0, "posix name depends on endpoint/region: %s %s", a, b);
}

static void test_other_store_other_name(void)
{
	char a[NAME_MAX_LEN], b[NAME_MAX_LEN];

	name_of("posix", "/srv/a", "", "us-east-1", a);
	name_of("posix", "/srv/b", "", "us-east-1", b);
	CHECK(strcmp(a, b) != 0 && a[0] && b[0], "%s %s", a, b);
	/* the slug is the same, the hash is not */
	name_of("posix", "/srv/a b", "", "us-east-1", a);
	name_of("posix", "/srv/a_b", "", "us-east-1", b);
	CHECK(strncmp(a, b, strlen(a) - 16) == 0 && strcmp(a, b) != 0, "%s %s", a, b);

	/* one bucket name on two services, or in two regions */
	name_of("s3", "s3://models/llama", "http://10.0.0.1:9000", "us-east-1", a);
	name_of("s3", "s3://models/llama", "http://10.0.0.2:9000", "us-east-1", b);
	CHECK(strcmp(a, b) != 0, "two endpoints, one name %s", a);
	CHECK(strncmp(a, "s3-models_llama-", 16) == 0, "name '%s'", a);
	name_of("s3", "s3://models/llama", "http://10.0.0.2:9000/", "us-east-1", a);
	CHECK(strcmp(a, b) == 0, "endpoint's trailing '/' changed the name: %s %s", a, b);
	name_of("s3", "s3://models/llama", "", "us-east-1", a);
	name_of("s3", "s3://models/llama", "", "eu-west-1", b);
	CHECK(strcmp(a, b) != 0, "two regions, one name %s", a);
}

static void test_slug(void)
{
	char long_src[300], a[NAME_MAX_LEN];
	const char *dash;

	name_of("http", "https://host.example:8443/base/dir/", "", "us-east-1", a);
	CHECK(strncmp(a, "http-host.example_8443_base_dir-", 32) == 0, "name '%s'", a);
	name_of("posix", "/", "", "us-east-1", a);
	CHECK(strncmp(a, "posix-root-", 11) == 0, "name of / '%s'", a);
	name_of("posix", "/srv/m,o=d;e\\l s", "", "us-east-1", a);
	CHECK(strncmp(a, "posix-srv_m_o_d_e_l_s-", 22) == 0, "name '%s'", a);
	/* a long source: its last 48 characters */
	memset(long_src, 'x', sizeof(long_src) - 1);
	long_src[0] = '/';
	long_src[sizeof(long_src) - 1] = '\0';
	memcpy(long_src + sizeof(long_src) - 8, "/tail-7", 7);
	name_of("posix", long_src, "", "us-east-1", a);
	dash = strrchr(a, '-');
	CHECK(dash && dash - a == (long)strlen("posix-") + 48, "long slug: '%s'", a);
	CHECK(dash && strncmp(dash - 7, "_tail-7", 7) == 0, "long slug lost its end: '%s'", a);
}

static void test_stable_and_bounded(void)
{
	char a[NAME_MAX_LEN], small[20];
	struct cfg c;

	/* XXH3-64 of "/srv/models": a new hash input would orphan every cache */
	name_of("posix", "/srv/models", "", "us-east-1", a);
	CHECK(strcmp(a, "posix-srv_models-042b49f2a09f63f0") == 0, "name '%s' changed", a);
	cfg_init(&c);
	cfg_set_source(&c, "/srv/models");
	CHECK(cache_store_dir_name(&c, "posix", small, sizeof(small)) == -ENAMETOOLONG,
	      "a short buffer is not refused");
}

int main(void)
{
	test_one_store_one_name();
	test_other_store_other_name();
	test_slug();
	test_stable_and_bounded();
	if (failures) {
		fprintf(stderr, "tiers_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
