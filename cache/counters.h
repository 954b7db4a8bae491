/*
 * counters.h - every counter of the daemon, declared once.
 *
 * CACHE_COUNTERS(X) below is the one table. Each row is
 *
 *	X(src, field, key, type, prom, label, help)
 *
 *   src    where the value is counted, and so the struct that holds it:
 *	      CACHE  struct cache_stats, by cache/ (blocks.c, tiers.c, read.c,
 *		     and the store's counters, which cache_get_stats() copies in);
 *	      DISK   struct cache_disk_stats, by the disk tier (disk.c), reached
 *		     as cache_stats.disk; 0 when there is no disk tier;
 *	      FS     struct fs_session, by fs/ (a relaxed atomic each).
 *   field  the member of that struct. The structs' counter members are
 *	    generated from the table (CACHE and DISK here, FS in fs/fs_int.h),
 *	    so a row is all it takes to declare one.
 *   key    its line in the root's user.mcfs.stats xattr ("key value"), which
 *	    `mcfs status` parses back (fs/stats.c). The lines come in table
 *	    order, and scripts read them by name: never rename or reorder a
 *	    key; add new rows at the end.
 *   type   COUNTER (only grows) or GAUGE (a level, or a state code).
 *   prom   its Prometheus family without the "mcfs_" prefix, or NULL when the
 *	    value is not exported as it is (fs/metrics.c renders those that
 *	    it derives from several rows: totals split by result, seconds from
 *	    nanoseconds, disk_full from disk_state). Counters end in _total.
 *   label  the sample's label pair within its family (tier="ram"), or NULL.
 *	    Rows of one family share its type and help; DISK rows are
 *	    exported only when there is a disk tier.
 *   help   what the value means: the family's HELP line, and the key's
 *	    documentation.
 *
 * Why here: the architecture gives the counters to cache/, and fs/ may read
 * cache/'s public headers while cache/ must know nothing of fs/. So the
 * table lives in cache/ and names fs/'s counters (the FS rows) only as
 * text: cache/ never expands those rows, fs/ generates its session's
 * fields from them. The renderings, all of them generated from the table
 * (the xattr text and its parser, the Prometheus lines), are fs/'s, in
 * fs/stats.c, since they are what the mount shows.
 *
 * The store's counters (store_*) are CACHE rows, not a struct embedded like
 * the disk tier's: struct remote_stats belongs to cache/remote, whose header
 * nothing outside cache/ may see, so cache_get_stats() copies its five
 * fields over.
 */
#ifndef MCFS_CACHE_COUNTERS_H
#define MCFS_CACHE_COUNTERS_H

#include <stdbool.h>
#include <stdint.h>

enum cache_counter_type {
	CACHE_COUNTER, /* only grows while the daemon runs */
	CACHE_GAUGE,   /* goes up and down */
};

#define CACHE_TIER_RAM "tier=\"ram\""
#define CACHE_TIER_DISK "tier=\"disk\""
#define CACHE_TIER_SHARED "tier=\"shared\""

/* clang-format off */
#define CACHE_COUNTERS(X)                                                                          \
	X(CACHE, block_size, "block_size", GAUGE, "cache_block_size_bytes", NULL,                  \
	  "The unit fetched, cached and evicted.")                                                 \
	X(CACHE, slots, "slots", GAUGE, "cache_slots", CACHE_TIER_RAM,                             \
	  "Block slots of a cache tier.")                                                          \
	X(CACHE, slots_used, "slots_used", GAUGE, "cache_slots_used", CACHE_TIER_RAM,              \
	  "Slots holding a block, loading or ready.")                                              \
	X(CACHE, hits, "hits", COUNTER, "cache_hits_total", CACHE_TIER_RAM,                        \
	  "Block gets answered from a cache tier.")                                                \
	X(CACHE, misses, "misses", COUNTER, "cache_misses_total", CACHE_TIER_RAM,                  \
	  "Block gets a cache tier did not hold (the disk tier's went to the store).")             \
	X(CACHE, waits, "waits", COUNTER, "cache_waits_total", NULL,                               \
	  "Block gets that joined a fetch already in flight (single flight).")                     \
	X(CACHE, evictions, "evictions", COUNTER, "cache_evictions_total", CACHE_TIER_RAM,         \
	  "Blocks dropped for room.")                                                              \
	X(CACHE, fetches, "fetches", COUNTER, NULL, NULL,                                          \
	  "Block fetches from the store, done or failed (Prometheus: fetches_total by result).")   \
	X(CACHE, fetch_errors, "fetch_errors", COUNTER, NULL, NULL,                                \
	  "Block fetches from the store that failed.")                                             \
	X(CACHE, fetched_bytes, "fetched_bytes", COUNTER, "fetched_bytes_total", NULL,             \
	  "Bytes of blocks fetched from the store.")                                               \
	X(CACHE, prefetches, "prefetches", COUNTER, "prefetches_total", NULL,                      \
	  "Fetches started by readahead or prefetch.")                                             \
	X(CACHE, prefetch_unused, "prefetch_unused", COUNTER, "prefetch_unused_total", NULL,       \
	  "Prefetched blocks evicted before any read.")                                            \
	X(CACHE, inflight, "inflight", GAUGE, "fetches_inflight", NULL,                            \
	  "Block fetches running now.")                                                            \
	X(CACHE, store_requests, "store_requests", COUNTER, NULL, NULL,                            \
	  "Store operations (stat, list, readlink, read) issued, retries included "               \
	  "(Prometheus: store_requests_total by result).")                                         \
	X(CACHE, store_reads, "store_reads", COUNTER, "store_read_requests_total", NULL,           \
	  "Ranged reads issued to the store.")                                                     \
	X(CACHE, store_bytes, "store_bytes", COUNTER, "store_read_bytes_total", NULL,              \
	  "Bytes received by reads from the store.")                                               \
	X(CACHE, store_errors, "store_errors", COUNTER, NULL, NULL,                                \
	  "Store operations that failed for good.")                                                \
	X(CACHE, store_retries, "store_retries", COUNTER, "store_retries_total", NULL,             \
	  "Store attempts retried after an error.")                                                \
	X(CACHE, reads, "fuse_reads", COUNTER, "fuse_read_requests_total", NULL,                      \
	  "FUSE read requests answered with data.")                                                \
	X(CACHE, read_bytes, "fuse_read_bytes", COUNTER, "fuse_read_bytes_total", NULL,               \
	  "Bytes of the FUSE read replies.")                                                       \
	X(CACHE, ram_prefault, "ram_prefault", GAUGE, NULL, NULL,                                  \
	  "ram_prefault's progress: enum cache_prefault_state (0 off, 1 running, 2 done, "         \
	  "3 stopped on low memory).")                                                             \
	X(CACHE, ram_faulted_bytes, "ram_faulted_bytes", GAUGE, "cache_ram_faulted_bytes", NULL,   \
	  "RAM-tier bytes faulted in by ram_prefault (its memory is committed).")                  \
	X(CACHE, disk_state, "disk_state", GAUGE, NULL, NULL,                                      \
	  "The disk tier: 0 off (disk_off_reason says why), 1 on, 2 full (ENOSPC: RAM only "       \
	  "since; Prometheus: disk_full).")                                                        \
	X(DISK, slots, "disk_slots", GAUGE, "cache_slots", CACHE_TIER_DISK,                        \
	  "Block slots of a cache tier.")                                                          \
	X(DISK, slots_used, "disk_slots_used", GAUGE, "cache_slots_used", CACHE_TIER_DISK,         \
	  "Slots holding a block, loading or ready.")                                              \
	X(DISK, bytes_limit, "disk_bytes_limit", GAUGE, "cache_capacity_bytes", CACHE_TIER_DISK,   \
	  "Size of a cache tier.")                                                                 \
	X(DISK, bytes_used, "disk_bytes_used", GAUGE, "cache_used_bytes", CACHE_TIER_DISK,         \
	  "Bytes of a cache tier holding blocks (whole slots).")                                   \
	X(DISK, hits, "disk_hits", COUNTER, "cache_hits_total", CACHE_TIER_DISK,                   \
	  "Block gets answered from a cache tier.")                                                \
	X(DISK, misses, "disk_misses", COUNTER, "cache_misses_total", CACHE_TIER_DISK,             \
	  "Block gets a cache tier did not hold (the disk tier's went to the store).")             \
	X(DISK, read_bytes, "disk_read_bytes", COUNTER, "disk_read_bytes_total", NULL,             \
	  "Bytes read from the disk tier.")                                                        \
	X(DISK, writes, "disk_writes", COUNTER, "disk_writes_total", NULL,                         \
	  "Blocks written behind to the disk tier.")                                               \
	X(DISK, written_bytes, "disk_written_bytes", COUNTER, "disk_written_bytes_total", NULL,    \
	  "Bytes written behind to the disk tier.")                                                \
	X(DISK, write_drops, "disk_write_drops", COUNTER, "disk_write_drops_total", NULL,          \
	  "Blocks not written behind (queue full or write failed).")                               \
	X(DISK, csum_errors, "disk_csum_errors", COUNTER, "disk_checksum_errors_total", NULL,      \
	  "Disk blocks that failed their checksum (dropped and fetched again).")                   \
	X(DISK, io_errors, "disk_io_errors", COUNTER, "disk_io_errors_total", NULL,                \
	  "Disk tier reads or writes that failed.")                                                \
	X(DISK, evictions, "disk_evictions", COUNTER, "cache_evictions_total", CACHE_TIER_DISK,    \
	  "Blocks dropped for room.")                                                              \
	X(DISK, queued, "disk_queued", GAUGE, "disk_write_queue", NULL,                            \
	  "Write-behind jobs queued or being written.")                                            \
	/* ---- rows added after the keys above were published: append only ---- */              \
	X(CACHE, prefetch_bytes, "prefetch_bytes", GAUGE, "prefetch_bytes", NULL,                  \
	  "Readahead memory in use (budget: prefetch_mem).")                                       \
	X(CACHE, ram_bytes_limit, "ram_bytes_limit", GAUGE, "cache_capacity_bytes", CACHE_TIER_RAM,\
	  "Size of a cache tier.")                                                                 \
	X(CACHE, ram_bytes_used, "ram_bytes_used", GAUGE, "cache_used_bytes", CACHE_TIER_RAM,      \
	  "Bytes of a cache tier holding blocks (whole slots).")                                   \
	X(CACHE, disk_off_reason, "disk_off_reason", GAUGE, NULL, NULL,                            \
	  "Why there is no disk tier: enum cache_disk_off (0 while there is one).")                \
	X(CACHE, disk_off_errno, "disk_off_errno", GAUGE, NULL, NULL,                              \
	  "The errno that left the disk tier off, or 0.")                                          \
	X(FS, gpu_loads, "gpu_loads", COUNTER, NULL, NULL,                                         \
	  "GPU loads served (Prometheus: gpu_loads_total by result).")                             \
	X(FS, gpu_load_errors, "gpu_load_errors", COUNTER, NULL, NULL,                             \
	  "GPU loads that failed.")                                                                \
	X(FS, gpu_load_bytes, "gpu_load_bytes", COUNTER, "gpu_load_bytes_total", NULL,             \
	  "Bytes copied to GPU memory by loads.")                                                  \
	X(FS, gpu_load_ns, "gpu_load_ns", COUNTER, NULL, NULL,                                     \
	  "Nanoseconds spent in GPU loads that succeeded (Prometheus: gpu_load_seconds_total).")  \
	X(FS, gpu_rows_gathered, "gpu_rows_gathered", COUNTER, NULL, NULL,                         \
	  "Rows of slices that a block's end cut, gathered on the CPU and copied in runs.")        \
	X(FS, gpu_devices, "gpu_devices", GAUGE, "gpu_devices", NULL,                              \
	  "CUDA devices the daemon can load into (0: no GPU path).")                               \
	X(FS, gpu_ready, "gpu_ready", GAUGE, "gpu_devices_ready", NULL,                            \
	  "Devices prepared at start: context made and the pinned RAM tier mapped (gpu_prepare).") \
	X(FS, gpu_pinned_bytes, "gpu_pinned_bytes", GAUGE, "gpu_pinned_bytes", NULL,               \
	  "Bytes of the RAM tier registered with CUDA (pinned) so far.")                           \
	X(FS, fuse_max_request, "fuse_max_request", GAUGE, "fuse_max_request_bytes", NULL,         \
	  "Bytes one FUSE READ may ask for, as FUSE INIT granted (0 before INIT).")                \
	X(FS, fuse_io_uring, "fuse_io_uring", GAUGE, "fuse_io_uring", NULL,                        \
	  "1 once a request came over FUSE io_uring, else 0.")                                     \
	X(CACHE, backing_files, "backing_files", GAUGE, "backing_files", NULL,                     \
	  "Complete file versions verified whole as backing files for FUSE passthrough.")                      \
	X(CACHE, backing_bytes, "backing_bytes", GAUGE, "backing_bytes", NULL,                     \
	  "Bytes of those versions (their own files in the disk tier: no second copy).")            \
	X(CACHE, backing_builds, "backing_builds", COUNTER, "backing_builds_total", NULL,          \
	  "Versions verified (every block against its checksum) as backing files.")                                          \
	X(FS, passthrough, "passthrough", GAUGE, "fuse_passthrough", NULL,                         \
	  "1 when FUSE passthrough was agreed with the kernel, else 0.")                           \
	X(FS, passthrough_opens, "passthrough_opens", COUNTER, "passthrough_opens_total", NULL,    \
	  "Opens answered with passthrough: the kernel reads the backing file itself.")            \
	X(FS, passthrough_fallbacks, "passthrough_fallbacks", COUNTER,                             \
	  "passthrough_fallbacks_total", NULL,                                                     \
	  "Opens of a complete file that went through the cache instead (cached opens of the "     \
	  "inode, another version open, or the kernel refused the backing file).")                \
	X(FS, open_files, "open_files", GAUGE, "open_files", NULL,                                 \
	  "Files open through the mount now: opens whose release has not come yet (the kernel "    \
	  "sends a release after the last close and unmap, asynchronously).")                      \
	X(FS, cold_direct_opens, "cold_direct_opens", COUNTER, "cold_direct_opens_total", NULL,    \
	  "Opens of a file not complete in the cache answered with direct_io (cold_direct_io): "   \
	  "their reads bypass the page cache.")                                                    \
	X(FS, push_files, "push_files", COUNTER, "push_files_total", NULL,                         \
	  "Cold files pushed into the page cache ahead of their reader (cold_push).")              \
	X(FS, push_active, "push_active", GAUGE, "push_active", NULL,                              \
	  "Pushes with blocks left to push (their opens are open).")                               \
	X(FS, push_blocks, "push_blocks", COUNTER, "push_blocks_total", NULL,                      \
	  "Blocks pushed into the page cache (FUSE_NOTIFY_STORE).")                                \
	X(FS, push_bytes, "push_bytes", COUNTER, "push_bytes_total", NULL,                         \
	  "Bytes pushed into the page cache.")                                                     \
	X(FS, push_errors, "push_errors", COUNTER, "push_errors_total", NULL,                      \
	  "Blocks a push could not fetch or the kernel refused (the reader reads them itself).")   \
	X(CACHE, open_checks, "open_checks", COUNTER, "open_checks_total", NULL,                   \
	  "Opens whose file version the store confirmed (open_check=always: a stat or one HEAD "   \
	  "each).")                                                                                \
	X(CACHE, offline_opens, "offline_opens", COUNTER, "offline_opens_total", NULL,             \
	  "Opens the store did not answer, served offline with the version recorded in "           \
	  "cache_dir, unconfirmed.")                                                                      \
	X(CACHE, shared_state, "shared_state", GAUGE, "shared_cache_state", NULL,                  \
	  "The shared cache tier: 0 off, 1 up, 2 down (reads go to the store), 3 up but "          \
	  "refusing writes.")                                                                      \
	X(CACHE, shared_hits, "shared_hits", COUNTER, "cache_hits_total", CACHE_TIER_SHARED,       \
	  "Block gets answered from a cache tier.")                                                \
	X(CACHE, shared_misses, "shared_misses", COUNTER, "cache_misses_total", CACHE_TIER_SHARED, \
	  "Block gets a cache tier did not hold (the disk tier's went to the store).")             \
	X(CACHE, shared_read_bytes, "shared_read_bytes", COUNTER, "shared_read_bytes_total", NULL, \
	  "Bytes of verified blocks read from the shared cache.")                                  \
	X(CACHE, shared_waits, "shared_waits", COUNTER, "shared_waits_total", NULL,                \
	  "Shared hits that waited for another node's fetch of the block (its lease).")            \
	X(CACHE, shared_wait_timeouts, "shared_wait_timeouts", COUNTER,                            \
	  "shared_wait_timeouts_total", NULL,                                                      \
	  "Waits for another node's blocks that ended without them (fetched here): runs taken "    \
	  "over from a node whose lease showed no progress, blocks not written within twice "      \
	  "shared_wait.")                                                                          \
	X(CACHE, shared_puts, "shared_puts", COUNTER, "shared_puts_total", NULL,                   \
	  "Blocks written to the shared cache.")                                                   \
	X(CACHE, shared_put_bytes, "shared_put_bytes", COUNTER, "shared_put_bytes_total", NULL,    \
	  "Bytes of blocks written to the shared cache (trailers not counted).")                   \
	X(CACHE, shared_put_skips, "shared_put_skips", COUNTER, "shared_put_skips_total", NULL,    \
	  "Blocks not written because the shared cache held them already.")                        \
	X(CACHE, shared_leases, "shared_leases", COUNTER, "shared_leases_total", NULL,            \
	  "Runs of blocks whose lease this node took: it fetches them from the store and writes "  \
	  "them, and other nodes wait for them.")                                                   \
	X(CACHE, shared_put_waits, "shared_put_waits", COUNTER, "shared_put_waits_total", NULL,    \
	  "Writes of leased blocks that waited for room in the full write queue (the fetch "       \
	  "thread waits, up to shared_wait).")                                                      \
	X(CACHE, shared_put_drops, "shared_put_drops", COUNTER, "shared_put_drops_total", NULL,    \
	  "Blocks not written: the queue was full, the tier down or refusing, or the PUT failed.") \
	X(CACHE, shared_corrupt, "shared_corrupt", COUNTER, "shared_corrupt_total", NULL,          \
	  "Shared objects refused as not a sealed block (wrong size, no trailer, another "         \
	  "length): fetched from the store, written over.")                                        \
	X(CACHE, shared_unauthentic, "shared_unauthentic", COUNTER, "shared_unauthentic_total",    \
	  NULL,                                                                                    \
	  "Shared blocks refused because their seal did not match shared_key_file (forged, "       \
	  "written by a node with another key, or damaged): fetched from the store, written "      \
	  "over.")                                                                                 \
	X(CACHE, shared_errors, "shared_errors", COUNTER, "shared_errors_total", NULL,             \
	  "Shared cache requests that failed (no answer, a timeout, a 5xx, a refusal).")           \
	X(CACHE, shared_queued, "shared_queued", GAUGE, "shared_put_queue", NULL,                  \
	  "Writes to the shared cache queued or in flight.")                                       \
	X(FS, inode_renumbers, "inode_renumbers", COUNTER, "inode_renumbers_total", NULL,          \
	  "Files given a new inode number because the store replaced them while passthrough "      \
	  "opens of the old version lasted (those keep the old inode and its bytes).")             \
	X(FS, inodes_retired, "inodes_retired", GAUGE, "inodes_retired", NULL,                     \
	  "Inodes of replaced versions the kernel still holds (open files, or lookups not yet "    \
	  "forgotten); each is freed at its last FORGET.")                                         \
	X(CACHE, backing_build_errors, "backing_build_errors", COUNTER,                            \
	  "backing_build_errors_total", NULL,                                                      \
	  "Backing-file verifications that found a bad block (dropped and logged; its opens read " \
	  "through the cache until it is whole and good again).")                                         \
	X(CACHE, file_identities, "file_identities", GAUGE, "file_identities", NULL,               \
	  "File versions the cache knows now: those open, loading or with a block in the RAM "     \
	  "tier (the others are freed).")                                                          \
	X(CACHE, meta_map_bytes, "meta_map_bytes", GAUGE, "meta_map_bytes", NULL,                  \
	  "Size of the metadata store's map in cache_dir (meta_map_size, or more for a large "     \
	  "disk tier's index; 0 without one).")                                                    \
	X(CACHE, meta_used_bytes, "meta_used_bytes", GAUGE, "meta_used_bytes", NULL,               \
	  "Bytes of the metadata store's map its records use; kept under half of the map.")        \
	X(CACHE, meta_prunes, "meta_prunes", COUNTER, "meta_prunes_total", NULL,                   \
	  "Times the older generation of recorded attributes and listings was dropped to keep "    \
	  "the metadata store under half its map (asked of the store again when needed).")         \
	X(FS, inodes_live, "inodes", GAUGE, "inodes", NULL,                                        \
	  "Inode-table nodes: those the kernel or an open holds, and a bounded number of others "  \
	  "(recent answers, \"no such name\" among them: docs/architecture.md).")               \
	X(CACHE, ram_numa_nodes, "ram_numa_nodes", GAUGE, "cache_ram_numa_nodes", NULL,            \
	  "NUMA nodes the RAM tier's memory is placed on, near the GPUs (1: a one-node host, no "  \
	  "placement; 0: not known or refused; the start-up log line says how).")               \
	X(CACHE, ram_background_slots, "ram_background_slots", GAUGE, "cache_ram_background_slots", \
	  NULL,                                                                                    \
	  "RAM-tier slots background claims hold now: fetch jobs of readahead, a GPU load's lead " \
	  "or warm-up, and write-behind to the disk and shared tiers.")                            \
	X(CACHE, ram_budget_refusals, "ram_budget_refusals", COUNTER,                              \
	  "cache_ram_budget_refusals_total", NULL,                                                 \
	  "Background fetches refused by the RAM tier's budget: background held half the slots, " \
	  "or a reader waited for one (tried again later).")                                       \
	X(CACHE, gpu_window_waits, "gpu_window_waits", COUNTER, "gpu_window_waits_total", NULL,    \
	  "GPU loads that waited their turn for a window of RAM-tier slots (GPU loads hold a "     \
	  "quarter of the slots at most).")                                                        \
	X(DISK, indexed, "disk_indexed", COUNTER, "disk_indexed_total", NULL,                      \
	  "Blocks written behind whose index entries are committed: a restart, or a crash, "       \
	  "finds them (disk_writes counts them before that commit).")                              \
	X(CACHE, disk_owed, "disk_owed", GAUGE, "write_behind_owed_blocks", NULL,                    \
	  "Blocks in the RAM tier the disk tier lacks, waiting for room in the write-behind "      \
	  "queue (a fetch never waits for the cache disk).")                                       \
	X(CACHE, disk_deferred, "disk_deferred", COUNTER, "write_behind_deferred_total", NULL,           \
	  "Blocks whose write-behind found the queue full and waited in the RAM tier (owed).")     \
	X(CACHE, whole_opens, "whole_opens", COUNTER, "cold_whole_opens_total", NULL,              \
	  "Opens of a file not whole in the disk tier that fetched it whole first, then read it "  \
	  "through passthrough (cold_whole).")                                                     \
	X(CACHE, whole_fallbacks, "whole_fallbacks", COUNTER, "cold_whole_fallbacks_total", NULL,  \
	  "Opens whose whole fetch could not finish (a failed fetch, no room): they read through " \
	  "the cache.")                                                                            \
	X(CACHE, whole_background, "whole_background", COUNTER,                                   \
	  "cold_whole_background_files_total", NULL,                                               \
	  "Files of a cold open's directory fetched whole in the background before their own "     \
	  "open (cold_whole=model).")                                                              \
	X(CACHE, disk_owed_dropped, "disk_owed_dropped", COUNTER, "write_behind_owed_dropped_total",      \
	  NULL,                                                                                    \
	  "Owed blocks that left the RAM tier before the disk writer had room for them (fetched " \
	  "again when next read, and written then).")                                            \
	X(CACHE, shared_parked, "shared_parked", GAUGE, "shared_parked_blocks", NULL,              \
	  "Blocks parked while another node fetches them (no fetch thread waits for them).")       \
	X(FS, push_kept_opens, "push_kept_opens", COUNTER, "push_kept_opens_total", NULL,          \
	  "Opens of a complete file kept in the page cache a push filled whole, not passthrough "  \
	  "(whose backing file the disk tier wrote around the page cache).")                      \
	X(CACHE, whole_mem_opens, "whole_mem_opens", COUNTER, "cold_whole_mem_opens_total", NULL,  \
	  "Opens that waited for a copy of their file in memory, not for its file in cache_dir "   \
	  "(whole_mem), then read it through passthrough.")                                        \
	X(CACHE, whole_mem_bytes, "whole_mem_bytes", GAUGE, "cold_whole_mem_bytes", NULL,          \
	  "Bytes of the copies in memory held now (whole_mem): each goes at its file's last "      \
	  "close.")                                                                                \
	X(DISK, writer_busy_ns, "disk_writer_busy_ns", COUNTER, NULL, NULL,                        \
	  "Nanoseconds the disk writer threads spent on their jobs (open, fallocate, checksum, "   \
	  "write), summed over the threads: against disk_writers times a span of wall time, how "  \
	  "busy they were.")                                                                       \
	X(DISK, writer_hash_ns, "disk_writer_hash_ns", COUNTER, NULL, NULL,                        \
	  "Of disk_writer_busy_ns, the checksums (XXH3-64 of each block).")                        \
	X(DISK, writer_capped, "disk_writer_capped", COUNTER, NULL, NULL,                          \
	  "Times a disk writer thread slept while jobs were ready, every one of them for a "       \
	  "version file that as many writers as one file may have were writing already.")         \
	X(DISK, writer_own_ns, "disk_writer_own_ns", COUNTER, NULL, NULL,                          \
	  "Nanoseconds the disk tier's own writer thread spent on its steps between the writes: "  \
	  "taking jobs (the victims' index deletions and punches), publishing written ones (the "  \
	  "index commit, each job's done()) and syncing the index. One thread: near the wall "     \
	  "time, it holds the writes up.")                                                         \
	X(CACHE, fetch_busy_ns, "fetch_busy_ns", COUNTER, NULL, NULL,                              \
	  "Nanoseconds the fetch threads spent in fetches (until the store or a tier answered), "  \
	  "summed over the threads.")                                                              \
	X(CACHE, whole_fill_ns, "whole_fill_ns", COUNTER, NULL, NULL,                              \
	  "Nanoseconds of wall time while at least one whole fetch ran (cold_whole).")             \
	X(CACHE, whole_fetch_idle_ns, "whole_fetch_idle_ns", COUNTER, NULL, NULL,                  \
	  "Of those, the fetch threads' time with no job to run, summed over the threads: "        \
	  "against their number times whole_fill_ns, how little work the whole fetches gave them.") \
	X(CACHE, whole_settle_ns, "whole_settle_ns", COUNTER, NULL, NULL,                          \
	  "Nanoseconds the whole fetches waited for their blocks (fetched and handed to the disk " \
	  "tier), summed over the fetches.")                                                       \
	X(CACHE, whole_pay_ns, "whole_pay_ns", COUNTER, NULL, NULL,                                \
	  "Nanoseconds the whole fetches waited for room in the disk writers' queue for their "    \
	  "owed blocks, summed over the fetches.")                                                 \
	X(CACHE, whole_refusals, "whole_refusals", COUNTER, NULL, NULL,                            \
	  "Warm-up fetches a whole fetch asked for and was refused (the warm-up window or the "    \
	  "RAM budget was full): it waited for its next block instead.")
/* clang-format on */

/* Why there is no disk tier (disk_off_reason); cache_disk_off_text() words it. */
enum cache_disk_off {
	CACHE_DISK_OFF_NONE = 0,   /* there is one (disk_state 1 or 2) */
	CACHE_DISK_OFF_NO_DIR = 1, /* cache_dir is empty */
	CACHE_DISK_OFF_DIR = 2,	   /* the store's directory could not be made or used (errno) */
	CACHE_DISK_OFF_LOCKED = 3, /* another daemon of the same store holds that directory */
	CACHE_DISK_OFF_META = 4,   /* the metadata store (LMDB) would not open (errno) */
	CACHE_DISK_OFF_DISK = 5,   /* the block file would not open (errno); metadata is kept */
};

/* The struct members of one source's rows: uint64_t FIELD; for each. */
#define CACHE_CTR_MEMBER(src, field, ...) CACHE_CTR_MEMBER_##src(field)
#define CACHE_CTR_MEMBER_CACHE(field) uint64_t field;
#define CACHE_CTR_MEMBER_DISK(field)
#define CACHE_CTR_MEMBER_FS(field)
#define CACHE_DISK_MEMBER(src, field, ...) CACHE_DISK_MEMBER_##src(field)
#define CACHE_DISK_MEMBER_CACHE(field)
#define CACHE_DISK_MEMBER_DISK(field) uint64_t field;
#define CACHE_DISK_MEMBER_FS(field)

/* The disk tier's counters (the DISK rows), as cache_disk_get_stats() reads them. */
struct cache_disk_stats {
	CACHE_COUNTERS(CACHE_DISK_MEMBER)
	bool full; /* ENOSPC seen: no more writes (disk_state 2) */
};

#endif
