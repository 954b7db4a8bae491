/*
 * remote_test.c - unit tests of the rules remote.c applies to every store:
 * which names a listing may show, one entry per name (a file over a
 * directory), which symlink targets stay inside the store, and that a refusal
 * is logged once. Exits 0 on pass, 1 on failure.
 */
#define _GNU_SOURCE
#include "mcfs_test.h"
#include "remote_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void test_names(void)
{
	char longname[CACHE_NAME_MAX + 1];

	memset(longname, 'n', sizeof(longname) - 1);
	longname[CACHE_NAME_MAX] = '\0';
	CHECK(remote_name_refusal("model.bin") == NULL);
	CHECK(remote_name_refusal("...") == NULL);
	CHECK(remote_name_refusal("") != NULL);
	CHECK(remote_name_refusal(".") != NULL);
	CHECK(remote_name_refusal("..") != NULL);
	CHECK(remote_name_refusal("a/b") != NULL);
	CHECK(remote_name_refusal(longname) != NULL); /* 256 bytes */
	longname[CACHE_NAME_MAX - 1] = '\0';
	CHECK(remote_name_refusal(longname) == NULL); /* 255 bytes: the most a name has */
	CHECK(remote_path_refusal("a/b/c") == NULL);
	CHECK(remote_path_refusal("") == NULL);
	CHECK(remote_path_refusal("/etc") != NULL);
	CHECK(remote_path_refusal("a//b") != NULL);
	CHECK(remote_path_refusal("a/../b") != NULL);
	CHECK(remote_check_path("a/./b") == -EINVAL);
}

static void test_links(void)
{
	static const struct {
		const char *link, *target;
		bool inside;
	} cases[] = {
	    {"link", "model.bin", true},
	    {"link", "./sub/model.bin", true},
	    {"link", ".", true},
	    {"a/b/link", "../../x", true}, /* a Hugging Face cache: snapshots -> blobs */
	    {"snapshots/rev/model.safetensors", "../../blobs/0123abcd", true},
	    {"a/b/link", "../../../x", false}, /* one above the root */
	    {"link", "..", false},
	    {"link", "../etc/hostname", false},
	    {"a/link", "../../../../etc/hostname", false},
	    {"link", "/etc/passwd", false},
	    {"a/link", "/a/x", false}, /* absolute, even where it might land inside */
	    {"link", "", false},
	    {"a/b/link", "x/../../y", false}, /* a '..' after a name (x may be a link) */
	    {"link", "x/..", false},
	    {"a/link", ".//../x", true},
	};
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(cases); i++) {
		const char *why = remote_link_refusal(cases[i].link, cases[i].target);

		CHECK((why == NULL) == cases[i].inside, "%s -> '%s': %s", cases[i].link,
		      cases[i].target, why ? why : "inside");
	}
}

static void set(struct cache_dirent *e, const char *name, uint32_t mode, uint64_t size)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->attr.mode = mode;
	e->attr.size = size;
}

static void test_dedupe(void)
{
	struct cache_dirent e[6];
	size_t n;

	set(&e[0], "dup", S_IFDIR | 0555, 0);
	set(&e[1], "b", S_IFREG | 0444, 1);
	set(&e[2], "dup", S_IFREG | 0444, 42);
	set(&e[3], "a", S_IFREG | 0444, 2);
	set(&e[4], "twice", S_IFREG | 0444, 3);
	set(&e[5], "twice", S_IFREG | 0444, 3);
	n = remote_dedupe(NULL, "dir", e, 6);
	CHECK(n == 4, "n %zu", n);
	if (n == 4) {
		CHECK(strcmp(e[0].name, "a") == 0 && strcmp(e[1].name, "b") == 0);
		/* a file over a directory of the same name, as a stat (HEAD) answers */
		CHECK(strcmp(e[2].name, "dup") == 0 && S_ISREG(e[2].attr.mode) &&
		      e[2].attr.size == 42);
		CHECK(strcmp(e[3].name, "twice") == 0);
	}
	/* the other order gives the same answer */
	set(&e[0], "dup", S_IFREG | 0444, 42);
	set(&e[1], "dup", S_IFDIR | 0555, 0);
	n = remote_dedupe(NULL, "", e, 2);
	CHECK(n == 1 && S_ISREG(e[0].attr.mode));
	CHECK(remote_dedupe(NULL, "", e, 0) == 0);
}

static void test_first_time(void)
{
	struct remote *r = calloc(1, sizeof(*r));
	char path[32];
	int i, again = 0;

	if (!r)
		return;
	pthread_mutex_init(&r->said_lock, NULL);
	CHECK(remote_first_time(r, "link", "a/b"));
	CHECK(!remote_first_time(r, "link", "a/b"));
	CHECK(remote_first_time(r, "twice", "a/b")); /* another refusal of the same path */
	CHECK(remote_first_time(NULL, "link", "a/b"));
	/* past the table's capacity a refusal is logged every time, never lost */
	for (i = 0; i < REMOTE_SAID_SLOTS; i++) {
		snprintf(path, sizeof(path), "p%d", i);
		(void)remote_first_time(r, "link", path);
	}
	for (i = 0; i < REMOTE_SAID_SLOTS; i++) {
		snprintf(path, sizeof(path), "p%d", i);
		again += remote_first_time(r, "link", path);
	}
	CHECK(again > 0 && again < REMOTE_SAID_SLOTS, "again %d", again);
	pthread_mutex_destroy(&r->said_lock);
	free(r);
}

int main(void)
{
	mcfs_log_setup(MCFS_LOG_ERR, false);
	test_names();
	test_links();
	test_dedupe();
	test_first_time();
	if (failures) {
		fprintf(stderr, "remote_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("remote_test: ok\n");
	return 0;
}
