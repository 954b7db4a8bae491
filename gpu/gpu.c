/*
 * gpu.c - the GPU module's lifecycle: finding CUDA devices, pinning the RAM
 * tier, the janitor that closes IPC mappings of processes that are gone, and
 * the one translation of cudaError_t into errno.
 *
 * Start-up never fails for want of a GPU: no driver, no device or a driver
 * too old for the runtime all leave a struct gpu with ok = false and a
 * reason, logged once at INFO, and every load answers -ENODEV.
 *
 * Every device is prepared at start, each in a thread of its own
 * ("mcfs-gpu-prepN", all in parallel): its primary context is made, then each
 * chunk of the RAM tier, once pinned, is used once from it (a 1-byte copy),
 * which maps the pinned chunk into that device's context. Done lazily, that
 * mapping ran inside a fresh daemon's first load into a second GPU and cost it
 * time in proportion to the RAM tier (docs/benchmarks.md, "Pinning the RAM tier
 * for the GPUs"); gpu_info() says which are ready.
 *
 * Pinning runs in its own thread ("mcfs-gpu-pin") so that a large RAM tier
 * (pinning takes time in proportion to its size: docs/benchmarks.md, "Pinning
 * the RAM tier for the GPUs") does not delay the mount: it registers the region
 * chunk by chunk with cudaHostRegisterPortable (usable from every device's
 * context) and publishes each chunk in chunk_pinned; the copy engine checks it
 * per block. Once done, the same thread wakes every 2 s to close IPC mappings
 * whose owner process has exited (an open mapping keeps that process's GPU
 * memory alive).
 */
#define _GNU_SOURCE
#include "gpu_int.h"
#include "mcfs_numa.h"
#include "cache_ram.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int gpu_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorStubLibrary:
	case cudaErrorDeviceUninitialized:
	case cudaErrorInitializationError:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidResourceHandle:
	case cudaErrorMapBufferObjectFailed:
		return -ENXIO;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorNotSupported:
		return -EOPNOTSUPP;
	case cudaErrorInvalidValue:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Errors after which the context is unusable for the rest of the process. */
static bool sticky(cudaError_t e)
{
	return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
	       e == cudaErrorECCUncorrectable || e == cudaErrorHardwareStackError ||
	       e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress ||
	       e == cudaErrorInvalidPc || e == cudaErrorUnknown;
}

void gpu_dev_broken(struct gpu *g, int dev, cudaError_t e)
{
	if (!sticky(e))
		return;
	if (atomic_exchange(&g->devs[dev].broken, 1) == 0)
		MCFS_ERR("gpu: device %d context lost (%s: %s); the GPU path stays off on it "
			 "until mcfs restarts",
			 g->devs[dev].ordinal, cudaGetErrorName(e), cudaGetErrorString(e));
}

int gpu_find_dev(struct gpu *g, const struct gpu_load_req *req)
{
	int i;

	if (req->by_uuid) {
		for (i = 0; i < g->ndev; i++)
			if (memcmp(g->devs[i].uuid, req->device_uuid, GPU_UUID_SIZE) == 0)
				return i;
		MCFS_WARN("gpu: load for a device (uuid %02x%02x%02x%02x...) the daemon does "
			  "not see",
			  req->device_uuid[0], req->device_uuid[1], req->device_uuid[2],
			  req->device_uuid[3]);
		return -ENODEV;
	}
	if (req->device < 0 || req->device >= g->ndev) {
		MCFS_WARN("gpu: load for device %d; the daemon sees %d", (int)req->device, g->ndev);
		return -ENODEV;
	}
	return req->device;
}

bool gpu_is_pinned(struct gpu *g, const void *p, size_t len)
{
	const char *c = p;
	size_t first, last;

	if (!g->region || c < g->region || c + len > g->region + g->region_len || len == 0)
		return false;
	first = (size_t)(c - g->region) / GPU_PIN_CHUNK;
	last = (size_t)(c + len - 1 - g->region) / GPU_PIN_CHUNK;
	for (; first <= last; first++)
		if (!atomic_load(&g->chunk_pinned[first]))
			return false;
	return true;
}

static void pin_region(struct gpu *g)
{
	unsigned long long t0 = mcfs_now_ns(), t;
	char b1[32], b2[32];
	cudaError_t e;
	size_t i, off, len;

	e = cudaSetDevice(g->devs[0].ordinal);
	for (i = 0; i < g->nchunks && e == cudaSuccess; i++) {
		pthread_mutex_lock(&g->lock);
		if (g->stop) {
			pthread_mutex_unlock(&g->lock);
			return;
		}
		pthread_mutex_unlock(&g->lock);
		off = i * GPU_PIN_CHUNK;
		len = MCFS_MIN((size_t)GPU_PIN_CHUNK, g->region_len - off);
		e = cudaHostRegister(g->region + off, len, cudaHostRegisterPortable);
		if (e == cudaSuccess) {
			atomic_store(&g->chunk_pinned[i], 1);
			atomic_fetch_add(&g->pinned_bytes, len);
			pthread_mutex_lock(&g->lock);
			pthread_cond_broadcast(&g->cond); /* the prep threads wait for it */
			pthread_mutex_unlock(&g->lock);
		}
	}
	t = mcfs_now_ns() - t0;
	if (e != cudaSuccess)
		MCFS_WARN(
		    "gpu: pinning the RAM tier stopped after %s of %s in %.2f s: %s; the rest "
		    "is copied through CUDA's pageable path (slower)",
		    mcfs_fmt_bytes(atomic_load(&g->pinned_bytes), b1, sizeof(b1)),
		    mcfs_fmt_bytes(g->region_len, b2, sizeof(b2)), t / 1e9, cudaGetErrorString(e));
	else
		MCFS_INFO("gpu: pinned the RAM tier (%s) in %.2f s (%.2f GiB/s)",
			  mcfs_fmt_bytes(g->region_len, b1, sizeof(b1)), t / 1e9,
			  t ? (double)g->region_len / (1 << 30) / (t / 1e9) : 0.0);
}

static void *pin_thread(void *arg)
{
	struct gpu *g = arg;
	struct timespec ts;
	bool stop;

	pthread_setname_np(pthread_self(), "mcfs-gpu-pin");
	pin_region(g);
	pthread_mutex_lock(&g->lock);
	g->pin_done = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
	for (;;) {
		pthread_mutex_lock(&g->lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 2;
		/* Waits on g->cond under g->lock for stop, or 2 s to sweep. */
		if (!g->stop)
			pthread_cond_timedwait(&g->cond, &g->lock, &ts);
		stop = g->stop;
		pthread_mutex_unlock(&g->lock);
		if (stop)
			break;
		gpu_ipc_sweep(g);
		gpu_bind_sweep(g);
	}
	return NULL;
}

/*
 * Waits until chunk @i is pinned, pinning has ended or the module stops.
 * Returns 1 if the chunk is pinned, 0 if it never will be, -1 on stop.
 */
static int wait_chunk(struct gpu *g, size_t i)
{
	int rc;

	pthread_mutex_lock(&g->lock);
	/* Waits on g->cond under g->lock: pin_region() broadcasts each chunk. */
	while (!atomic_load(&g->chunk_pinned[i]) && !g->pin_done && !g->stop)
		pthread_cond_wait(&g->cond, &g->lock);
	rc = g->stop ? -1 : atomic_load(&g->chunk_pinned[i]) ? 1 : 0;
	pthread_mutex_unlock(&g->lock);
	return rc;
}

struct prep_arg {
	struct gpu *g;
	int dev;
};

/* Makes device @dev's context and maps every pinned chunk into it. */
static cudaError_t prepare(struct gpu *g, int dev, size_t *mapped)
{
	cudaError_t e;
	void *scratch = NULL;
	size_t i;
	int rc;

	e = cudaSetDevice(g->devs[dev].ordinal);
	if (e == cudaSuccess)
		e = cudaFree(0); /* the primary context, made now */
	if (e == cudaSuccess)
		e = cudaMalloc(&scratch, 64);
	for (i = 0; i < g->nchunks && e == cudaSuccess; i++) {
		rc = wait_chunk(g, i);
		if (rc < 0)
			break;
		if (rc == 0)
			continue; /* never pinned: loads copy it through the pageable path */
		e = cudaMemcpy(scratch, g->region + i * GPU_PIN_CHUNK, 1, cudaMemcpyHostToDevice);
		if (e == cudaSuccess)
			*mapped +=
			    MCFS_MIN((size_t)GPU_PIN_CHUNK, g->region_len - i * GPU_PIN_CHUNK);
	}
	if (scratch)
		(void)cudaFree(scratch);
	return e;
}

static void *prep_thread(void *arg)
{
	struct prep_arg *a = arg;
	struct gpu *g = a->g;
	int dev = a->dev;
	unsigned long long t0 = mcfs_now_ns();
	char name[16], b[32];
	size_t mapped = 0;
	cudaError_t e;

	free(a);
	snprintf(name, sizeof(name), "mcfs-gpu-prep%d", dev);
	pthread_setname_np(pthread_self(), name);
	e = prepare(g, dev, &mapped);
	if (e != cudaSuccess) {
		MCFS_WARN("gpu: preparing device %d stopped: %s; its loads make what is missing "
			  "themselves (slower first loads)",
			  g->devs[dev].ordinal, cudaGetErrorString(e));
		atomic_store(&g->devs[dev].ready, GPU_DEV_FAILED);
		return NULL;
	}
	pthread_mutex_lock(&g->lock);
	e = g->stop ? cudaErrorUnknown : cudaSuccess;
	pthread_mutex_unlock(&g->lock);
	if (e != cudaSuccess)
		return NULL;
	atomic_store(&g->devs[dev].ready, GPU_DEV_READY);
	MCFS_INFO("gpu: device %d ready: context made and %s of the pinned RAM tier mapped in "
		  "%.2f s",
		  g->devs[dev].ordinal, mcfs_fmt_bytes(mapped, b, sizeof(b)),
		  (mcfs_now_ns() - t0) / 1e9);
	return NULL;
}

/* Starts one prep thread per device. Returns 0 or a negative errno. */
static int start_prep(struct gpu *g)
{
	struct prep_arg *a;
	int i, rc;

	for (i = 0; i < g->ndev; i++) {
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		a->g = g;
		a->dev = i;
		rc = pthread_create(&g->devs[i].prep, NULL, prep_thread, a);
		if (rc) {
			free(a);
			return -rc;
		}
		g->devs[i].prep_started = true;
	}
	return 0;
}

/* The NUMA node of device @dev's PCI function (sysfs), or -1 when unknown. */
static int numa_node_of(int dev)
{
	char busid[32];

	if (cudaDeviceGetPCIBusId(busid, (int)sizeof(busid), dev) != cudaSuccess)
		return -1;
	return mcfs_numa_pci_node("/sys", busid);
}

/* Places the RAM tier near the devices (cache_ram_place), before it is pinned. */
static int place_region(struct gpu *g)
{
	int *nodes = calloc(g->ndev ? (size_t)g->ndev : 1, sizeof(*nodes));
	int i;

	if (!nodes)
		return -ENOMEM;
	for (i = 0; i < g->ndev; i++)
		nodes[i] = g->devs[i].numa_node;
	cache_ram_place(g->cache, nodes, (unsigned)g->ndev);
	free(nodes);
	return 0;
}

static int find_devices(struct gpu *g)
{
	struct cudaDeviceProp p;
	cudaError_t e;
	int n = 0, i;

	e = cudaGetDeviceCount(&n);
	if (e == cudaErrorInsufficientDriver && !dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) &&
	    !dlopen("libcuda.so.1", RTLD_LAZY)) {
		snprintf(g->reason, sizeof(g->reason), "no NVIDIA driver (libcuda.so.1 not found)");
		return 0;
	}
	if (e != cudaSuccess || n <= 0) {
		snprintf(g->reason, sizeof(g->reason), "no usable CUDA device: %s",
			 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 0;
	}
	g->devs = calloc((size_t)n, sizeof(*g->devs));
	if (!g->devs)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		e = cudaGetDeviceProperties(&p, i);
		if (e != cudaSuccess) {
			snprintf(g->reason, sizeof(g->reason),
				 "CUDA device %d cannot be queried: %s", i, cudaGetErrorString(e));
			return 0;
		}
		g->devs[i].ordinal = i;
		memcpy(g->devs[i].uuid, p.uuid.bytes, GPU_UUID_SIZE);
		g->devs[i].numa_node = numa_node_of(i);
		MCFS_INFO("gpu: device %d: %s, %zu MiB, PCI %04x:%02x:%02x, NUMA node %d", i,
			  p.name, p.totalGlobalMem >> 20, p.pciDomainID, p.pciBusID, p.pciDeviceID,
			  g->devs[i].numa_node);
	}
	g->ndev = n;
	g->ok = true;
	snprintf(g->reason, sizeof(g->reason), "%d CUDA device(s)", n);
	return 0;
}

static int start_pinning(struct gpu *g)
{
	void *base;
	size_t len;
	int rc;

	cache_ram_region(g->cache, &base, &len);
	g->region = base;
	g->region_len = len;
	g->nchunks = (len + GPU_PIN_CHUNK - 1) / GPU_PIN_CHUNK;
	g->chunk_pinned = calloc(g->nchunks ? g->nchunks : 1, sizeof(*g->chunk_pinned));
	if (!g->chunk_pinned)
		return -ENOMEM;
	rc = pthread_create(&g->pin_thread, NULL, pin_thread, g);
	if (rc)
		return -rc;
	g->pin_started = true;
	return g->cfg->gpu_prepare ? start_prep(g) : 0;
}

int gpu_new(const struct cfg *cfg, struct cache *cache, struct gpu **out)
{
	struct gpu *g;
	int rc;

	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cfg = cfg;
	g->cache = cache;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	rc = find_devices(g);
	if (rc == 0)
		rc = place_region(g); /* also with no device: it starts ram_prefault */
	if (rc == 0 && g->ok)
		rc = start_pinning(g);
	if (rc < 0) {
		MCFS_ERR("gpu: cannot set up the GPU path: %s", strerror(-rc));
		gpu_free(g);
		return rc;
	}
	if (!g->ok)
		MCFS_INFO("gpu: GPU fast path off: %s", g->reason);
	*out = g;
	return 0;
}

void gpu_free(struct gpu *g)
{
	size_t i, off;

	if (!g)
		return;
	if (g->pin_started) {
		pthread_mutex_lock(&g->lock);
		g->stop = true;
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
		pthread_join(g->pin_thread, NULL);
	}
	for (i = 0; g->devs && i < (size_t)g->ndev; i++)
		if (g->devs[i].prep_started)
			pthread_join(g->devs[i].prep, NULL);
	if (g->ok) {
		gpu_ipc_close_all(g);
		gpu_bind_free_all(g);
		gpu_streams_free_all(g);
		for (i = 0; i < g->nchunks; i++) {
			if (!atomic_load(&g->chunk_pinned[i]))
				continue;
			off = i * GPU_PIN_CHUNK;
			(void)cudaHostUnregister(g->region + off);
		}
	}
	free(g->chunk_pinned);
	free(g->devs);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->cond);
	free(g);
}

int gpu_status(struct gpu *g, char *reason, size_t len)
{
	if (reason && len)
		snprintf(reason, len, "%s", g ? g->reason : "GPU module not started");
	return g && g->ok ? 0 : -ENODEV;
}

void gpu_info(struct gpu *g, struct gpu_info *out)
{
	out->ok = g && g->ok;
	out->devices = g ? (unsigned)g->ndev : 0;
	out->pinned_bytes = g ? atomic_load(&g->pinned_bytes) : 0;
	out->ready = 0;
	for (int i = 0; g && g->ok && i < g->ndev; i++)
		out->ready += atomic_load(&g->devs[i].ready) == GPU_DEV_READY;
	snprintf(out->reason, sizeof(out->reason), "%s", g ? g->reason : "GPU module not started");
}
