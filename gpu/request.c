/*
 * request.c - what a load request means, compiled in both builds (with and
 * without CUDA): a load that names no ranges copies the safetensors data
 * section, found here from the file's first 8 bytes.
 *
 * It lives in gpu/ because gpu/ knows the safetensors format
 * (safetensors.h), and in both builds because a file that is not
 * safetensors is refused with -EBADMSG before the question of a GPU arises:
 * a client learns the same thing on any machine.
 */
#define _GNU_SOURCE
#include "gpu.h"
#include "safetensors.h"

#include <errno.h>

int gpu_data_section(struct cache *c, struct cache_file *f, struct gpu_range *out)
{
	uint64_t size = cache_file_size(f), doff;
	struct cache_block *b;
	struct cache_span sp;
	int rc;

	if (size < 8)
		return -EBADMSG;
	rc = cache_span(c, f, 0, 8, &sp);
	if (rc < 0)
		return rc;
	if (sp.len < 8) /* cannot happen: cfg.c allows no block under 1 MiB */
		return -EBADMSG;
	rc = cache_block_get(c, f, sp.index, &b);
	if (rc < 0)
		return rc;
	rc = mcfs_st_data_offset((const unsigned char *)cache_block_data(b) + sp.boff, size, &doff);
	cache_block_put(c, b);
	if (rc < 0)
		return rc;
	out->file_off = doff;
	out->len = size - doff;
	out->dst_off = 0;
	return 0;
}
