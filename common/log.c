/*
 * log.c - one line per event, to stderr or syslog.
 *
 * Each line is formatted into a local buffer and written with one write(2),
 * so lines from concurrent threads never interleave. The level, the sink and
 * the style are relaxed atomics: a daemon switches to syslog once its mount
 * is ready, and `mcfs log-level` changes the level, while its threads
 * already log. Every message goes through mcfs_escape(): a control byte in a
 * file name or a config value can neither forge a second line nor reach the
 * terminal.
 *
 * Lines on stderr take one of these shapes:
 *   mcfs: info: mounted ...                      (a command, or a terminal)
 *   2026-11-26T19:16:00.123Z mcfs: info: ...     (a foreground mount: stamped)
 *   {"time":"2026-...Z","level":"info","pid":42,"msg":"..."}   (log_format=json)
 * and when stderr is journald's stream (systemd says so in JOURNAL_STREAM,
 * the device and inode of the socket it gave us), each starts with the
 * syslog priority, "<3>" for an error, which journald strips and keeps as
 * the entry's priority: without it, every line before the daemon switched
 * to syslog (start-up errors included) was stored at journald's default, 6.
 * journald stamps entries itself, so text lines to it carry no time.
 */
#define _GNU_SOURCE
#include "mcfs.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* Atomics: the daemon switches to syslog after its threads exist. */
static atomic_int log_level = MCFS_LOG_INFO;
static atomic_bool log_syslog;
static atomic_bool log_json;	/* stderr lines are JSON objects */
static atomic_bool log_stamped; /* stderr text lines start with the time */
static atomic_int log_journal;	/* stderr is journald's stream: 0 not asked yet, 1 no, 2 yes */

void mcfs_log_setup(int level, bool use_syslog)
{
	if (use_syslog)
		openlog("mcfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	mcfs_log_set_level(level);
	atomic_store_explicit(&log_syslog, use_syslog, memory_order_relaxed);
}

void mcfs_log_style(bool json, bool stamped)
{
	atomic_store_explicit(&log_json, json, memory_order_relaxed);
	atomic_store_explicit(&log_stamped, stamped, memory_order_relaxed);
}

void mcfs_log_set_level(int level)
{
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int mcfs_log_level(void)
{
	return atomic_load_explicit(&log_level, memory_order_relaxed);
}

const char *mcfs_log_level_name(int level)
{
	return level >= 0 && level < (int)MCFS_ARRAY_SIZE(level_names) ? level_names[level] : "?";
}

int mcfs_log_level_of(const char *name)
{
	int i;

	for (i = 0; i < (int)MCFS_ARRAY_SIZE(level_names); i++)
		if (strcmp(name, level_names[i]) == 0)
			return i;
	return -1;
}

/* True if stderr is the stream journald gave us (JOURNAL_STREAM="DEV:INO").
 * Asked once; a race asks twice, with the same answer. */
static bool to_journal(void)
{
	int known = atomic_load_explicit(&log_journal, memory_order_relaxed);
	const char *env;
	unsigned long long dev, ino;
	struct stat st;

	if (known)
		return known == 2;
	env = getenv("JOURNAL_STREAM");
	known = 1;
	if (env && sscanf(env, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
	    (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino)
		known = 2;
	atomic_store_explicit(&log_journal, known, memory_order_relaxed);
	return known == 2;
}

/* RFC 3339 UTC with milliseconds, "2026-11-26T19:16:00.123Z", into buf (32 bytes). */
static void rfc3339(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* Appends @in (escaped, so printable UTF-8) to @out as a JSON string's body. */
static size_t json_body(const char *in, char *out, size_t len)
{
	size_t o = 0;

	for (; *in && o + 2 < len; in++) {
		if (*in == '"' || *in == '\\')
			out[o++] = '\\';
		out[o++] = *in;
	}
	out[o] = '\0';
	return o;
}

/* Formats one stderr line for @level and the escaped @msg into line; returns its length. */
static int stderr_line(int level, const char *msg, char *line, size_t len)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char when[32], pfx[8] = "";
	int n;

	if (to_journal())
		snprintf(pfx, sizeof(pfx), "<%d>", prio[level]);
	if (atomic_load_explicit(&log_json, memory_order_relaxed)) {
		rfc3339(when, sizeof(when));
		n = snprintf(line, len, "%s{\"time\":\"%s\",\"level\":\"%s\",\"pid\":%d,\"msg\":\"",
			     pfx, when, level_names[level], (int)getpid());
		n += (int)json_body(msg, line + n, len - (size_t)n - 3);
		n += snprintf(line + n, len - (size_t)n, "\"}");
	} else if (atomic_load_explicit(&log_stamped, memory_order_relaxed) && !pfx[0]) {
		rfc3339(when, sizeof(when));
		n = snprintf(line, len, "%s mcfs: %s: %s", when, level_names[level], msg);
	} else {
		n = snprintf(line, len, "%smcfs: %s: %s", pfx, level_names[level], msg);
	}
	return MCFS_MIN(n, (int)len - 2);
}

void mcfs_log(int level, const char *fmt, ...)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char msg[2048], esc[2048], line[2560];
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
	mcfs_escape(msg, (size_t)m, esc, sizeof(esc));
	if (atomic_load_explicit(&log_syslog, memory_order_relaxed)) {
		syslog(prio[level], "%s", esc);
		return;
	}
	n = stderr_line(level, esc, line, sizeof(line));
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
