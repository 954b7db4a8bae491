/*
 * text_test.c - unit test of common/text.c: escaping of user input, binary
 * units, and the "did you mean" guess. Exits 0 (pass) or 1 (fail).
 */
#include "mcfs.h"
#include "mcfs_test.h"

#include <string.h>

/* Escapes @len bytes of @in into a buffer of @outlen; checks the result is @want. */
static void expect_esc(const char *in, size_t len, size_t outlen, const char *want)
{
	char out[256];

	memset(out, 'Z', sizeof(out));
	mcfs_escape(in, len, out, outlen);
	CHECK(strcmp(out, want) == 0, "escape of %zu bytes into %zu: got '%s', want '%s'", len,
	      outlen, out, want);
	CHECK(strlen(out) < outlen, "output of %zu bytes overflows %zu", strlen(out), outlen);
}

#define ESC(lit, outlen, want) expect_esc(lit, sizeof(lit) - 1, outlen, want)

static void test_escape(void)
{
	ESC("plain text", 64, "plain text");
	ESC("", 64, "");
	ESC("a\nb\tc\rd", 64, "a\\nb\\tc\\rd");
	ESC("\x1b[31mred", 64, "\\x1b[31mred");
	ESC("del\x7f", 64, "del\\x7f");
	ESC("key\0rest", 64, "key\\x00rest"); /* NULs count: the length is given */
	ESC("\x01\x02\xff", 64, "\\x01\\x02\\xff");
	ESC("back\\slash", 64, "back\\slash");
	/* UTF-8 passes: names in any language */
	ESC("mod\xc3\xa8le-\xe6\xa8\xa1\xe5\x9e\x8b-\xf0\x9f\x98\x80", 64,
	    "mod\xc3\xa8le-\xe6\xa8\xa1\xe5\x9e\x8b-\xf0\x9f\x98\x80");
	/* not UTF-8: a lone continuation, a cut sequence, overlong, surrogate, C1 */
	ESC("\x80x", 64, "\\x80x");
	ESC("\xe6\xa8", 64, "\\xe6\\xa8");
	ESC("\xc0\xaf", 64, "\\xc0\\xaf");
	ESC("\xed\xa0\x80", 64, "\\xed\\xa0\\x80");
	ESC("\xc2\x9b", 64, "\\xc2\\x9b");
	ESC("\xf4\x90\x80\x80", 64, "\\xf4\\x90\\x80\\x80");
	/* cut: never inside an escape or a character, always marked */
	ESC("abcdefgh", 9, "abcdefgh");
	ESC("abcdefghi", 9, "abcde...");
	ESC("ab\x01", 6, "ab...");
	ESC("ab\x01", 7, "ab\\x01");
	ESC("a\xc3\xa8\xc3\xa8\xc3\xa8", 7, "a\xc3\xa8...");
	ESC("abc", 1, "");
	ESC("abc", 3, "..");
}

static void test_units(void)
{
	char b[32];

	CHECK(strcmp(mcfs_fmt_bytes(512, b, sizeof(b)), "512 B") == 0, "%s", b);
	CHECK(strcmp(mcfs_fmt_bytes(6ull << 20, b, sizeof(b)), "6.0 MiB") == 0, "%s", b);
	CHECK(strcmp(mcfs_fmt_bytes(3ull << 29, b, sizeof(b)), "1.5 GiB") == 0, "%s", b);
	/* 151 MB/s is 144 MiB/s: binary, like the sizes */
	CHECK(strcmp(mcfs_fmt_rate(151e6, b, sizeof(b)), "144.0 MiB/s") == 0, "%s", b);
	CHECK(strcmp(mcfs_fmt_rate(2.5 * 1024 * 1024 * 1024, b, sizeof(b)), "2.5 GiB/s") == 0, "%s",
	      b);
	CHECK(strcmp(mcfs_fmt_rate(100, b, sizeof(b)), "100 B/s") == 0, "%s", b);
	CHECK(strcmp(mcfs_fmt_rate(-1, b, sizeof(b)), "0 B/s") == 0, "%s", b);
}

static void test_nearest(void)
{
	static const char *const cmds[] = {"mount", "umount", "status", "help-config"};
	const char *hit;

	hit = mcfs_nearest("stauts", cmds, MCFS_ARRAY_SIZE(cmds));
	CHECK(hit && strcmp(hit, "status") == 0, "stauts -> %s", hit ? hit : "(none)");
	hit = mcfs_nearest("moutn", cmds, MCFS_ARRAY_SIZE(cmds));
	CHECK(hit && strcmp(hit, "mount") == 0, "moutn -> %s", hit ? hit : "(none)");
	hit = mcfs_nearest("unmount", cmds, MCFS_ARRAY_SIZE(cmds));
	CHECK(hit && strcmp(hit, "umount") == 0, "unmount -> %s", hit ? hit : "(none)");
	hit = mcfs_nearest("helpconfig", cmds, MCFS_ARRAY_SIZE(cmds));
	CHECK(hit && strcmp(hit, "help-config") == 0, "helpconfig -> %s", hit ? hit : "(none)");
	CHECK(mcfs_nearest("frobnicate", cmds, MCFS_ARRAY_SIZE(cmds)) == NULL, "frobnicate");
	CHECK(mcfs_nearest("ls", cmds, MCFS_ARRAY_SIZE(cmds)) == NULL, "ls");
	CHECK(mcfs_nearest("x", cmds, 0) == NULL, "no names");
}

int main(void)
{
	test_escape();
	test_units();
	test_nearest();
	if (failures) {
		fprintf(stderr, "text_test: %d check(s) failed\n", failures);
		return T_EXIT_FAIL;
	}
	return T_EXIT_PASS;
}
