/*
 * gpu.h - the GPU fast path of the daemon: CUDA devices, the pinned RAM tier,
 * opened IPC handles and the copy engine that moves cached blocks into a
 * caller's device buffer (MCFS_IOC_LOAD, see include/mcfs/mcfs_ioctl.h).
 *
 * A struct gpu always exists once gpu_new() returned 0, also on a machine with
 * no GPU, no driver or a build without CUDA: it then says why (gpu_status())
 * and every load answers -ENODEV. The CUDA runtime is linked statically, so
 * the daemon starts the same way everywhere.
 *
 * Pinning: gpu_new() starts one thread ("mcfs-gpu-pin") that registers the
 * RAM tier with cudaHostRegister in 1 GiB chunks and logs the time it took.
 * Loads that run before a chunk is registered still work: those blocks go
 * through CUDA's pageable path (slower, counted in mcfs_load_req.unpinned).
 *
 * Threads: gpu_load() is called from FUSE worker threads, any number at once;
 * each sets its CUDA device itself. Lock order: gpu locks are leaves, never
 * held across a CUDA call, a cache call or a FUSE reply.
 *
 * Errors: negative errno. cudaError_t is translated in gpu/ alone.
 */
#ifndef MCFS_GPU_H
#define MCFS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"
#include "cfg.h"
#include "mcfs.h"
#include "mcfs/mcfs_ioctl.h"

struct gpu;

/*
 * Creates the GPU module over @cache's RAM tier. Call after daemonising (CUDA
 * must not be initialised before fork()). @cfg and @cache are borrowed and
 * must outlive the gpu. Returns 0 with *out set - also when no GPU can be
 * used, which it logs once at INFO with the reason - or -ENOMEM.
 */
MCFS_MUST_CHECK int gpu_new(const struct cfg *cfg, struct cache *cache, struct gpu **out);

/*
 * Stops the pin thread, closes opened IPC handles, unregisters the RAM tier.
 * No load may be running. Accepts NULL.
 */
void gpu_free(struct gpu *g);

/*
 * 0 if loads can work, else -ENODEV with the reason in @reason (always
 * NUL-terminated; may be NULL). Can't fail otherwise.
 */
MCFS_MUST_CHECK int gpu_status(struct gpu *g, char *reason, size_t len);

/* Fills the out fields of MCFS_IOC_INFO. Can't fail. */
void gpu_info(struct gpu *g, struct mcfs_info *info);

/* Returns nonzero when the caller of the load gave up (FUSE interrupt). */
typedef int (*gpu_interrupted_fn)(void *arg);

/* Per-load results, copied into the out fields of struct mcfs_load_req. */
struct gpu_load_result {
	uint64_t bytes;	   /* copied to the device */
	uint64_t blocks;   /* block copies issued */
	uint64_t unpinned; /* of which from memory not registered with CUDA */
};

/*
 * Copies the @nranges byte ranges of @f (already checked against the file's
 * size by the caller, coalesced or not) into the caller's buffer named by
 * req->ipc_handle, req->device_uuid / req->device, req->dst_offset and
 * req->dst_size. @owner is the calling process (kept with the opened handle,
 * which is closed when that process is gone, or after this load when
 * req->flags has MCFS_LOAD_F_CLOSE). Polls @intr between blocks.
 *
 * Fetches missing blocks ahead of the copy (cache_prefetch, bounded by the
 * prefetch budget), holds at most a few blocks at once, and returns when
 * every byte is on the device. On error nothing is held and the buffer holds
 * an unspecified part of the data.
 * Returns 0, or -ENODEV, -ENXIO, -EOVERFLOW, -EINTR, -EIO, -ENOMEM
 * (include/mcfs/mcfs_ioctl.h says what each means). Logs failures other than -EINTR.
 */
MCFS_MUST_CHECK int gpu_load(struct gpu *g, struct cache_file *f, const struct mcfs_load_req *req,
			     const struct mcfs_range *ranges, unsigned nranges, pid_t owner,
			     gpu_interrupted_fn intr, void *intr_arg, struct gpu_load_result *res);

#endif
