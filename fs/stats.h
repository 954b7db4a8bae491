/*
 * stats.h - the daemon's counters as the mount shows them, every rendering
 * generated from the one table, CACHE_COUNTERS (cache/counters.h):
 *
 *  - the root's user.mcfs.stats xattr: "key value" lines, one per row, in
 *    table order, after "pid"; and its parser, for `mcfs status`, which
 *    refuses a text that lacks a key rather than reading it as 0;
 *  - the Prometheus lines of every row that names a family (fs/metrics.c
 *    adds the families it derives from several rows);
 *  - the answer of user.mcfs.evict (bytes dropped per tier) and its parser,
 *    for `mcfs evict`.
 *
 * The daemon renders, the CLI parses: both are this mcfs binary, but the
 * daemon may be an older or newer one. Keys the parser does not know are
 * skipped (a newer daemon); keys it needs and does not find are an error
 * that names the key (an older one).
 *
 * Threads: fs_stats_get() may run on any thread; the rest are pure functions.
 */
#ifndef MCFS_FS_STATS_H
#define MCFS_FS_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cache_ram.h"
#include "cache_stats.h"
#include "mcfs.h"

struct fs_session;

#define FS_STATS_MEMBER(src, field, ...) FS_STATS_MEMBER_##src(field)
#define FS_STATS_MEMBER_CACHE(field)
#define FS_STATS_MEMBER_DISK(field)
#define FS_STATS_MEMBER_FS(field) uint64_t field;

/* One snapshot of every row of the table, wherever it is counted. */
struct fs_stats {
	uint64_t pid;			/* the daemon's: the xattr's first line, not a counter */
	struct cache_stats cache;	/* the CACHE and DISK rows (.disk), and the histograms */
	CACHE_COUNTERS(FS_STATS_MEMBER) /* the FS rows, copied from the session */
};

/* Takes the snapshot: cache_get_stats() and the session's counters. Can't fail. */
void fs_stats_get(struct fs_session *s, struct fs_stats *out);

/*
 * Renders @st as the user.mcfs.stats text into @buf (@len bytes, NUL ended
 * when it fits). Returns the text's length, which is >= @len when it was cut
 * short (as snprintf does).
 */
int fs_stats_text(const struct fs_stats *st, char *buf, size_t len);

/* fs_stats_get() then fs_stats_text(): the answer to getxattr user.mcfs.stats. */
int fs_stats_xattr(struct fs_session *s, char *buf, size_t len);

/*
 * Parses a user.mcfs.stats text (NUL ended) into *out; the histograms stay
 * 0. Returns 0; -ENOENT when a key of the table (or "pid") is missing; or
 * -EINVAL when its value is not a number. On error *key names that key
 * (static). *out is filled with what was found either way.
 */
MCFS_MUST_CHECK int fs_stats_parse(const char *text, struct fs_stats *out, const char **key);

/*
 * Writes the Prometheus text lines (HELP, TYPE, samples) of every family the
 * table names, each family once, its samples in table order; the DISK rows
 * only when there is a disk tier (disk_state != 0). Errors stay in @fp.
 */
void fs_stats_prom(FILE *fp, const struct fs_stats *st);

/* Longest answer of user.mcfs.evict, NUL not counted: what a size probe gets. */
#define FS_EVICT_TEXT_MAX                                                                          \
	(sizeof("ram_bytes 18446744073709551615\ndisk_bytes 18446744073709551615\n"                \
		"held_open 18446744073709551615\n") -                                              \
	 1)

/*
 * Renders what cache_evict_file() dropped as user.mcfs.evict's answer:
 * "ram_bytes N\ndisk_bytes N\nheld_open N\n". Returns the length, as fs_stats_text().
 */
int fs_evict_text(const struct cache_evicted *ev, char *buf, size_t len);

/* Parses that answer (held_open 0 when it lacks that line, as a daemon from before it
 * did). Returns 0, or -EINVAL for anything else (a much older daemon). */
MCFS_MUST_CHECK int fs_evict_parse(const char *text, struct cache_evicted *out);

#endif
