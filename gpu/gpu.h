/*
 * gpu.h - the GPU fast path of the daemon: CUDA devices, the pinned RAM tier,
 * opened IPC handles and the copy engine that moves cached blocks into a
 * caller's device buffer.
 *
 * gpu/ knows nothing of FUSE or of the ioctl ABI: it works on its own request
 * type (struct gpu_load_req), and fs/ioctl.c alone translates the wire structs
 * of include/mcfs/mcfs_ioctl.h into it and the results back.
 *
 * A struct gpu always exists once gpu_new() returned 0, also on a machine with
 * no GPU, no driver or a build without CUDA: it then says why (gpu_status(),
 * gpu_info()) and every load answers -ENODEV. The CUDA runtime is linked
 * statically, so the daemon starts the same way everywhere.
 *
 * Placement: before anything touches the RAM tier, gpu_new() reads each
 * device's NUMA node (its PCI function's numa_node in sysfs) and hands them
 * to cache_ram_place(), which places the tier's memory near the devices and
 * starts ram_prefault; a build or host without GPUs calls it with none.
 *
 * Pinning: gpu_new() starts one thread ("mcfs-gpu-pin") that registers the
 * RAM tier with cudaHostRegister in 1 GiB chunks and logs the time it took.
 * Loads that run before a chunk is registered still work: those blocks go
 * through CUDA's pageable path (slower, counted in gpu_load_result.unpinned).
 *
 * Threads: gpu_load() is called from FUSE worker threads, any number at once;
 * each sets its CUDA device itself. Every other function may be called from
 * any thread, except gpu_new() and gpu_free(). Lock order: gpu locks are
 * leaves, never held across a CUDA call, a cache call or a FUSE reply.
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

struct gpu;

/* Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t, CUDA_IPC_HANDLE_SIZE). */
#define GPU_IPC_HANDLE_SIZE 64
/* Bytes of a device UUID (cudaDeviceProp.uuid). */
#define GPU_UUID_SIZE 16
/* Bytes of gpu_info's reason, NUL included. */
#define GPU_REASON_SIZE 256

/*
 * One copy of `count` rows (0 means 1) of `len` bytes: row i is the file
 * bytes [file_off + i * src_stride, + len), copied to the buffer start +
 * dst_off + i * len. With count <= 1 it is the plain file bytes [file_off,
 * file_off + len) and src_stride is ignored. A tensor slice along a
 * dimension > 0 is one such strided range (include/mcfs/mcfs_ioctl.h).
 */
struct gpu_range {
	uint64_t file_off;
	uint64_t len;
	uint64_t dst_off;
	uint64_t count;
	uint64_t src_stride;
};

/* ---- the copy arithmetic (request.c; pure, in both builds, unit-tested) ---- */

/* Rows of @r: count, or 1 for a plain range. */
uint64_t gpu_range_rows(const struct gpu_range *r);

/*
 * Checks @r against a file of @size bytes: 0, -EINVAL when an end overflows
 * or a strided range has src_stride < len, -ERANGE when a byte lies past
 * @size. On 0, *@file_end (may be NULL) is one past the range's last file
 * byte and *@dst_end (may be NULL) one past its last buffer byte (dst_off +
 * rows * len; -EINVAL if that overflows). A range of len 0 copies nothing
 * and is always valid.
 */
MCFS_MUST_CHECK int gpu_range_check(const struct gpu_range *r, uint64_t size, uint64_t *file_end,
				    uint64_t *dst_end);

/* Where a walk over one range stands: the row, and the byte in that row. */
struct gpu_walk {
	uint64_t row;
	uint64_t col;
};

/* One copy of the engine: `height` rows of `width` bytes, the first at
 * file offset `file_off`, each next one `src_pitch` bytes further in the
 * file; in the buffer they land packed (pitch `width`) from `dst`. One block
 * of the RAM tier holds all of them. height 1 is a plain copy. */
struct gpu_rows {
	uint64_t file_off;
	uint64_t width;
	uint64_t height;
	uint64_t src_pitch;
	uint64_t dst;
};

/* The largest src_pitch gpu_walk_next() gives a multi-row piece: CUDA's
 * limit on a 2-D copy's pitch (cudaDevAttrMaxPitch is 2^31 - 1 on every GPU
 * so far). Rows further apart than this go one copy per row. */
#define GPU_MAX_PITCH ((uint64_t)INT32_MAX)

/* The file offset the walk @w of @r stands at (its next byte). */
uint64_t gpu_walk_pos(const struct gpu_range *r, const struct gpu_walk *w);

/*
 * The next copy of the walk @w over @r (a checked range), given @avail > 0,
 * the bytes from gpu_walk_pos() to the end of the block that holds it. Fills
 * *@out with the whole rows that fit in that block from the walk's position
 * (when it stands at a row's start and the row fits), else with the part of
 * the current row up to the block's end or the row's end (a row that
 * straddles a block boundary is cut there, and its rest comes next); then
 * advances @w past it. Returns 1 with *@out, or 0 when @r is done.
 */
int gpu_walk_next(const struct gpu_range *r, struct gpu_walk *w, uint64_t avail,
		  struct gpu_rows *out);

/*
 * A row that a block's end cuts would cost two small copies, one from each
 * block, and the GPU's copy engine spends a fixed time on each copy
 * whatever its size.
 * copy.c instead gathers such rows (up to GPU_GATHER_ROW_MAX bytes) into a
 * pinned staging buffer on the CPU and copies them in runs: rows of one
 * length whose destinations lie equally far apart, one 2-D copy per run. A
 * tensor whose row pitch divides the block size has its cut rows equally far
 * apart, so they go in one copy.
 */
#define GPU_GATHER_ROW_MAX ((uint64_t)64 << 10)

/* The run being gathered: `rows` rows of `len` bytes, packed in the staging
 * buffer, bound for `dst`, `dst + pitch`, ... in the device buffer. */
struct gpu_run {
	uint64_t dst;
	uint64_t pitch; /* set once a second row joins */
	uint64_t len;
	uint64_t rows;
};

/* Adds a row of @len bytes bound for @dst to @run if the run is empty or the
 * row continues it (same length, the next destination at the run's pitch,
 * which a second row sets: at least @len and at most GPU_MAX_PITCH). Returns
 * false, leaving @run as it was, when the run must be copied first and a new
 * one started with this row. */
bool gpu_run_add(struct gpu_run *run, uint64_t dst, uint64_t len);

/*
 * Where the cut rows go in a staging buffer of two halves of `half` bytes
 * each, one filled while the other's copies run: the bookkeeping of
 * copy.c's gather, kept pure so that rows_test drives it with copies that
 * complete late. The caller supplies the two device operations.
 */
struct gpu_stage_ops {
	/* Issue the copy of @run, its rows packed from byte @off of the buffer;
	 * the copy may complete later. */
	int (*copy)(void *arg, const struct gpu_run *run, uint64_t off);
	/* Wait until every copy issued from half @h (0, 1) has completed. */
	int (*wait)(void *arg, unsigned h);
	void *arg;
};

struct gpu_stage {
	uint64_t half;	    /* bytes of each half: GPU_GATHER_ROW_MAX or more */
	unsigned filling;   /* the half being filled */
	uint64_t used;	    /* bytes of it taken */
	uint64_t row_off;   /* the row being gathered: its offset in the buffer */
	struct gpu_run run; /* whole rows gathered, not yet copied */
	uint64_t run_off;   /* the run's first row in the buffer */
	bool busy[2];	    /* copies issued from a half since it was last waited for */
};

/*
 * A part of a cut row: @width bytes at byte @col of a row of @len bytes
 * (at most the half) bound for @row_dst. gpu_stage_place() says where in
 * the buffer the part's bytes go (*@off); a row's head (@col 0) takes room
 * for the whole row, and when the half is full first copies the run and
 * waits for the other half before filling it. The caller copies the bytes
 * there, then calls gpu_stage_placed(): the part that ends the row adds the
 * row to the run, copying the run first if the row does not continue it.
 * gpu_stage_flush() copies the run (a load's end). Each returns 0 or the
 * first error of an operation.
 */
int gpu_stage_place(struct gpu_stage *st, const struct gpu_stage_ops *ops, uint64_t len,
		    uint64_t col, uint64_t *off);
int gpu_stage_placed(struct gpu_stage *st, const struct gpu_stage_ops *ops, uint64_t row_dst,
		     uint64_t len, uint64_t col, uint64_t width);
int gpu_stage_flush(struct gpu_stage *st, const struct gpu_stage_ops *ops);

/*
 * One load: byte ranges of a file into a device buffer that another process
 * allocated and exported as a CUDA IPC handle. The buffer starts dst_offset
 * bytes into that allocation.
 */
struct gpu_load_req {
	unsigned char ipc_handle[GPU_IPC_HANDLE_SIZE]; /* of the allocation (its base) */
	bool by_uuid;				       /* device_uuid names the GPU, else device */
	unsigned char device_uuid[GPU_UUID_SIZE];      /* cudaDeviceProp.uuid */
	int device;				       /* the daemon's CUDA ordinal (!by_uuid) */
	uint64_t dst_offset;			       /* buffer start within the allocation */
	uint64_t dst_size; /* bytes usable from dst_offset; 0 = to the allocation's end */
	bool close_after;  /* close the IPC mapping after this load: the caller will
			      not send this buffer again (one-shot loads) */
	pid_t owner;	   /* calling process: its mappings close once it is gone */
	const struct gpu_range *ranges; /* borrowed for the call; copied in this order */
	unsigned nranges;
};

/* Bytes of a bind challenge (bind.c): 128 random bits, never guessed. */
#define GPU_BIND_NONCE_SIZE 16

/*
 * Binds the calling process req->owner (a thread group id, > 0) to the
 * buffer req names (ipc_handle, device), so that its loads into that buffer
 * are done: gpu_load() refuses -EPERM for a process that is not bound.
 * Without @proof: fills @nonce (GPU_BIND_NONCE_SIZE bytes) with a fresh
 * random challenge for (process, handle, device), or sets *@bound (and zeroes
 * @nonce) when the process is bound already. With @proof: @nonce is a
 * challenge the process was given, which it has written at req->dst_offset
 * of the allocation; the daemon opens the handle and reads it back: 0 binds,
 * -EPERM if @nonce was not handed out (or is used) or the bytes there differ,
 * -EOVERFLOW if the 16 bytes lie past the allocation, -ENXIO if the handle
 * does not open, -ENODEV without a usable device. A binding lasts until the
 * process is gone.
 */
MCFS_MUST_CHECK int gpu_bind(struct gpu *g, const struct gpu_load_req *req, bool proof,
			     unsigned char *nonce, bool *bound);

/* Per-load results. The times say where a slow load waited (the debug log
 * prints them): opening the caller's IPC handle, blocks not in the RAM tier
 * yet (fetches), or the copy engine (DMA). */
struct gpu_load_result {
	uint64_t bytes;	   /* copied to the device */
	uint64_t blocks;   /* block copies issued (a block shared by two ranges counts twice) */
	uint64_t unpinned; /* of which from memory not registered with CUDA */
	uint64_t gathered; /* rows cut by a block's end, gathered on the CPU (GPU_GATHER_ROW_MAX) */
	uint64_t ipc_ns;   /* opening (or finding) and releasing the IPC mapping */
	uint64_t wait_blocks_ns; /* in cache_block_get() (blocks being fetched) and for a window */
	uint64_t wait_copies_ns; /* waiting for copies to complete */
};

/* What the GPU module offers now (MCFS_IOC_INFO's GPU fields). */
struct gpu_info {
	bool ok;		      /* gpu_load() can work */
	unsigned devices;	      /* CUDA devices the daemon sees */
	uint64_t pinned_bytes;	      /* of the RAM tier, registered with CUDA so far */
	unsigned ready;		      /* devices prepared: context made, RAM tier mapped */
	char reason[GPU_REASON_SIZE]; /* why !ok, or a summary; NUL-terminated */
};

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

/* Fills *out with a snapshot of the module's state. @g may be NULL (not
 * started). Can't fail. */
void gpu_info(struct gpu *g, struct gpu_info *out);

/* Returns nonzero when the caller of the load gave up (FUSE interrupt). */
typedef int (*gpu_interrupted_fn)(void *arg);

/*
 * The data section of the safetensors file @f, [8 + N, size), as one range to
 * the buffer start: what a load that names no ranges copies. Reads the
 * file's first 8 bytes through @c (fetching the first block if needed).
 * Returns 0 with *out set, -EBADMSG when the file is too short or its header
 * length does not fit it, or cache_block_get()'s error. Works in the build
 * without CUDA too, so that a bad file is refused the same way everywhere.
 */
MCFS_MUST_CHECK int gpu_data_section(struct cache *c, struct cache_file *f, struct gpu_range *out);

/*
 * Copies req->ranges of @f (each already checked to lie inside the file by
 * the caller; coalesced or not) into the buffer named by req: the allocation
 * of req->ipc_handle on the device req names, from req->dst_offset on. The
 * handle is opened once per (handle, device) and kept open for later loads
 * into the same allocation, unless req->close_after; it is closed when
 * req->owner is gone. Polls @intr (may be NULL) between blocks.
 *
 * Fetches missing blocks ahead of the copy (cache_prefetch, bounded by the
 * prefetch budget), holds at most a few blocks at once, and returns when
 * every byte is on the device. On error nothing is held and the buffer holds
 * an unspecified part of the data. *res is always written: on failure it
 * counts what was issued before it. @req and its ranges are borrowed for the
 * call only.
 *
 * Returns 0, or
 *   -ENODEV     no usable GPU, the named device is not visible to the
 *               daemon, or its context was lost;
 *   -ENXIO      the IPC handle could not be opened or sized;
 *   -EOVERFLOW  a destination past the allocation or dst_size;
 *   -EINTR      @intr said the caller gave up;
 *   -EIO        the store failed for a block, or a copy failed;
 *   -ENOMEM     no memory for streams or bookkeeping;
 *   -EINVAL     a range past the end of @f (the caller's check was skipped);
 *   or cache_block_get()'s -ESTALE.
 * Logs failures other than -EINTR.
 */
MCFS_MUST_CHECK int gpu_load(struct gpu *g, struct cache_file *f, const struct gpu_load_req *req,
			     gpu_interrupted_fn intr, void *intr_arg, struct gpu_load_result *res);

#endif
