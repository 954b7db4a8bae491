/*
 * inode.h - the inode table and the in-memory metadata cache of fs/.
 *
 * A path gets an inode number the first time it is seen and keeps it while
 * its node lives: while the kernel holds the inode or an open does, and
 * after that while the node is among the most recently used idle ones
 * (inode_table.c; the rest are freed, so that a store that shows the daemon
 * a million names over its life costs a bounded table). A path seen again
 * after its node was freed gets a new number; the kernel had forgotten the
 * old one. A file replaced in the store while open with passthrough gets a
 * new number too, and the old one lives on for those opens until the kernel
 * forgets it. Numbers are never reused. Nodes keep the attributes, "no such
 * name" answers and directory listings that the cache gave (cache_stat(),
 * cache_list()) until the expiry it gave with them (attr_ttl, negative_ttl:
 * the policy is cache/'s). Lookups in a directory whose listing is fresh are
 * answered from it without asking the cache; a name it lacks, only while the
 * listing is younger than negative_ttl (after that the lookup lists the
 * directory again). Opens are not: each confirms
 * the file's version (cache_confirm()).
 *
 * Lock: inodes->lock guards the table and every node's fields. It is never
 * held across a call into the cache that may reach the store (cache_stat,
 * cache_list, cache_readlink); cache.h's lock order puts it outermost.
 */
#ifndef MCFS_FS_INODE_H
#define MCFS_FS_INODE_H

#include <sys/stat.h>

#include "fs_int.h"

/*
 * A directory listing snapshot: refcounted, immutable once built. Its entries
 * hold names and the store's attributes, not inode numbers: the node of an
 * entry may be freed while the listing lives, so fs_inode_entry() finds the
 * path's node (or makes it again) when the entry is sent.
 */
struct fs_listing {
	unsigned refs;	   /* guarded by inodes->lock */
	atomic_uint order; /* the requests on one open of it (fs_order_before) */
	char *dir;	   /* the directory's store path */
	uint64_t expires;  /* the entries' attributes are fresh until then (monotonic ns) */
	size_t n;
	struct fs_listent {
		struct cache_attr attr;
		char name[CACHE_NAME_MAX];
	} ents[];
};

MCFS_MUST_CHECK int fs_inodes_new(struct fs_session *s, struct fs_inodes **out);

/* Lookups of a node the last daemon gave the kernel (handover.h): the kernel's
 * own count died with it, so the node is held until unmount. */
#define FS_NLOOKUP_RESUMED (1ull << 40)

/*
 * Resume (handover.c): the node of inode @ino, path @path, as the last
 * daemon left it; a retired one keeps @a (its opens' version) for good.
 * Returns 0 (an inode already there is left as it is) or -ENOMEM.
 */
MCFS_MUST_CHECK int fs_inode_restore(struct fs_session *s, uint64_t ino, const char *path,
				     bool retired, const struct cache_attr *a);

/*
 * Resume: an open of @ino's version @a, as the last daemon made it (@flags
 * FS_HO_*): the node counts it as open_file() did, and a passthrough open
 * pins its backing file again (the kernel reads it). A new reference to the
 * version's identity in *f. 0 or -errno.
 */
MCFS_MUST_CHECK int fs_inode_resume_open(struct fs_session *s, uint64_t ino, unsigned flags,
					 int backing_id, const struct cache_attr *a,
					 struct cache_file **f);
void fs_inodes_free(struct fs_inodes *t);

/*
 * Looks up @name in directory @parent. On success fills @e (attr, ino,
 * timeouts) and counts one lookup. A missing name gives 0 with e->ino == 0
 * and the negative timeout, so the kernel caches the miss. May list @parent
 * again (a miss in a listing older than negative_ttl). Errors: -ENOTDIR,
 * -EIO, -ENAMETOOLONG, -EINVAL for a name that would escape the store.
 */
MCFS_MUST_CHECK int fs_inode_lookup(struct fs_session *s, fuse_ino_t parent, const char *name,
				    struct fuse_entry_param *e);

/*
 * Re-confirmation (SIGHUP, `mcfs refresh`): drops the trust in every
 * attribute, "no such name" and listing kept for store path @prefix and the
 * paths below it ("" for all), here, in the kernel (its attributes, for the
 * inodes it holds) and in cache_dir (cache_distrust()), so that the next
 * lookup, stat or readdir of each asks the store. The kernel's dentries stay
 * until their entry_timeout: a name it holds is looked up again then, and a
 * name it was told is missing, after negative_ttl. Returns how many paths
 * were marked. No lock held. Any thread, a request's included: an
 * attributes-only invalidation never blocks (no writeback cache). Can't fail:
 * a notification the kernel refuses leaves that inode's attributes to
 * attr_ttl.
 */
size_t fs_inode_refresh(struct fs_session *s, const char *prefix);

/* Drops @n lookups of @ino. A node nothing holds any more becomes idle (kept
 * among the most recently used, see inode_table.c), or is freed if it was
 * retired for a newer version. */
void fs_inode_forget(struct fs_session *s, fuse_ino_t ino, uint64_t n);

/* Current attributes of @ino (revalidated with the store after attr_ttl), as
 * the kernel may be shown them: the size never drops below that of a version
 * still open through the page cache (see inode.c). */
MCFS_MUST_CHECK int fs_inode_getattr(struct fs_session *s, fuse_ino_t ino, struct stat *st);

/*
 * The listing of directory @ino; returns a new reference, drop with
 * fs_listing_put(). Its entries get inode numbers as they are sent
 * (fs_inode_entry()).
 */
MCFS_MUST_CHECK int fs_inode_list(struct fs_session *s, fuse_ino_t ino, struct fs_listing **out);
void fs_listing_put(struct fs_session *s, struct fs_listing *l);

/*
 * For entry @i of listing @l as readdir sends it (@plus: readdirplus, which
 * counts one lookup): returns the inode number of the path's node now (not a
 * retired one; made again from the entry if it was freed) and fills @st as
 * getattr would show it (while opens of an older, larger version use the
 * page cache, that version's size: see inode.c). 0 (nothing counted) only on
 * ENOMEM. Give a counted lookup back with fs_inode_forget() if the entry is
 * not sent.
 */
fuse_ino_t fs_inode_entry(struct fs_session *s, const struct fs_listing *l, size_t i, bool plus,
			  struct stat *st);

/* How one open uses the kernel's page cache, or passthrough. */
struct fs_open_mode {
	bool keep_cache;  /* the pages cached are of this version: keep them */
	bool direct_io;	  /* a cold open: reads bypass the page cache (still a page-cache open) */
	bool passthrough; /* the kernel reads the backing file: backing_id */
	int backing_id;	  /* the inode's registered backing file, when passthrough */
};

/*
 * For open(): the cache identity of the file's current version, confirmed
 * with the store now (cache_confirm(), unless open_check=ttl; new reference,
 * drop with cache_file_put()) and how the open uses the page cache (see
 * fs_open_mode; end it with fs_inode_close()). An open of the inode's
 * passthrough version while its passthrough opens last is passthrough too.
 * If the store has replaced that version, the inode keeps it for those opens
 * and the path gets a new inode number (the kernel allows neither a second
 * backing file nor a cached open on the old inode): -ESTALE, upon which the
 * VFS looks the path up again and opens the new inode. Errors: -EISDIR,
 * -ENOENT, -EIO, -ESTALE and the store's.
 */
MCFS_MUST_CHECK int fs_inode_open(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
				  struct fs_open_mode *mode);

/*
 * An open of @ino decides its mode (fs_inode_open(), fs_inode_passthrough())
 * and is answered between these two, one open of an inode at a time: two
 * opens of a cold file that both waited for its whole fetch would otherwise
 * each count the other as the cached open beside which the kernel lets no
 * open switch to passthrough, and both would read through FUSE. Opens with
 * O_NONBLOCK do not take part (they must not wait, and never switch a cold
 * file). Can't fail; _end() without _begin() is harmless.
 */
void fs_inode_open_begin(struct fs_session *s, fuse_ino_t ino);
void fs_inode_open_end(struct fs_session *s, fuse_ino_t ino);

/*
 * Turns a cached open of @f (as fs_inode_open() gave @mode) into
 * a passthrough open when the kernel allows it: the file has a backing file
 * (cache_backing_get()) and the inode has no other cached open. The inode
 * holds one backing id and one pin of the backing file while passthrough
 * opens last (the kernel allows one backing file per inode, and no cached
 * open beside passthrough ones). @req registers the backing file. Returns
 * true when @mode became passthrough; false leaves it as it was (counted as
 * a fallback when the file had a backing file). Can't fail.
 */
bool fs_inode_passthrough(struct fs_session *s, fuse_req_t req, fuse_ino_t ino,
			  struct cache_file *f, struct fs_open_mode *mode);

/*
 * A push of @ino (push.c) ended with every block of @version in the kernel's
 * page cache, pushed or READ: later opens of that version keep those pages
 * (fs_inode_keeps_pages()) instead of turning passthrough, whose reads would
 * go to the backing file, which the disk tier wrote around the page cache.
 * Holds until a forget of the inode (its pages went with it) or another
 * version. Can't fail.
 */
void fs_inode_pages_whole(struct fs_session *s, fuse_ino_t ino, const char *version);

/*
 * True when an open of @f (a cached open, as fs_inode_open() gave @mode)
 * should stay one because a push filled the inode's page cache with @f's
 * version whole (fs_inode_pages_whole()); counted (push_kept_opens). The
 * caller then skips fs_inode_passthrough(). Can't fail.
 */
bool fs_inode_keeps_pages(struct fs_session *s, fuse_ino_t ino, const struct cache_file *f,
			  const struct fs_open_mode *mode);

/*
 * Makes a cached open (not passthrough) of a file the cache does not hold
 * whole direct_io when the connection allows it (cold_direct_io without
 * cold_push; see inode_open.c): the reads then bypass the page cache.
 * The open stays counted as a page-cache open of its version. Returns true
 * when it did. Can't fail.
 */
bool fs_inode_cold_direct(struct fs_session *s, struct fs_open_mode *mode);

/* At release of a handle of @f opened with @mode; @req (NULL at teardown)
 * unregisters the inode's backing file after its last passthrough open. */
void fs_inode_close(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct cache_file *f,
		    const struct fs_open_mode *mode);

/* The cache identity of @ino's current version, as fs_inode_open() but
 * without counting as an open. New reference: drop with cache_file_put(). */
MCFS_MUST_CHECK int fs_inode_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f);
/* As fs_inode_file(), with the version an open would see now (confirmed with
 * the store unless open_check=ttl), without counting an open. */
MCFS_MUST_CHECK int fs_inode_file_now(struct fs_session *s, fuse_ino_t ino, struct cache_file **f);
/* True if @ino has an open that reads through the page cache now: the kernel
 * would switch no other open of it to passthrough. Can't fail. */
bool fs_inode_cached_open(struct fs_session *s, fuse_ino_t ino);

/*
 * Forgets what the store said about @ino, so the next getattr or open asks
 * again (after a read found the file changed). Open files keep their version
 * (and keep failing); the next open sees the new one. Can't fail.
 */
void fs_inode_invalidate(struct fs_session *s, fuse_ino_t ino);

/* Symlink target of @ino into buf. Returns 0 or a negative errno. */
MCFS_MUST_CHECK int fs_inode_readlink(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len);

/* The node's store path (copied into buf). Returns 0 or -ENOENT. */
MCFS_MUST_CHECK int fs_inode_path(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len);

/* Fills a struct stat from store attributes (read-only view, our uid/gid). */
void fs_attr_to_stat(const struct fs_session *s, fuse_ino_t ino, const struct cache_attr *a,
		     struct stat *st);

#endif
