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

/* Current level, for callers that want to skip building an expensive message. */
int mcfs_log_level(void);

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
 * Copies @url into @out (truncated to @outlen) with any "user:pass@" removed:
 * what log lines, the mount's fsname and cache names show of a source. A
 * plain path comes back unchanged. Can't fail.
 */
void mcfs_url_redact(const char *url, char *out, unsigned long outlen);

/* "12.5 MiB"-style rendering of a byte count into buf; returns buf. */
const char *mcfs_fmt_bytes(unsigned long long bytes, char *buf, unsigned long len);

#endif
