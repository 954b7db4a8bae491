/*
 * ipc.c - CUDA IPC handles opened in the daemon, cached by (handle bytes,
 * device).
 *
 * Why a cache: cudaIpcOpenMemHandle costs a driver round trip and maps the
 * whole allocation, and the same handle cannot be opened twice in one
 * process - a loader that sends several files into one arena buffer, or
 * several threads of one loader, would otherwise collide. So an entry is
 * opened once, reference counted by the loads using it, and kept open after
 * them unless the load asked to close it (gpu_load_req.close_after).
 *
 * Why entries are closed: an open mapping keeps the exporter's GPU memory
 * alive even after that process frees it or exits. Idle entries are closed
 * when their owner process is gone (checked by the janitor every 2 s and on
 * every open), and beyond GPU_IPC_KEEP idle entries the least recently used
 * go first.
 *
 * The size of the mapped allocation comes from the driver
 * (cuMemGetAddressRange, reached through cudaGetDriverEntryPointByVersion:
 * the runtime has no such call), so that a destination past the caller's
 * allocation is refused with -EOVERFLOW instead of faulting the context.
 */
#define _GNU_SOURCE
#include "gpu_int.h"

#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(((cudaIpcMemHandle_t *)0)->reserved) == GPU_IPC_HANDLE_SIZE,
	       "GPU_IPC_HANDLE_SIZE is CUDA's");
_Static_assert(sizeof(((cudaUUID_t *)0)->bytes) == GPU_UUID_SIZE, "GPU_UUID_SIZE is CUDA's");

typedef CUresult (*addr_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);

static addr_range_fn addr_range(void)
{
	static addr_range_fn fn; /* written once; a race writes the same value */
	enum cudaDriverEntryPointQueryResult q;
	void *p = NULL;

	if (fn)
		return fn;
	if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault,
					     &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		fn = (addr_range_fn)p;
	return fn;
}

static bool owner_gone(pid_t pid)
{
	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

static void close_entry(struct gpu *g, struct gpu_ipc *e)
{
	cudaError_t err;

	(void)cudaSetDevice(g->devs[e->dev].ordinal);
	err = cudaIpcCloseMemHandle(e->base);
	if (err != cudaSuccess)
		MCFS_WARN("gpu: closing an IPC mapping on device %d: %s", g->devs[e->dev].ordinal,
			  cudaGetErrorString(err));
	free(e);
}

/* Unlinks idle entries to close (dead owners, then LRU beyond the cap) into
 * *out. Called with g->lock held. */
static void pick_victims(struct gpu *g, struct gpu_ipc **out)
{
	struct gpu_ipc **pp, *e, *lru;
	unsigned idle = 0;

	for (pp = &g->ipcs; (e = *pp);) {
		if (e->refs == 0 && !e->opening && owner_gone(e->owner)) {
			*pp = e->next;
			e->next = *out;
			*out = e;
			continue;
		}
		if (e->refs == 0 && !e->opening)
			idle++;
		pp = &e->next;
	}
	while (idle > GPU_IPC_KEEP) {
		lru = NULL;
		for (e = g->ipcs; e; e = e->next)
			if (e->refs == 0 && !e->opening && (!lru || e->used_ns < lru->used_ns))
				lru = e;
		for (pp = &g->ipcs; *pp != lru; pp = &(*pp)->next)
			;
		*pp = lru->next;
		lru->next = *out;
		*out = lru;
		idle--;
	}
}

static void close_list(struct gpu *g, struct gpu_ipc *list)
{
	struct gpu_ipc *next;

	for (; list; list = next) {
		next = list->next;
		close_entry(g, list);
	}
}

void gpu_ipc_sweep(struct gpu *g)
{
	struct gpu_ipc *victims = NULL;

	pthread_mutex_lock(&g->lock);
	pick_victims(g, &victims);
	pthread_mutex_unlock(&g->lock);
	close_list(g, victims);
}

static struct gpu_ipc *find(struct gpu *g, const unsigned char *handle, int dev)
{
	struct gpu_ipc *e;

	for (e = g->ipcs; e; e = e->next)
		if (e->dev == dev && memcmp(e->handle, handle, GPU_IPC_HANDLE_SIZE) == 0)
			return e;
	return NULL;
}

static int open_mapping(struct gpu *g, struct gpu_ipc *e)
{
	cudaIpcMemHandle_t h;
	CUdeviceptr base = 0;
	addr_range_fn fn = addr_range();
	cudaError_t err;
	size_t size = 0;

	memcpy(h.reserved, e->handle, sizeof(h.reserved));
	err = cudaIpcOpenMemHandle(&e->base, h, cudaIpcMemLazyEnablePeerAccess);
	if (err != cudaSuccess) {
		MCFS_WARN("gpu: cannot open the caller's IPC handle on device %d: %s (%s)",
			  g->devs[e->dev].ordinal, cudaGetErrorString(err), cudaGetErrorName(err));
		(void)cudaGetLastError();
		/* A bad or stale handle is the caller's fault, not the device's:
		 * only an error that outlives the failed call (a lost context,
		 * which every later call returns) turns the GPU path off. */
		gpu_dev_broken(g, e->dev, cudaStreamQuery(NULL));
		return err == cudaErrorMemoryAllocation ? -ENOMEM : -ENXIO;
	}
	if (!fn || fn(&base, &size, (CUdeviceptr)(uintptr_t)e->base) != CUDA_SUCCESS) {
		MCFS_WARN("gpu: cannot size the caller's allocation on device %d",
			  g->devs[e->dev].ordinal);
		(void)cudaIpcCloseMemHandle(e->base);
		return -ENXIO;
	}
	/* The mapping starts at the allocation base: the handle names the allocation. */
	e->size = size - (size_t)((uintptr_t)e->base - (uintptr_t)base);
	return 0;
}

int gpu_ipc_acquire(struct gpu *g, const unsigned char *handle, int dev, pid_t owner,
		    struct gpu_ipc **out)
{
	struct gpu_ipc *e, *victims = NULL;
	int rc;

	pthread_mutex_lock(&g->lock);
	pick_victims(g, &victims);
	e = find(g, handle, dev);
	/* Waits on g->cond under g->lock until the entry's opener clears `opening`. */
	while (e && e->opening) {
		pthread_cond_wait(&g->cond, &g->lock);
		e = find(g, handle, dev);
	}
	if (e) {
		e->refs++;
		e->owner = owner;
		e->close_idle = false;
		pthread_mutex_unlock(&g->lock);
		close_list(g, victims);
		*out = e;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&g->lock);
		close_list(g, victims);
		return -ENOMEM;
	}
	memcpy(e->handle, handle, GPU_IPC_HANDLE_SIZE);
	e->dev = dev;
	e->owner = owner;
	e->refs = 1;
	e->opening = true;
	e->next = g->ipcs;
	g->ipcs = e;
	pthread_mutex_unlock(&g->lock);
	close_list(g, victims);

	rc = open_mapping(g, e);

	pthread_mutex_lock(&g->lock);
	e->opening = false;
	if (rc < 0) {
		struct gpu_ipc **pp;

		for (pp = &g->ipcs; *pp != e; pp = &(*pp)->next)
			;
		*pp = e->next;
	}
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
	if (rc < 0) {
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

void gpu_ipc_release(struct gpu *g, struct gpu_ipc *e, bool close_after)
{
	struct gpu_ipc **pp;
	bool close_now = false;

	pthread_mutex_lock(&g->lock);
	e->refs--;
	e->used_ns = mcfs_now_ns();
	if (close_after)
		e->close_idle = true;
	if (e->refs == 0 && e->close_idle) {
		for (pp = &g->ipcs; *pp != e; pp = &(*pp)->next)
			;
		*pp = e->next;
		close_now = true;
	}
	pthread_mutex_unlock(&g->lock);
	if (close_now)
		close_entry(g, e);
}

void gpu_ipc_close_all(struct gpu *g)
{
	struct gpu_ipc *list;

	pthread_mutex_lock(&g->lock);
	list = g->ipcs;
	g->ipcs = NULL;
	pthread_mutex_unlock(&g->lock);
	close_list(g, list);
}
