/*
 * manifest_test.c - unit tests of the http store's listings: the manifest
 * writer and parser round trip (files, directories, symlinks, implied
 * parents), refusal of escaping paths, and nginx autoindex JSON pages.
 * Exits 0 on pass, 1 on failure.
 */
#define _GNU_SOURCE
#include "manifest.h"
#include "mcfs_test.h"
#include "net_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char manual[] =
    "{\"format\": \"mcfs-manifest\", \"version\": 1, \"entries\": ["
    "{\"path\": \"a/b/c.bin\", \"type\": \"file\", \"size\": 5000000000, \"mtime\": 100,"
    " \"mtime_nsec\": 7, \"etag\": \"\\\"64-12a05f200\\\"\"},"
    "{\"path\": \"a\", \"type\": \"dir\", \"mtime\": 50},"
    "{\"path\": \"top.txt\", \"type\": \"file\", \"size\": 3},"
    "{\"path\": \"../evil\", \"type\": \"file\", \"size\": 1},"
    "{\"path\": \"/abs\", \"type\": \"file\", \"size\": 1},"
    "{\"path\": \"x//y\", \"type\": \"file\", \"size\": 1},"
    "{\"path\": \"ln\", \"type\": \"symlink\", \"target\": \"a/b/c.bin\"}]}";

static void test_parse(void)
{
	struct remote_manifest *m = NULL;
	struct cache_dirent *e = NULL;
	struct cache_attr a;
	const char *target = NULL;
	size_t n = 0;

	CHECK(remote_manifest_parse(manual, strlen(manual), &m) == 0);
	if (!m)
		return;
	/* a, a/b (implied), a/b/c.bin, top.txt, ln; the three escaping paths dropped */
	CHECK(remote_manifest_count(m) == 5);
	CHECK(remote_manifest_stat(m, "a/b/c.bin", &a, NULL) == 0);
	CHECK(S_ISREG(a.mode) && a.size == 5000000000ULL);
	CHECK(a.mtime_ns == 100LL * 1000000000 + 7);
	CHECK(a.version[0] == '\0'); /* an "etag" is a guess: ignored */
	CHECK(remote_manifest_stat(m, "a", &a, NULL) == 0);
	CHECK(S_ISDIR(a.mode) && a.mtime_ns == 50LL * 1000000000);
	CHECK(remote_manifest_stat(m, "a/b", &a, NULL) == 0 && S_ISDIR(a.mode));
	CHECK(remote_manifest_stat(m, "", &a, NULL) == 0 && S_ISDIR(a.mode));
	CHECK(remote_manifest_stat(m, "ln", &a, &target) == 0 && S_ISLNK(a.mode));
	CHECK(target && strcmp(target, "a/b/c.bin") == 0);
	CHECK(remote_manifest_stat(m, "nope", &a, NULL) == -ENOENT);
	CHECK(remote_manifest_stat(m, "x", &a, NULL) == -ENOENT);

	CHECK(remote_manifest_list(m, "", &e, &n) == 0);
	CHECK(n == 3);
	if (n == 3) {
		CHECK(strcmp(e[0].name, "a") == 0);
		CHECK(strcmp(e[1].name, "ln") == 0);
		CHECK(strcmp(e[2].name, "top.txt") == 0);
	}
	free(e);
	CHECK(remote_manifest_list(m, "a", &e, &n) == 0);
	CHECK(n == 1 && strcmp(e[0].name, "b") == 0);
	free(e);
	CHECK(remote_manifest_list(m, "a/b", &e, &n) == 0);
	CHECK(n == 1 && strcmp(e[0].name, "c.bin") == 0);
	free(e);
	CHECK(remote_manifest_list(m, "top.txt", &e, &n) == -ENOTDIR);
	CHECK(remote_manifest_list(m, "zzz", &e, &n) == -ENOENT);
	remote_manifest_free(m);

	CHECK(remote_manifest_parse("[1,2]", 5, &m) == -EINVAL);
	CHECK(remote_manifest_parse("{not json", 9, &m) == -EINVAL);
}

static void test_roundtrip(const char *base)
{
	char dir[512], p[600], *buf = NULL;
	struct remote_manifest *m = NULL;
	struct cache_dirent *e = NULL;
	struct cache_attr a;
	size_t len = 0, n = 0;
	FILE *mem;
	int fd;

	snprintf(dir, sizeof(dir), "%s/manifest_test.XXXXXX", base);
	if (!mkdtemp(dir)) {
		CHECK(!"mkdtemp");
		return;
	}
	snprintf(p, sizeof(p), "%s/sub", dir);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/sub/w.bin", dir);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	CHECK(fd >= 0 && write(fd, "hello", 5) == 5);
	close(fd);
	snprintf(p, sizeof(p), "%s/link", dir);
	CHECK(symlink("sub/w.bin", p) == 0);
	snprintf(p, sizeof(p), "%s/" REMOTE_MANIFEST_NAME, dir);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	close(fd);

	mem = open_memstream(&buf, &len);
	CHECK(remote_manifest_write(dir, mem) == 0);
	fclose(mem);
	CHECK(remote_manifest_parse(buf, len, &m) == 0);
	if (m) {
		CHECK(remote_manifest_count(m) == 3); /* sub, sub/w.bin, link; not itself */
		CHECK(remote_manifest_stat(m, "sub/w.bin", &a, NULL) == 0 && a.size == 5);
		CHECK(a.version[0] == '\0' && a.mtime_ns != 0);
		CHECK(remote_manifest_stat(m, "link", &a, NULL) == 0 && S_ISLNK(a.mode));
		CHECK(remote_manifest_list(m, "sub", &e, &n) == 0 && n == 1);
		free(e);
		remote_manifest_free(m);
	}
	free(buf);
	CHECK(remote_manifest_write("/nonexistent/dir", stdout) == -ENOENT);
	snprintf(p, sizeof(p), "rm -rf '%s'", dir);
	CHECK(system(p) == 0);
}

/* Captures what the code under test logs (stderr) between begin and end. */
static int saved_stderr = -1;
static FILE *captured;

static void capture_begin(void)
{
	fflush(stderr);
	captured = tmpfile();
	saved_stderr = dup(STDERR_FILENO);
	if (captured && saved_stderr >= 0)
		dup2(fileno(captured), STDERR_FILENO);
}

/* Returns the captured text (caller frees with free()). */
static char *capture_end(void)
{
	char *text = calloc(1, 65536);
	size_t n = 0;

	fflush(stderr);
	if (saved_stderr >= 0) {
		dup2(saved_stderr, STDERR_FILENO);
		close(saved_stderr);
		saved_stderr = -1;
	}
	if (captured && text) {
		rewind(captured);
		n = fread(text, 1, 65535, captured);
		text[n] = '\0';
	}
	if (captured)
		fclose(captured);
	captured = NULL;
	return text;
}

static int count_lines_with(const char *text, const char *needle)
{
	const char *p = text;
	int n = 0;

	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	return n;
}

static void test_autoindex(void)
{
	static const char page[] =
	    "[\n{ \"name\":\"model.bin\", \"type\":\"file\", \"mtime\":\"Wed, 22 Nov 2023 "
	    "10:00:00 GMT\", \"size\":1073741824 },\n"
	    "{ \"name\":\"sub\", \"type\":\"directory\", \"mtime\":\"Wed, 22 Nov 2023 10:00:00 "
	    "GMT\" },\n{ \"name\":\"sock\", \"type\":\"other\" }\n]";
	struct cache_dirent *e = NULL;
	size_t n = 0;

	CHECK(remote_autoindex_parse(page, sizeof(page) - 1, "t", &e, &n) == 0);
	CHECK(n == 2);
	if (n == 2) {
		CHECK(strcmp(e[0].name, "model.bin") == 0 && S_ISREG(e[0].attr.mode));
		CHECK(e[0].attr.size == 1073741824ULL);
		CHECK(e[0].attr.mtime_ns == 1700647200LL * 1000000000);
		/* no validator the server did not send: the open asks for the real one */
		CHECK(e[0].attr.version[0] == '\0', "version '%s'", e[0].attr.version);
		CHECK(strcmp(e[1].name, "sub") == 0 && S_ISDIR(e[1].attr.mode));
	}
	free(e);
	CHECK(remote_autoindex_parse("<html>", 6, "t", &e, &n) == -EINVAL);
}

/* Names a listing can't show are dropped, each with a log line; nothing is cut short. */
static void test_autoindex_refusals(void)
{
	char page[4096], longname[301];
	struct cache_dirent *e = NULL;
	size_t n = 0, i;
	char *log;

	memset(longname, 'x', 300);
	longname[300] = '\0';
	/* an escaped NUL, a raw NUL, a literal backslash-u0000 (fine), 300 bytes, '/' */
	snprintf(page, sizeof(page),
		 "[{\"name\":\"ok.bin\",\"type\":\"file\",\"size\":1},"
		 "{\"name\":\"evil\\u0000tail\",\"type\":\"file\",\"size\":2},"
		 "{\"name\":\"raw@tail\",\"type\":\"file\",\"size\":3},"
		 "{\"name\":\"lit\\\\u0000\",\"type\":\"file\",\"size\":4},"
		 "{\"name\":\"%s\",\"type\":\"file\",\"size\":5},"
		 "{\"name\":\"a/b\",\"type\":\"file\",\"size\":6},"
		 "{\"name\":\"255\",\"type\":\"directory\"}]",
		 longname);
	*strchr(page, '@') = '\0'; /* the raw NUL inside "raw@tail" */
	mcfs_log_setup(MCFS_LOG_WARN, false);
	capture_begin();
	CHECK(remote_autoindex_parse(page, strlen(page) + 1 + strlen(strchr(page, '\0') + 1), "t",
				     &e, &n) == 0);
	log = capture_end();
	mcfs_log_setup(MCFS_LOG_ERR, false);
	CHECK(n == 3, "n %zu", n);
	for (i = 0; i < n; i++) {
		CHECK(strcmp(e[i].name, "evil") != 0 && strcmp(e[i].name, "raw") != 0,
		      "'%s' shown cut short at its NUL", e[i].name);
		CHECK(strlen(e[i].name) < CACHE_NAME_MAX);
	}
	if (n == 3) {
		CHECK(strcmp(e[0].name, "ok.bin") == 0);
		CHECK(strcmp(e[1].name, "lit\\u0000") == 0, "'%s'", e[1].name);
		CHECK(strcmp(e[2].name, "255") == 0);
	}
	CHECK(log && count_lines_with(log, "refused") == 4, "log:\n%s", log ? log : "");
	CHECK(log && count_lines_with(log, "NUL byte") == 2, "log:\n%s", log ? log : "");
	CHECK(log && strstr(log, "longer than 255 bytes") && strstr(log, "(300 bytes"), "log:\n%s",
	      log ? log : "");
	free(log);
	free(e);
}

/* A manifest: NUL in a path or a target, a 300-byte part, a name listed twice. */
static void test_manifest_refusals(void)
{
	char text[4096], longname[301];
	struct remote_manifest *m = NULL;
	struct cache_dirent *e = NULL;
	const char *target = NULL;
	struct cache_attr a;
	size_t n = 0;
	char *log;

	memset(longname, 'y', 300);
	longname[300] = '\0';
	snprintf(text, sizeof(text),
		 "{\"format\": \"mcfs-manifest\", \"version\": 1, \"entries\": ["
		 "{\"path\": \"nul\\u0000/../../etc\", \"type\": \"file\", \"size\": 1},"
		 "{\"path\": \"ln\", \"type\": \"symlink\", \"target\": \"ok\\u0000/../../x\"},"
		 "{\"path\": \"d/%s\", \"type\": \"file\", \"size\": 1},"
		 "{\"path\": \"both\", \"type\": \"dir\"},"
		 "{\"path\": \"both\", \"type\": \"file\", \"size\": 9},"
		 "{\"path\": \"parent\", \"type\": \"file\", \"size\": 8},"
		 "{\"path\": \"parent/child\", \"type\": \"file\", \"size\": 7},"
		 "{\"path\": \"fine\", \"type\": \"dir\"},"
		 "{\"path\": \"fine/f\", \"type\": \"file\", \"size\": 6}]}",
		 longname);
	mcfs_log_setup(MCFS_LOG_WARN, false);
	capture_begin();
	CHECK(remote_manifest_parse(text, strlen(text), &m) == 0);
	log = capture_end();
	mcfs_log_setup(MCFS_LOG_ERR, false);
	if (m) {
		CHECK(remote_manifest_stat(m, "nul", &a, NULL) == -ENOENT);
		CHECK(remote_manifest_stat(m, "ln", &a, &target) == -ENOENT);
		CHECK(remote_manifest_stat(m, "d", &a, NULL) == -ENOENT);
		/* a file over a directory of the same name, either order */
		CHECK(remote_manifest_stat(m, "both", &a, NULL) == 0 && S_ISREG(a.mode) &&
		      a.size == 9);
		CHECK(remote_manifest_stat(m, "parent", &a, NULL) == 0 && S_ISREG(a.mode));
		CHECK(remote_manifest_list(m, "", &e, &n) == 0);
		CHECK(n == 3, "n %zu", n); /* both, fine, parent: once each */
		free(e);
		remote_manifest_free(m);
	}
	CHECK(log && count_lines_with(log, "NUL byte") == 2, "log:\n%s", log ? log : "");
	CHECK(log && strstr(log, "longer than 255 bytes"), "log:\n%s", log ? log : "");
	CHECK(log && strstr(log, "'both' twice"), "log:\n%s", log ? log : "");
	CHECK(log && strstr(log, "'parent' as a file and has paths under it"), "log:\n%s",
	      log ? log : "");
	CHECK(log && !strstr(log, "'fine'"), "a directory with contents is no duplicate:\n%s",
	      log ? log : "");
	free(log);
}

int main(int argc, char **argv)
{
	mcfs_log_setup(MCFS_LOG_ERR, false);
	test_parse();
	test_roundtrip(argc > 1 ? argv[1] : "/tmp");
	test_autoindex();
	test_autoindex_refusals();
	test_manifest_refusals();
	if (failures) {
		fprintf(stderr, "manifest_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("manifest_test: ok\n");
	return 0;
}
