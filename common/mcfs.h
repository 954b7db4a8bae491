/*
 * mcfs.h - the few definitions every module shares: error-check and test
 * attributes, and the logger.
 *
 * The logger is the only process-wide facility besides the session. It writes
 * one line per event to stderr (foreground) or syslog (daemon). It never sees
 * credentials: callers pass paths and URLs that have already been stripped of
 * them (cache/remote owns that rule).
 */
#ifndef MCFS_H
#define MCFS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#define MCFS_VERSION "0.1.0"

/* Functions that return a negative errno carry this, so that no error is lost. */
#define MCFS_MUST_CHECK __attribute__((warn_unused_result))

/*
 * MCFS_TESTABLE marks internals that unit tests reach: static in the daemon,
 * external in test builds (MCFS_UNIT_TEST), where the test declares them.
 */
#ifdef MCFS_UNIT_TEST
#define MCFS_TESTABLE
#else
#define MCFS_TESTABLE static
#endif

#define MCFS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MCFS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MCFS_MAX(a, b) ((a) > (b) ? (a) : (b))

enum mcfs_log_level {
	MCFS_LOG_ERR = 0,
	MCFS_LOG_WARN = 1,
	MCFS_LOG_INFO = 2,
	MCFS_LOG_DEBUG = 3,
};

/*
 * Sets where log lines go and which are kept. use_syslog: after daemonising.
 * Lines above @level are dropped. Can't fail.
 */
void mcfs_log_setup(int level, bool use_syslog);

/*
 * The shape of lines on stderr (log.c shows them): @json, one JSON object per
 * line (time, level, pid, msg); else text, which @stamped starts with the
 * time (RFC 3339, UTC, milliseconds). Whatever the shape, a line to journald's
 * stream (JOURNAL_STREAM) starts with its syslog priority ("<3>"), and a
 * text line to it carries no time (journald stamps it). Syslog gets the
 * message only. The default: text, unstamped. Can't fail.
 */
void mcfs_log_style(bool json, bool stamped);

/* Lines above @level are dropped from now on; any thread. Can't fail. */
void mcfs_log_set_level(int level);

/* Current level, for callers that want to skip building an expensive message. */
int mcfs_log_level(void);

/* "error", "warning", "info" or "debug" for a MCFS_LOG_* level; "?" for another. */
const char *mcfs_log_level_name(int level);

/* The MCFS_LOG_* level named @name (as mcfs_log_level_name() spells it), or -1. */
int mcfs_log_level_of(const char *name);

/* printf-style; appends the newline. Thread safe (one write per line). */
void mcfs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MCFS_ERR(...) mcfs_log(MCFS_LOG_ERR, __VA_ARGS__)
#define MCFS_WARN(...) mcfs_log(MCFS_LOG_WARN, __VA_ARGS__)
#define MCFS_INFO(...) mcfs_log(MCFS_LOG_INFO, __VA_ARGS__)
#define MCFS_DEBUG(...)                                                                            \
	do {                                                                                       \
		if (mcfs_log_level() >= MCFS_LOG_DEBUG)                                            \
			mcfs_log(MCFS_LOG_DEBUG, __VA_ARGS__);                                     \
	} while (0)

/* Monotonic clock in nanoseconds. */
unsigned long long mcfs_now_ns(void);

/*
 * Nanoseconds from @then to @now, two mcfs_now_ns() times; 0 when @then is
 * the later one. A time another thread stamped (when it last heard a byte)
 * can be later than the clock this thread read just before looking at it;
 * plain "now - then" wraps to about 584 years there. Can't fail.
 */
static inline unsigned long long mcfs_since_ns(unsigned long long now, unsigned long long then)
{
	return now > then ? now - then : 0;
}

/*
 * Copies @url into @out (truncated to @outlen) with any "user:pass@" removed:
 * what log lines, the mount's fsname and cache names show of a source. A
 * plain path comes back unchanged. Can't fail.
 */
void mcfs_url_redact(const char *url, char *out, unsigned long outlen);

/*
 * Text (common/text.c). Every size and rate mcfs prints is in binary units,
 * the ones the config parser reads (1M = 1 MiB).
 */

/* "12.5 MiB"-style rendering of a byte count into buf; returns buf. Can't fail. */
const char *mcfs_fmt_bytes(unsigned long long bytes, char *buf, unsigned long len);

/* "151.3 MiB/s"-style rendering of a rate into buf; returns buf. Can't fail. */
const char *mcfs_fmt_rate(double bytes_per_s, char *buf, unsigned long len);

/*
 * Copies @inlen bytes of @in (NULs included) into @out as one printable line:
 * control bytes, DEL, C1 controls and bytes that are not UTF-8 become \n, \t,
 * \r or \xNN; UTF-8 text passes. Output longer than @outlen is cut between
 * characters and ends in "...". Use it wherever a message quotes what a user
 * or a store gave. Returns out. Can't fail.
 */
const char *mcfs_escape(const char *in, size_t inlen, char *out, size_t outlen);

/*
 * The one of @names (@n of them) that @word most likely is a typo of: at most
 * 2 edits away (insert, delete, replace a byte), the first of the nearest.
 * NULL if none is that near. Borrowed: returns an element of @names.
 */
const char *mcfs_nearest(const char *word, const char *const *names, size_t n);

/*
 * The first line of a small file (a sysfs or procfs knob) into @buf, without
 * its newline. Returns 0, or -errno (-EIO for an empty file; @buf is then
 * unspecified). Not logged: a missing knob is an answer, not a failure.
 */
MCFS_MUST_CHECK int mcfs_read_line(const char *path, char *buf, size_t len);

#endif
