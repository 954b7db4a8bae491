/*
 * log.c - one line per event, to stderr or syslog.
 *
 * Each line is formatted into a local buffer and written with one write(2),
 * so lines from concurrent threads never interleave. The level and the sink
 * are relaxed atomics: a daemon switches to syslog once its mount is ready,
 * while its threads already log. Every line goes through mcfs_escape(): a
 * control byte in a file name or a config value can neither forge a second
 * line nor reach the terminal.
 */
#define _GNU_SOURCE
#include "mcfs.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* Atomics: the daemon switches to syslog after its threads exist. */
static atomic_int log_level = MCFS_LOG_INFO;
static atomic_bool log_syslog;

void mcfs_log_setup(int level, bool use_syslog)
{
	if (use_syslog)
		openlog("mcfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
	atomic_store_explicit(&log_syslog, use_syslog, memory_order_relaxed);
}

int mcfs_log_level(void)
{
	return atomic_load_explicit(&log_level, memory_order_relaxed);
}

void mcfs_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char msg[2048], line[2048];
	va_list ap;
	int n, m;

	if (level > mcfs_log_level() || level < 0)
		return;
	va_start(ap, fmt);
	m = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	m = MCFS_MIN(m, (int)sizeof(msg) - 1);
	/* names from stores and config files may hold control bytes: one line, printable */
	if (atomic_load_explicit(&log_syslog, memory_order_relaxed)) {
		syslog(prio[level], "%s", mcfs_escape(msg, (size_t)m, line, sizeof(line)));
		return;
	}
	n = snprintf(line, sizeof(line), "mcfs: %s: ", names[level]);
	mcfs_escape(msg, (size_t)m, line + n, sizeof(line) - (size_t)n - 1);
	n += (int)strlen(line + n);
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return; /* nowhere left to report it */
}

unsigned long long mcfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void mcfs_url_redact(const char *url, char *out, unsigned long outlen)
{
	const char *scheme = strstr(url, "://");
	const char *host = scheme ? scheme + 3 : url;
	const char *end = host + strcspn(host, "/?#");
	const char *at = memchr(host, '@', (size_t)(end - host));

	if (!scheme || !at) {
		snprintf(out, outlen, "%s", url);
		return;
	}
	snprintf(out, outlen, "%.*s%s", (int)(host - url), url, at + 1);
}
