/*
 * gpu_nocuda.c - the GPU module of a build without a CUDA 12 runtime
 * (MCFS_HAVE_CUDA off): the same interface, always answering -ENODEV with
 * the reason, so that fs/ and the clients need no #ifdef. A build with CUDA
 * compiles gpu.c, ipc.c and copy.c instead of this file; request.c is in both.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "gpu_build.h" /* generated: MCFS_GPU_BUILD, why CUDA is not built in */
#include "cache_ram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "not built: WHY", as `mcfs --version` says it */
#define NO_CUDA MCFS_GPU_BUILD

struct gpu {
	struct cache *cache; /* borrowed */
};

int gpu_new(const struct cfg *cfg, struct cache *cache, struct gpu **out)
{
	struct gpu *g;

	(void)cfg;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cache = cache;
	cache_ram_place(cache, NULL, 0); /* no device to place it near: faulted in only */
	MCFS_INFO("gpu: GPU fast path off: " NO_CUDA);
	*out = g;
	return 0;
}

void gpu_free(struct gpu *g)
{
	free(g);
}

int gpu_status(struct gpu *g, char *reason, size_t len)
{
	(void)g;
	if (reason && len)
		snprintf(reason, len, "%s", NO_CUDA);
	return -ENODEV;
}

void gpu_info(struct gpu *g, struct gpu_info *out)
{
	(void)g;
	out->ok = false;
	out->devices = 0;
	out->pinned_bytes = 0;
	out->ready = 0;
	snprintf(out->reason, sizeof(out->reason), "%s", NO_CUDA);
}

int gpu_load(struct gpu *g, struct cache_file *f, const struct gpu_load_req *req,
	     gpu_interrupted_fn intr, void *intr_arg, struct gpu_load_result *res)
{
	(void)g;
	(void)f;
	(void)req;
	(void)intr;
	(void)intr_arg;
	memset(res, 0, sizeof(*res));
	return -ENODEV;
}

int gpu_bind(struct gpu *g, const struct gpu_load_req *req, bool proof, unsigned char *nonce,
	     bool *bound)
{
	*bound = false;
	(void)g;
	(void)req;
	(void)proof;
	(void)nonce;
	return -ENODEV;
}
