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

#include <pthread.h>
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

/* What the store's symlinks may point at (cfg->symlinks). */
enum remote_links {
	REMOTE_LINKS_CONTAINED, /* "contained": only targets inside the store (default) */
	REMOTE_LINKS_ANY,	/* "any": every target, as the store has it */
	REMOTE_LINKS_NONE,	/* "none": no symlinks at all */
};

#define REMOTE_SAID_SLOTS 4096 /* refusals remembered, so that each is logged once */

struct remote {
	const struct remote_ops *ops;
	const struct cfg *cfg;	   /* borrowed for the life of the remote */
	void *priv;		   /* backend state */
	enum remote_links links;   /* from cfg->symlinks, parsed once at open */
	pthread_mutex_t said_lock; /* guards said, n_said */
	/* Hashes of the refusal lines already logged (open addressing, 0 = empty);
	 * once 3/4 full, refusals are logged every time rather than remembered. */
	uint64_t said[REMOTE_SAID_SLOTS];
	size_t n_said;
	/* Counters: relaxed atomics, bumped by backends through the helpers below. */
	_Atomic uint64_t requests, read_requests, read_bytes, errors, retries;
};

static inline void remote_count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
}

/*
 * Why one name from a store's listing can't be shown, or NULL if it can: it is
 * empty, "." or "..", holds a '/', or is CACHE_NAME_MAX bytes or longer.
 * Returns a constant string (for a log line). Can't fail.
 */
const char *remote_name_refusal(const char *name);

/* The same for a relative path, component by component; an absolute path is refused. */
const char *remote_path_refusal(const char *path);

/*
 * Why a symlink at @link (a store path) with @target leads outside the store,
 * or NULL if it stays inside. Inside means: relative, and its ".." parts all
 * come first ("../../blobs/x"), no more of them than @link has parent
 * directories. A ".." after a name is refused: that name may itself be a link
 * (to "."), so only the store could tell where it ends. Can't fail.
 */
const char *remote_link_refusal(const char *link, const char *target);

/*
 * Keeps one entry per name: sorts @ents by name and drops repeats, keeping a
 * file (or symlink) over a directory of the same name, as a stat of that name
 * would answer; each drop is logged once (through @r; NULL = always), naming
 * @dir. Returns the new count. Can't fail.
 */
size_t remote_dedupe(struct remote *r, const char *dir, struct cache_dirent *ents, size_t n);

/*
 * True the first time @r is asked about this (@what, @path) pair, so that a
 * refusal is logged once, not at every listing. @r NULL: always true.
 */
bool remote_first_time(struct remote *r, const char *what, const char *path);

extern const struct remote_ops remote_posix_ops;
extern const struct remote_ops remote_http_ops;
extern const struct remote_ops remote_s3_ops;

#endif
