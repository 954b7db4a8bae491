/*
 * shared_key.c - how the shared block tier names and seals a block: the
 * object name, and the trailer stored after the block's bytes. Pure
 * functions, unit-tested in shared_test.c.
 *
 * The name holds everything that makes two blocks the same: the store (the
 * name its disk-tier directory has: kind, source and, for s3, the service),
 * the file's path, version and size (hashed: versions are ETags or
 * size-mtime-inode strings, paths may hold anything, and the hash keeps the
 * name S3-safe and short), the block size and the index. A readable slug of
 * the file name is kept for whoever lists the bucket. "mcfs1/" is the
 * layout's version: a later layout gets new names, never misread old ones.
 *
 * The trailer (32 bytes, little-endian): "MCFSBLK1", the block's length, a
 * hash of the object's name (so an object copied or renamed to another name
 * is not taken for that block), and XXH3-64 of the bytes. In the object
 * itself, not in x-amz-meta headers, so that any S3-compatible service, a
 * proxy or a copy tool keeps it, and the object proves itself.
 */
#define _GNU_SOURCE
#include "shared.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define TRAILER_MAGIC "MCFSBLK1"
#define SLUG_MAX 40 /* of the file name: enough to tell shards apart */

static void put_le64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

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
	len = snprintf(out, outlen, "mcfs1/%s/%s-%016" PRIx64 "%016" PRIx64 "/%s-%" PRIu64, store,
		       slug, (uint64_t)h.high64, (uint64_t)h.low64, bsbuf, blk->index);
	return len < 0 || (size_t)len >= outlen ? -ENAMETOOLONG : 0;
}

void cache_shared_trailer(const char *key, const void *data, uint32_t len,
			  unsigned char out[CACHE_SHARED_TRAILER])
{
	memcpy(out, TRAILER_MAGIC, 8);
	put_le64(out + 8, len);
	put_le64(out + 16, XXH3_64bits(key, strlen(key)));
	put_le64(out + 24, XXH3_64bits(data, len));
}

int cache_shared_verify(const char *key, const void *data, uint32_t len,
			const unsigned char trailer[CACHE_SHARED_TRAILER], const char **why)
{
	if (memcmp(trailer, TRAILER_MAGIC, 8) != 0) {
		*why = "no mcfs trailer at its end";
		return -EBADMSG;
	}
	if (get_le64(trailer + 8) != len) {
		*why = "its trailer gives another length";
		return -EBADMSG;
	}
	if (get_le64(trailer + 16) != XXH3_64bits(key, strlen(key))) {
		*why = "its trailer is another block's";
		return -EBADMSG;
	}
	if (get_le64(trailer + 24) != XXH3_64bits(data, len)) {
		*why = "checksum mismatch";
		return -EBADMSG;
	}
	return 0;
}
