/*
 * mcfs_test.h - the few definitions every C unit test shares, in the manner
 * of liburing's test/helpers.h: exit codes, and CHECK(), which prints where
 * and why a check failed and lets the program go on, so that one run shows
 * every failure. Include it once, from the test's own .c file.
 */
#ifndef MCFS_TEST_H
#define MCFS_TEST_H

#include <stdarg.h>
#include <stdio.h>

#define T_EXIT_PASS 0
#define T_EXIT_FAIL 1
#define T_EXIT_SKIP 77 /* ctest's and automake's "skipped" */

/* Failed checks so far; main() returns T_EXIT_FAIL if any. */
static int failures;

/* fmt is ":" followed by the caller's format, if any (so that it is never empty). */
static inline void __attribute__((format(printf, 1, 2))) mcfs_test_note(const char *fmt, ...)
{
	va_list ap;

	if (fmt[1] != '\0')
		fputc(':', stderr);
	fputc(' ', stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt + 1, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* CHECK(cond) or CHECK(cond, "format", args...): the format must be a literal. */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: FAIL: %s", __FILE__, __LINE__, #cond);             \
			mcfs_test_note(":" __VA_ARGS__);                                           \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* CHECK_STR(a, b): two strings are equal; prints both where they differ. Needs <string.h>. */
#define CHECK_STR(a, b)                                                                            \
	do {                                                                                       \
		if (strcmp((a), (b)) != 0) {                                                       \
			fprintf(stderr, "%s:%d: '%s' != '%s'\n", __FILE__, __LINE__, (a), (b));    \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

#endif
