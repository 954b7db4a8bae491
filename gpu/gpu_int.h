/*
 * gpu_int.h - what the files of gpu/ share (gpu.c: devices, pinning and
 * lifecycle; ipc.c: opened IPC handles; copy.c: the copy engine). Not a
 * public header. Compiled only with MCFS_HAVE_CUDA.
 *
 * Lock: g->lock guards the IPC entry list, the stream-set pool and the
 * janitor's condition. It is a leaf lock and is never held across a CUDA
 * call: an IPC entry being opened is marked `opening`, and whoever finds it
 * so sleeps on g->cond (guarded by g->lock) until the opener clears it.
 */
#ifndef MCFS_GPU_INT_H
#define MCFS_GPU_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <cuda_runtime_api.h>

#include "gpu.h"

/* Streams per load: H2D copies share the copy engines, so streams add no
 * bandwidth of their own; 8 keep them fed while the host thread waits on the
 * oldest event and takes the next block from the cache. */
#define GPU_NSTREAMS 8
/* Copies one load has in flight, each holding its block: up to 64 x 8 MiB =
 * 512 MiB, about 10 ms of PCIe 5 time. A slice cuts a block into several
 * copies (rows that cross a block boundary go in pieces of their own), so
 * the window counts copies, not bytes; 16 left ranks loading slices short of
 * the link (docs/benchmarks.md, "Every GPU"). Fewer on a small RAM tier (slots / 8), and
 * granted by the cache's budget (cache_gpu_window): loads together never
 * hold more than a quarter of it. */
#define GPU_WINDOW 64
/* The staging buffer of rows cut by a block's end, per stream set: two
 * halves, one filled while the other's copies complete. */
#define GPU_GATHER_SIZE ((uint64_t)8 << 20)
/* The RAM tier is registered in chunks this big (a multiple of any block
 * size): the pin thread's progress is visible per chunk, and one failed
 * registration costs at most a chunk. */
#define GPU_PIN_CHUNK (1ull << 30)
/* IPC mappings kept open with no load running (beyond this, least recently
 * used first are closed). */
#define GPU_IPC_KEEP 32

struct gpu_dev {
	int ordinal;			   /* the daemon's CUDA ordinal */
	int numa_node;			   /* of its PCI function (sysfs); -1: unknown */
	unsigned char uuid[GPU_UUID_SIZE]; /* cudaDeviceProp.uuid */
	atomic_int broken;		   /* set after a sticky CUDA error: loads get -ENODEV */
	atomic_int ready;		   /* GPU_DEV_*: its context and the RAM tier's mapping */
	pthread_t prep;			   /* "mcfs-gpu-prepN", if prep_started */
	bool prep_started;		   /* written before the threads run; read at gpu_free */
};

/* gpu_dev.ready: a device is prepared once its context exists and every
 * pinned chunk of the RAM tier has been used from it (mapped), so that its
 * first load pays neither; a load before that still works, and pays them. */
#define GPU_DEV_PREPARING 0
#define GPU_DEV_READY 1
#define GPU_DEV_FAILED (-1) /* a CUDA error: loads still try (and report it) */

/* An opened IPC handle. Fields guarded by g->lock, except base and size,
 * which are written once by the opener before `opening` is cleared. */
struct gpu_ipc {
	struct gpu_ipc *next;
	unsigned char handle[GPU_IPC_HANDLE_SIZE];
	int dev;	  /* index into g->devs */
	void *base;	  /* mapped allocation base */
	size_t size;	  /* bytes of the allocation */
	pid_t owner;	  /* last process that used it: closed when it is gone */
	unsigned refs;	  /* loads using it now */
	bool opening;	  /* cudaIpcOpenMemHandle running (base not valid yet) */
	bool close_idle;  /* close when refs drops to 0 (a load's close_after) */
	uint64_t used_ns; /* mcfs_now_ns() of the last release */
};

/* Streams and events for one load at a time on one device; pooled. */
struct gpu_streams {
	struct gpu_streams *next; /* pool link, guarded by g->lock */
	int dev;
	cudaStream_t s[GPU_NSTREAMS];
	cudaEvent_t ev[GPU_WINDOW];
	/* Rows cut by a block's end (gpu.h, GPU_GATHER_ROW_MAX): a pinned
	 * buffer of GPU_GATHER_SIZE in two halves, made at the first such row
	 * (NULL until then, or after cudaHostAlloc failed: gather_failed), and
	 * their copies' stream and one event per half. */
	char *gather;
	bool gather_failed;
	cudaStream_t gather_st;
	cudaEvent_t gather_ev[2];
};

struct gpu {
	const struct cfg *cfg;	      /* borrowed */
	struct cache *cache;	      /* borrowed */
	bool ok;		      /* devices found; fixed after gpu_new */
	char reason[GPU_REASON_SIZE]; /* why not ok, or a summary */
	int ndev;
	struct gpu_dev *devs;

	char *region; /* the RAM tier (cache_ram_region) */
	size_t region_len;
	size_t nchunks;
	atomic_uchar *chunk_pinned; /* per GPU_PIN_CHUNK: 1 once registered */
	atomic_ullong pinned_bytes;
	pthread_t pin_thread;
	bool pin_started;

	pthread_mutex_t lock;
	pthread_cond_t cond;	  /* an IPC entry finished opening; a chunk was pinned (or
				     pinning ended); or stop */
	bool pin_done;		  /* guarded by lock: pinning ended (chunks not pinned by then
				     never will be) */
	bool stop;		  /* guarded by lock: the pin/janitor thread ends */
	struct gpu_ipc *ipcs;	  /* guarded by lock */
	struct gpu_streams *pool; /* guarded by lock */
	struct gpu_bind *binds;	  /* guarded by lock: bind.c */
	unsigned nbinds;	  /* guarded by lock: length of binds */
};

/* cudaError_t -> negative errno; the one translation (gpu.c). */
int gpu_errno(cudaError_t e);
/* Marks @dev broken after a sticky error (logged once). */
void gpu_dev_broken(struct gpu *g, int dev, cudaError_t e);
/* Index into g->devs for the request's uuid or ordinal, or -ENODEV (logged). */
MCFS_MUST_CHECK int gpu_find_dev(struct gpu *g, const struct gpu_load_req *req);
/* True if [p, p+len) lies in registered memory. */
bool gpu_is_pinned(struct gpu *g, const void *p, size_t len);

/* ipc.c. Returns 0 with a held entry (drop with gpu_ipc_release), or
 * -ENXIO (logged) / -ENODEV. The caller's thread has dev current. */
MCFS_MUST_CHECK int gpu_ipc_acquire(struct gpu *g, const unsigned char *handle, int dev,
				    pid_t owner, struct gpu_ipc **out);
void gpu_ipc_release(struct gpu *g, struct gpu_ipc *e, bool close_after);
/* Closes idle mappings of processes that are gone, and beyond GPU_IPC_KEEP. */
void gpu_ipc_sweep(struct gpu *g);
/* Closes every mapping (gpu_free; no load running). */
void gpu_ipc_close_all(struct gpu *g);
/* bind.c. True if process @tgid proved it can write the allocation of
 * @handle on device index @dev (and then marks the binding used). */
bool gpu_bound(struct gpu *g, pid_t tgid, const unsigned char *handle, int dev);
/* Drops the bindings of processes that are gone (the janitor). */
void gpu_bind_sweep(struct gpu *g);
/* Drops every binding (gpu_free). */
void gpu_bind_free_all(struct gpu *g);

/* copy.c: stream sets. */
MCFS_MUST_CHECK int gpu_streams_get(struct gpu *g, int dev, struct gpu_streams **out);
void gpu_streams_put(struct gpu *g, struct gpu_streams *s);
void gpu_streams_free_all(struct gpu *g);

#endif
