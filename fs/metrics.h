/*
 * metrics.h - the daemon's counters in the Prometheus text format (0.0.4),
 * served over HTTP on the address of the `metrics` key (host:port).
 *
 * The exporter owns one libmicrohttpd daemon with its own internal thread. A
 * scrape of GET /metrics takes a snapshot of the counters (fs_stats_get():
 * lock-free or briefly locked, never across I/O) and renders it; nothing is
 * kept between scrapes, so the exporter holds no lock of the cache and adds
 * nothing to the read path. The families are the counter table's
 * (cache/counters.h) plus the few fs/metrics.c works out from it.
 *
 * Threads: start and stop from main() only; scrapes run on the exporter's
 * thread and only read the session.
 */
#ifndef MCFS_FS_METRICS_H
#define MCFS_FS_METRICS_H

#include "mcfs.h"

struct fs_session;
struct fs_metrics;

/*
 * Starts serving s->cfg.metrics. With the key empty it does nothing and
 * returns 0 with *out = NULL (fs_metrics_stop(NULL) is then a no-op).
 * Otherwise binds only that address and returns 0 with *out set, or a
 * negative errno after logging why (-EADDRINUSE, -EADDRNOTAVAIL, -EACCES, or
 * -EINVAL for a host that does not resolve); *out is untouched on error.
 * @s is borrowed: s->cache must exist, and both outlive the exporter.
 */
MCFS_MUST_CHECK int fs_metrics_start(struct fs_session *s, struct fs_metrics **out);

/* Stops the server (waits for a scrape in progress) and frees it. NULL is fine. */
void fs_metrics_stop(struct fs_metrics *m);

#endif
