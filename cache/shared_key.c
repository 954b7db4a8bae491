/*
 * shared_key.c - how the shared block tier names a block: the object's name
 * (its seal, the trailer after the bytes, is shared_seal.c's). A pure
 * function, unit-tested in shared_test.c.
 *
 * The name holds everything that makes two blocks the same: the store (the
 * name its disk-tier directory has: kind, source and, for s3, the service),
 * the file's path, version and size (hashed: versions are ETags or
 * size-mtime-inode strings, paths may hold anything, and the hash keeps the
 * name S3-safe and short), the block size and the index. A readable slug of
 * the file name is kept for whoever lists the bucket. "mcfs2/" is the
 * layout's version: a later layout gets new names, never misread old ones
 * (mcfs1/ objects had a trailer of checksums anyone could compute; mcfs2/
 * ones are sealed with the cluster's key, and nodes of both kinds can share a
 * bucket without refusing, and writing over, each other's blocks).
 */
#define _GNU_SOURCE
#include "shared.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SLUG_MAX 40 /* of the file name: enough to tell shards apart */

/* The file name's last SLUG_MAX characters, '_' for all but [A-Za-z0-9._-]. */
static void slug_of(const char *path, char *out)
{
	const char *s = strrchr(path, '/');
	size_t n = 0;

	s = s ? s + 1 : path;
	if (strlen(s) > SLUG_MAX)
		s += strlen(s) - SLUG_MAX;
	for (; *s; s++) {
		bool keep = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			    (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' || *s == '_';

		out[n++] = keep ? *s : '_';
	}
	if (n == 0 || (n <= 2 && out[0] == '.')) /* "", ".", "..": not a name to show */
		out[n++] = '_';
	out[n] = '\0';
}

int cache_shared_key(const char *store, uint64_t bs, const struct cache_shared_block *blk,
		     char *out, size_t outlen)
{
	size_t plen = strlen(blk->path) + 1, vlen = strlen(blk->version) + 1;
	char slug[SLUG_MAX + 2], bsbuf[32], *id;
	XXH128_hash_t h;
	int len;

	/* path NUL version NUL size: no two (path, version, size) give the same bytes */
	id = malloc(plen + vlen + 24);
	if (!id)
		return -ENOMEM;
	memcpy(id, blk->path, plen);
	memcpy(id + plen, blk->version, vlen);
	len = snprintf(id + plen + vlen, 24, "%" PRIu64, blk->size);
	h = XXH3_128bits(id, plen + vlen + (size_t)len);
	free(id);
	slug_of(blk->path, slug);
	cfg_fmt_size(bs, bsbuf, sizeof(bsbuf));
	len = snprintf(out, outlen, "mcfs2/%s/%s-%016" PRIx64 "%016" PRIx64 "/%s-%" PRIu64, store,
		       slug, (uint64_t)h.high64, (uint64_t)h.low64, bsbuf, blk->index);
	return len < 0 || (size_t)len >= outlen ? -ENAMETOOLONG : 0;
}
