/*
 * cache_stats.h - a snapshot of every counter of the cache, its tiers and its
 * store, with the two histograms that no row of the counter table can hold.
 * What each counter means: cache/counters.h. The renderings (the
 * user.mcfs.stats xattr, `mcfs status`, Prometheus) are fs/'s.
 */
#ifndef MCFS_CACHE_STATS_H
#define MCFS_CACHE_STATS_H

#include <stdint.h>

#include "counters.h"

struct cache;

/* Upper bounds (seconds) of the fetch-latency histogram buckets; the last is +Inf. */
#define CACHE_LAT_BUCKETS 12
#define CACHE_LAT_BOUNDS                                                                           \
	{                                                                                          \
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 1e300           \
	}
/* Readahead window histogram: bucket i counts windows of at most 2^i blocks, at growth. */
#define CACHE_RA_BUCKETS 12

/* ram_prefault's progress (cache.c): off (or unsupported), running, done, or
 * stopped short because the node ran low on memory. */
enum cache_prefault_state {
	CACHE_PREFAULT_OFF = 0,
	CACHE_PREFAULT_RUNNING = 1,
	CACHE_PREFAULT_DONE = 2,
	CACHE_PREFAULT_STOPPED = 3,
};

/*
 * A snapshot of the counters: one member per CACHE row of CACHE_COUNTERS
 * (cache/counters.h, which says what each means), the disk tier's DISK rows
 * in .disk, and the two histograms, which no row can hold.
 */
struct cache_stats {
	CACHE_COUNTERS(CACHE_CTR_MEMBER)
	struct cache_disk_stats disk;	       /* all 0 when there is no disk tier */
	uint64_t fetch_lat[CACHE_LAT_BUCKETS]; /* fetches by latency, non-cumulative */
	double fetch_lat_sum;		       /* seconds, all fetches */
	uint64_t ra_window[CACHE_RA_BUCKETS];  /* window sizes seen (log2 buckets) */
	uint64_t ra_window_sum;		       /* blocks, all windows seen */
};

/* A snapshot of every counter of the cache, its tiers and its store. Can't fail. */
void cache_get_stats(struct cache *c, struct cache_stats *out);

#endif
