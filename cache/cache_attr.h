/*
 * cache_attr.h - what the store says about a path: the attribute and
 * directory-entry types, and the limits on names and versions.
 *
 * The stores (cache/remote) fill these, the metadata store (cache/meta.h)
 * records them, and the cache hands them to fs/ (cache_stat(), cache_list()
 * in cache_metadata.h). They live in this small header of cache/ so that fs/
 * gets them from cache.h without seeing the store's interface (remote.h
 * includes this file, not the other way round).
 *
 * Plain data: no functions, no locks; copy them freely.
 */
#ifndef MCFS_CACHE_ATTR_H
#define MCFS_CACHE_ATTR_H

#include <stdint.h>

#define CACHE_VERSION_MAX 160 /* ETag (quoted, up to 128) or "size-mtime_ns" */
#define CACHE_NAME_MAX 256    /* one path component, NUL included */

struct cache_attr {
	uint64_t size;	  /* bytes; 0 for directories */
	uint32_t mode;	  /* S_IFREG, S_IFDIR or S_IFLNK | permission bits */
	int64_t mtime_ns; /* ns since the epoch; 0 when the store has none */
	/* Identity of this content: blocks are cached under it, and reads carry it
	 * (If-Match) so that a replaced object never mixes old and new bytes. */
	char version[CACHE_VERSION_MAX];
};

struct cache_dirent {
	char name[CACHE_NAME_MAX];
	struct cache_attr attr;
};

#endif
