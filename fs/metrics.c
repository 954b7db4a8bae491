/*
 * metrics.c - Prometheus exporter: GET /metrics in text format 0.0.4.
 *
 * Design: libmicrohttpd runs the HTTP side (parsing, keep-alive, timeouts)
 * on one internal polling thread, bound to the one address of the `metrics`
 * key, so a scraper on another host sees nothing unless the operator names a
 * routable address. Each scrape copies the counters (fs_stats_get(): the
 * cache's, its store's and the session's) and renders them into a memory
 * stream that the response then owns; the exporter keeps no state between
 * scrapes. The plain counters and gauges are the counter table's
 * (cache/counters.h, rendered by fs_stats_prom()); here are only the
 * families worked out from several of them, the histograms (each with its
 * _sum and _count), and the standard process_* families from /proc.
 *
 * What it refuses to do: serve anything but GET/HEAD /metrics, expose the
 * source URL (it may carry credentials) or any configuration string.
 *
 * Naming follows the Prometheus conventions: counters end in _total, units
 * are base units (bytes, seconds), and one family per quantity with labels
 * where a quantity splits (tier, result).
 */
#define _GNU_SOURCE
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cache.h"
#include "cache_stats.h"
#include "fs_int.h"
#include "stats.h"

#define METRICS_PATH "/metrics"
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* A scraper or two plus a curl by hand; more is a misconfigured client. */
#define MAX_CONNECTIONS 16
/* Seconds an idle keep-alive connection is kept; scrapes are 15 s+ apart. */
#define CONN_TIMEOUT 10

struct fs_metrics {
	struct fs_session *s;	/* borrowed; outlives the exporter */
	struct MHD_Daemon *mhd; /* owns the listening socket and the thread */
	char addr[128];		/* as configured, for log lines */
	/* False while MHD_start_daemon() runs: its failures are logged once by
	 * fs_metrics_start() with the errno, so MHD's own line is debug only. */
	atomic_bool started;
};

/* Family header: HELP and TYPE lines. */
static void head(FILE *fp, const char *name, const char *type, const char *help)
{
	fprintf(fp, "# HELP mcfs_%s %s\n# TYPE mcfs_%s %s\n", name, help, name, type);
}

/* The same for a family of Prometheus' own names (process_*): no prefix. */
static void std_head(FILE *fp, const char *name, const char *type, const char *help)
{
	fprintf(fp, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* What render_proc() takes from /proc/self/stat (proc(5) numbers the fields). */
struct proc_stat {
	unsigned long long utime, stime; /* fields 14, 15: clock ticks */
	unsigned long long starttime;	 /* field 22: clock ticks after boot */
	unsigned long long vsize;	 /* field 23: bytes */
	long long rss;			 /* field 24: pages */
};

/*
 * Parses /proc/self/stat. The command name (field 2) is in parentheses and may
 * hold spaces and ')' itself, so the fields are counted from its last ')'.
 * Returns 0, or -EIO when the file cannot be read or parsed.
 */
static int proc_self_stat(struct proc_stat *ps)
{
	char buf[1024];
	const char *p;
	FILE *fp = fopen("/proc/self/stat", "re");
	size_t n;

	if (!fp)
		return -EIO;
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* after ')': field 3 (state) onwards; skip 3..13, read 14, 15, skip 16..21 */
	if (!p || sscanf(p + 1,
			 " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
			 "%*d %*d %llu %llu %lld",
			 &ps->utime, &ps->stime, &ps->starttime, &ps->vsize, &ps->rss) != 5)
		return -EIO;
	return 0;
}

/* The boot time in seconds since the epoch, from /proc/stat's btime line. */
static int boot_time(double *out)
{
	char line[256];
	unsigned long long bt;
	FILE *fp = fopen("/proc/stat", "re");
	int rc = -EIO;

	if (!fp)
		return -EIO;
	while (rc < 0 && fgets(line, sizeof(line), fp))
		if (sscanf(line, "btime %llu", &bt) == 1)
			rc = 0;
	fclose(fp);
	if (rc == 0)
		*out = (double)bt;
	return rc;
}

/* Open descriptors: the entries of /proc/self/fd, less the one reading it. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* Counters read without a common lock may be momentarily inconsistent. */
static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* A counter family split by result: the ok and the error sample. */
static void by_result(FILE *fp, const char *name, const char *help, uint64_t ok, uint64_t errors)
{
	head(fp, name, "counter", help);
	fprintf(fp, "mcfs_%s{result=\"ok\"} %" PRIu64 "\n", name, ok);
	fprintf(fp, "mcfs_%s{result=\"error\"} %" PRIu64 "\n", name, errors);
}

/*
 * The families that no one row of the counter table holds, because their
 * values are worked out from rows: every plain one comes from the table
 * (fs_stats_prom()).
 */
static void render_derived(FILE *fp, const struct fs_stats *st)
{
	const struct cache_stats *cs = &st->cache;

	by_result(fp, "fetches_total", "Block fetches from the store, by result.",
		  sub0(cs->fetches, cs->fetch_errors), cs->fetch_errors);
	by_result(fp, "store_requests_total",
		  "Store operations (stat, list, readlink, read), by final result after retries; "
		  "\"not found\" counts as ok.",
		  sub0(cs->store_requests, cs->store_errors), cs->store_errors);
	/* GPU loads (MCFS_IOC_LOAD); throughput is rate(bytes) / rate(seconds). */
	by_result(fp, "gpu_loads_total", "GPU loads served, by result.", st->gpu_loads,
		  st->gpu_load_errors);
	head(fp, "gpu_load_seconds_total", "counter", "Seconds spent in GPU loads that succeeded.");
	fprintf(fp, "mcfs_gpu_load_seconds_total %.6f\n", (double)st->gpu_load_ns / 1e9);
	if (cs->disk_state != 0) {
		head(fp, "disk_full", "gauge", "1 when the cache disk filled up (RAM only since).");
		fprintf(fp, "mcfs_disk_full %d\n", cs->disk_state == 2);
	}
}

static void render_fetch_latency(FILE *fp, const struct cache_stats *st)
{
	static const double bounds[CACHE_LAT_BUCKETS] = CACHE_LAT_BOUNDS;
	uint64_t cum = 0;
	int i;

	head(fp, "fetch_duration_seconds", "histogram",
	     "Time to fetch one block from the store, done or failed.");
	for (i = 0; i < CACHE_LAT_BUCKETS; i++) {
		cum += st->fetch_lat[i];
		if (i == CACHE_LAT_BUCKETS - 1)
			fprintf(fp, "mcfs_fetch_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
				(unsigned long long)cum);
		else
			fprintf(fp, "mcfs_fetch_duration_seconds_bucket{le=\"%g\"} %llu\n",
				bounds[i], (unsigned long long)cum);
	}
	fprintf(fp, "mcfs_fetch_duration_seconds_sum %.9f\n", st->fetch_lat_sum);
	fprintf(fp, "mcfs_fetch_duration_seconds_count %llu\n", (unsigned long long)cum);
}

/*
 * Bucket i of ra_window counts windows of at most 2^i blocks (and more than
 * 2^(i-1)), as cache_note_window() files them; the last bucket takes the rest.
 */
static void render_readahead(FILE *fp, const struct cache_stats *st)
{
	uint64_t cum = 0;
	int i;

	head(fp, "readahead_window_blocks", "histogram",
	     "Readahead window sizes, in blocks, as streams grow them.");
	for (i = 0; i < CACHE_RA_BUCKETS; i++) {
		cum += st->ra_window[i];
		if (i == CACHE_RA_BUCKETS - 1)
			fprintf(fp, "mcfs_readahead_window_blocks_bucket{le=\"+Inf\"} %llu\n",
				(unsigned long long)cum);
		else
			fprintf(fp, "mcfs_readahead_window_blocks_bucket{le=\"%llu\"} %llu\n",
				1ull << i, (unsigned long long)cum);
	}
	fprintf(fp, "mcfs_readahead_window_blocks_sum %llu\n",
		(unsigned long long)st->ra_window_sum);
	fprintf(fp, "mcfs_readahead_window_blocks_count %llu\n", (unsigned long long)cum);
}

/*
 * The standard process collector's families, with its names (no mcfs_
 * prefix) and meanings, so the dashboards and alerts written for every other
 * exporter work: CPU seconds (user + system) and the start time from
 * /proc/self/stat, resident and virtual memory from the same line, open
 * descriptors by counting /proc/self/fd, and their limit. A family whose
 * source cannot be read is left out rather than shown as 0.
 */
static void render_proc(FILE *fp)
{
	double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
	struct proc_stat ps;
	struct rlimit rl;
	double boot;
	int fds;

	if (proc_self_stat(&ps) == 0) {
		std_head(fp, "process_cpu_seconds_total", "counter",
			 "Total user and system CPU time spent in seconds.");
		fprintf(fp, "process_cpu_seconds_total %.2f\n",
			(double)(ps.utime + ps.stime) / tick);
		std_head(fp, "process_resident_memory_bytes", "gauge",
			 "Resident memory size in bytes.");
		fprintf(fp, "process_resident_memory_bytes %.0f\n", (double)ps.rss * page);
		std_head(fp, "process_virtual_memory_bytes", "gauge",
			 "Virtual memory size in bytes.");
		fprintf(fp, "process_virtual_memory_bytes %llu\n", ps.vsize);
		if (boot_time(&boot) == 0) {
			std_head(fp, "process_start_time_seconds", "gauge",
				 "Start time of the process since unix epoch in seconds.");
			fprintf(fp, "process_start_time_seconds %.2f\n",
				boot + (double)ps.starttime / tick);
		}
	}
	fds = count_fds();
	if (fds >= 0) {
		std_head(fp, "process_open_fds", "gauge", "Number of open file descriptors.");
		fprintf(fp, "process_open_fds %d\n", fds);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		std_head(fp, "process_max_fds", "gauge",
			 "Maximum number of open file descriptors.");
		fprintf(fp, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
	}
}

static void render_process(FILE *fp, const struct fs_session *s)
{
	head(fp, "build_info", "gauge", "Version and store kind of this daemon; always 1.");
	fprintf(fp, "mcfs_build_info{version=\"%s\",store=\"%s\"} 1\n", MCFS_VERSION,
		cache_store_kind(s->cache));
	head(fp, "uptime_seconds", "gauge", "Seconds since the file system was mounted.");
	fprintf(fp, "mcfs_uptime_seconds %.3f\n", (double)(mcfs_now_ns() - s->started_ns) / 1e9);
}

/* Renders the whole exposition. Returns 0 with *buf (caller frees) or -ENOMEM. */
static int render(struct fs_session *s, char **buf, size_t *len)
{
	struct fs_stats st;
	FILE *fp;

	fp = open_memstream(buf, len);
	if (!fp)
		return -ENOMEM;
	fs_stats_get(s, &st);
	render_process(fp, s);
	render_proc(fp);
	fs_stats_prom(fp, &st);
	render_derived(fp, &st);
	render_fetch_latency(fp, &st.cache);
	render_readahead(fp, &st.cache);
	if (ferror(fp)) {
		fclose(fp);
		free(*buf);
		return -ENOMEM;
	}
	if (fclose(fp) != 0) {
		free(*buf);
		return -ENOMEM;
	}
	return 0;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code, const char *text)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **req_cls)
{
	struct fs_metrics *m = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *buf = NULL;
	size_t len = 0;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)req_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
	if (strcmp(url, METRICS_PATH) != 0)
		return reply_text(conn, MHD_HTTP_NOT_FOUND, "mcfs serves " METRICS_PATH "\n");
	if (render(m->s, &buf, &len) < 0)
		return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	/* MHD frees buf with free() when the response is destroyed. */
	resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* libmicrohttpd's own messages (bind failures among them) go to our log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct fs_metrics *m = cls;
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	if (atomic_load(&m->started))
		MCFS_WARN("metrics %s: %s", m->addr, line);
	else
		MCFS_DEBUG("metrics %s: %s", m->addr, line);
}

/*
 * Splits "host:port" or "[v6addr]:port" and resolves it to one numeric
 * address (no DNS beyond /etc/hosts-style names such as localhost is
 * expected). Returns 0 with *res (free with freeaddrinfo) or -EINVAL.
 */
static int resolve(const char *addr, struct addrinfo **res)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	char host[128];
	const char *colon = strrchr(addr, ':');
	size_t hlen;
	int rc;

	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	hlen = (size_t)(colon - addr);
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
		memmove(host, host + 1, hlen - 2);
		host[hlen - 2] = '\0';
	}
	rc = getaddrinfo(host, colon + 1, &hints, res);
	if (rc != 0) {
		MCFS_ERR("metrics: cannot resolve '%s': %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	return 0;
}

int fs_metrics_start(struct fs_session *s, struct fs_metrics **out)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
	struct addrinfo *ai;
	struct fs_metrics *m;
	int rc;

	if (s->cfg.metrics[0] == '\0') {
		*out = NULL;
		return 0;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->s = s;
	snprintf(m->addr, sizeof(m->addr), "%s", s->cfg.metrics);
	rc = resolve(m->addr, &ai);
	if (rc < 0) {
		free(m);
		return rc;
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	errno = 0;
	m->mhd =
	    MHD_start_daemon(flags, 0, NULL, NULL, handle, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
			     m, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
			     (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
			     (unsigned)CONN_TIMEOUT, MHD_OPTION_END);
	/* libmicrohttpd leaves the failing call's errno (bind's, listen's) in errno. */
	rc = errno ? -errno : -EADDRNOTAVAIL;
	freeaddrinfo(ai);
	if (!m->mhd) {
		MCFS_ERR("metrics: cannot serve on %s: %s", m->addr, strerror(-rc));
		free(m);
		return rc;
	}
	atomic_store(&m->started, true);
	MCFS_INFO("metrics: serving Prometheus text on http://%s%s", m->addr, METRICS_PATH);
	*out = m;
	return 0;
}

void fs_metrics_stop(struct fs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->mhd);
	free(m);
}
