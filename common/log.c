/*
 * log.c - one line per event, to stderr or syslog.
 *
 * Each line is formatted into a local buffer and written with one write(2),
 * so lines from concurrent threads never interleave. The level and the sink
 * are relaxed atomics: a daemon switches to syslog once its mount is ready,
 * while its threads already log.
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
	char line[2048];
	va_list ap;
	int n;

	if (level > mcfs_log_level() || level < 0)
		return;
	va_start(ap, fmt);
	if (atomic_load_explicit(&log_syslog, memory_order_relaxed)) {
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
		syslog(prio[level], "%s", line);
		return;
	}
	n = snprintf(line, sizeof(line), "mcfs: %s: ", names[level]);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
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

const char *mcfs_fmt_bytes(unsigned long long bytes, char *buf, unsigned long len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < MCFS_ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}
