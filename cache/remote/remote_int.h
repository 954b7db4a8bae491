/*
 * remote_int.h - what remote.c shares with the backends. Not for use outside
 * cache/remote/.
 *
 * A backend provides one constant `struct remote_ops`. remote.c owns the
 * struct remote (counters, the cfg pointer) and calls the ops; a backend keeps
 * its own state behind r->priv. Every op has remote.h's contract.
 */
#ifndef MCFS_REMOTE_INT_H
#define MCFS_REMOTE_INT_H

#include <stdatomic.h>

#include "remote.h"

struct remote_ops {
	const char *kind;
	/* Sets r->priv. cfg->source has been matched to this backend. */
	int (*open)(struct remote *r);
	void (*close)(struct remote *r);
	int (*stat)(struct remote *r, const char *path, struct cache_attr *out);
	int (*list)(struct remote *r, const char *path, struct cache_dirent **out, size_t *n);
	int (*readlink)(struct remote *r, const char *path, char *buf, size_t len);
	ssize_t (*read)(struct remote *r, const struct remote_obj *obj, uint64_t off, void *buf,
			size_t len);
	int (*statfs)(struct remote *r, uint64_t *total, uint64_t *avail);
};

struct remote {
	const struct remote_ops *ops;
	const struct cfg *cfg; /* borrowed for the life of the remote */
	void *priv;	       /* backend state */
	/* Counters: relaxed atomics, bumped by backends through the helpers below. */
	_Atomic uint64_t requests, read_requests, read_bytes, errors, retries;
};

static inline void remote_count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
}

extern const struct remote_ops remote_posix_ops;
extern const struct remote_ops remote_http_ops;
extern const struct remote_ops remote_s3_ops;

#endif
