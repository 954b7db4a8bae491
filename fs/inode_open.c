/*
 * inode_open.c - opens of files (inode.h): the version an open reads, and
 * how it uses the kernel's page cache or passthrough (the nodes: inode.c).
 *
 * Opens are not served from the node: each asks the cache to confirm the
 * file's version with the store (cache_confirm(): close-to-open, unless
 * open_check=ttl), so attr_ttl governs only lookup, getattr and readdir.
 *
 * A file that changes in the store while it is open. The kernel keeps one
 * size per inode and ends every read of it, of any open, at that size. Told
 * that a file of 64 MiB is now 20 MiB, it would end the read of an open of
 * the 64 MiB version at 20 MiB with a clean EOF: bytes of neither version,
 * and nothing to tell the reader. So while opens of a version use the page
 * cache, the size shown (getattr, lookup, readdirplus) never drops below
 * that version's (inode.c's shown_size()): their reads past the new end reach the
 * cache, which serves the old version's bytes it holds and fails the others
 * with EIO (their blocks are keyed by the old version, which the store no
 * longer has). Stat shows the larger size until the last old open closes;
 * then the kernel is told to ask again. An open of the new version meanwhile
 * gets a new inode, as under passthrough below: one inode's page cache holds
 * one version's pages, and an open that bypassed it (direct_io) could still
 * fill it with its own through an mmap.
 *
 * A file replaced in the store while open with passthrough. The kernel holds
 * one backing file per inode, of the old version, and refuses any other open
 * of that inode (EINVAL cached, EBUSY with another backing file), so the new
 * version needs another inode (and so does a new version while page-cache
 * opens of the old one last, above): the node is retired (fs_node_retire()). It leaves the
 * path hash and keeps its inode number, its attributes and its opens, which
 * read the old version whole from its backing file; the path gets a new node,
 * so a new inode number, at once. Only a store answer about the path itself
 * (fs_node_refresh(): lookup, getattr, open) does this; a listing may be older than
 * the version the passthrough opens confirmed, so it never does. An open of
 * a retired inode (the kernel's dentry is still fresh: entry_timeout is
 * attr_ttl) answers ESTALE, and the VFS walks the path once more with
 * LOOKUP_REVAL: that LOOKUP answers the new number, the kernel drops the old
 * dentry (fuse_dentry_revalidate: another nodeid) and opens the new inode.
 * A retired node is freed when the kernel forgot it and its opens closed
 * (fs_node_settle()); inode numbers are never reused.
 *
 * Cold opens (cold_direct_io). An open of a file the cache does not hold
 * whole is answered with direct_io when the kernel allows an mmap of such an
 * open (fs_conn.cold_dio): its reads go from the cache into the reader's
 * buffer, one copy, with no page allocated, where a page-cache read copies
 * twice. It counts as a page-cache open all the same (pc_opens, the version
 * that owns the inode's page cache), because an mmap of it reads through that
 * page cache: so it holds the inode's version as page-cache opens do, and no
 * passthrough open joins it (the kernel puts an mmapped direct_io open's
 * inode in cached mode, and would refuse one with ETXTBSY). Once a file is
 * complete its opens use the page cache, or passthrough.
 */
#define _GNU_SOURCE
#include "inode.h"
#include "inode_int.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_metadata.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/*
 * Refreshes @ino's node with the store's answer now (cache_confirm()), then
 * runs with the lock held: returns the node, or NULL with *rc set.
 */
static struct fs_node *confirmed_node(struct fs_session *s, fuse_ino_t ino, int *rc)
{
	struct fs_node *n;
	char path[4096];
	bool ok, retired;

	*rc = fs_node_state(s, ino, path, sizeof(path), &ok, &retired);
	if (*rc == 0 && retired)
		*rc = -ESTALE; /* see open_file() */
	if (*rc == 0)
		*rc = fs_node_refresh(s, path, true);
	if (*rc < 0)
		return NULL;
	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (!n) {
		pthread_mutex_unlock(&s->inodes->lock);
		*rc = -ENOENT;
	}
	return n;
}

/*
 * Decides how an open of version @v uses the kernel's page cache (lock held).
 * One inode has one page cache, so only one version may be in it: the first
 * open after all page-cache opens closed owns it (and keeps the pages if they
 * are of the same version); an open of another version while those are open
 * never gets here (open_file() retires the node). Returns true if the version
 * changed.
 *
 * An owner of a new version does not keep the pages, and the kernel drops
 * them after our reply, while the open returns: until then the old
 * version's pages are still there. So every open of its period drops them
 * too (pc_keep false), each before its own reads: one that kept them could
 * read old pages in that window (seen with a version swapped every 5 ms,
 * tests/test_no_mixed_versions.py: three blocks of one version and the last
 * of the other). The first period that begins on the same version keeps
 * them: by then every open that dropped them has returned.
 */
static bool page_cache_mode(struct fs_session *s, struct fs_node *n, const char *v,
			    struct fs_open_mode *mode)
{
	bool same = strcmp(n->open_version, v) == 0;
	bool changed = n->open_version[0] != '\0' && !same;

	if (n->pt_opens > 0) {
		/* The kernel holds a backing file on this inode: this open must use
		 * it; one of another version never gets here (open_file()). */
		mode->passthrough = true;
		mode->backing_id = n->backing_id;
		n->pt_opens++;
		return false;
	}
	if (n->pc_opens == 0)
		n->pc_keep = same || n->open_version[0] == '\0';
	if (!same)
		n->pc_whole = false;
	snprintf(n->open_version, sizeof(n->open_version), "%s", v);
	n->open_size = n->attr.size;
	mode->keep_cache = s->cfg.keep_cache && n->pc_keep;
	n->pc_opens++;
	return changed;
}

/*
 * The identity of @ino's current version; with @mode, as open() sees it: the
 * version confirmed with the store now (unless open_check=ttl). Without
 * @mode (xattrs), as fresh as attr_ttl allows.
 */
static int open_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
		     struct fs_open_mode *mode, bool confirm)
{
	bool changed = false;
	struct cache_attr a;
	char path[4096];
	struct fs_node *n;
	int rc;

	n = confirm ? confirmed_node(s, ino, &rc) : fs_node_fresh(s, ino, &rc);
	if (!n)
		return rc;
	if (!confirm && n->exists && S_ISREG(n->attr.mode) && n->attr.version[0] == '\0') {
		/* A listing gave no version (an http manifest): reads must carry the
		 * store's own validator, so ask the store before the first read. */
		snprintf(path, sizeof(path), "%s", n->path);
		pthread_mutex_unlock(&s->inodes->lock);
		rc = fs_node_refresh(s, path, false);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&s->inodes->lock);
		n = fs_node_by_ino(s->inodes, ino);
		if (!n) {
			pthread_mutex_unlock(&s->inodes->lock);
			return -ENOENT;
		}
	}
	if (!n->exists)
		rc = -ENOENT;
	else if (S_ISDIR(n->attr.mode))
		rc = -EISDIR;
	else if (!S_ISREG(n->attr.mode))
		rc = -EINVAL;
	if (rc == 0) {
		a = n->attr;
		snprintf(path, sizeof(path), "%s", n->path);
		/* A passthrough inode whose version the store replaced (retired by
		 * fs_node_refresh(), or here when the node's attributes moved on between
		 * an open and its switch to passthrough): the kernel could open no
		 * other version on it. ESTALE makes the VFS look the path up again
		 * (LOOKUP_REVAL), which finds the path's new node. */
		if (mode && !n->retired && n->pt_opens > 0 && strcmp(n->pt_version, a.version) != 0)
			fs_node_retire(s, n);
		/* Page-cache opens of another version: the same, and the node
		 * keeps what the kernel was told of theirs. */
		if (mode && !n->retired && n->pc_opens > 0 &&
		    strcmp(n->open_version, a.version) != 0) {
			n->attr.size = n->open_size;
			snprintf(n->attr.version, sizeof(n->attr.version), "%s", n->open_version);
			fs_node_retire(s, n);
		}
		if (mode && n->retired)
			rc = -ESTALE;
		else if (mode)
			changed = page_cache_mode(s, n, a.version, mode);
		if (mode)
			fs_node_settle(s, n); /* held by its open now */
	}
	pthread_mutex_unlock(&s->inodes->lock);
	if (rc < 0)
		return rc;
	/* A new version: the kernel's cached size and times are stale. Attributes
	 * only (offset -1): dropping pages from inside a request could deadlock,
	 * and !keep_cache makes the kernel drop them at this open anyway. */
	if (changed && s->se)
		fuse_lowlevel_notify_inval_inode(s->se, ino, -1, 0);
	return cache_file_get(s->cache, path, &a, f);
}

int fs_inode_open(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
		  struct fs_open_mode *mode)
{
	return open_file(s, ino, f, mode, cache_open_confirms(s->cache));
}

void fs_inode_close(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct cache_file *f,
		    const struct fs_open_mode *mode)
{
	bool reshow = false;
	struct fs_node *n;
	int id = 0;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n && mode->passthrough && n->pt_opens > 0 && --n->pt_opens == 0) {
		id = n->backing_id;
		n->backing_id = 0;
	} else if (n && !mode->passthrough && n->pc_opens > 0 && --n->pc_opens == 0 &&
		   n->size_held) {
		n->size_held = false;
		reshow = true;
	}
	if (n) /* idle now if the kernel forgot it; freed if it was retired */
		fs_node_settle(s, n);
	pthread_mutex_unlock(&s->inodes->lock);
	/* The kernel was shown the closed version's size: attributes only (offset
	 * -1), which is safe from inside a request, as in open_file(). */
	if (reshow && s->se)
		fuse_lowlevel_notify_inval_inode(s->se, ino, -1, 0);
	if (id == 0)
		return;
#ifdef MCFS_FUSE_PASSTHROUGH
	/* The kernel dropped the inode's use of it before this RELEASE came. */
	if (req)
		fuse_passthrough_close(req, id);
#else
	(void)req;
#endif
	cache_backing_put(s->cache, f);
}

void fs_inode_open_begin(struct fs_session *s, fuse_ino_t ino)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	/* Sleeps on inodes->opened (inodes->lock) while another open of @ino
	 * decides and answers; the node outlives it (the opener's lookup holds
	 * it), and is looked up again after each wake. */
	while ((n = fs_node_by_ino(s->inodes, ino)) && n->opening)
		pthread_cond_wait(&s->inodes->opened, &s->inodes->lock);
	if (n)
		n->opening = true;
	pthread_mutex_unlock(&s->inodes->lock);
}

void fs_inode_open_end(struct fs_session *s, fuse_ino_t ino)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n && n->opening) {
		n->opening = false;
		pthread_cond_broadcast(&s->inodes->opened);
	}
	pthread_mutex_unlock(&s->inodes->lock);
}

void fs_inode_pages_whole(struct fs_session *s, fuse_ino_t ino, const char *version)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n && !n->retired && n->nlookup > 0 && strcmp(n->open_version, version) == 0)
		n->pc_whole = true;
	pthread_mutex_unlock(&s->inodes->lock);
}

bool fs_inode_keeps_pages(struct fs_session *s, fuse_ino_t ino, const struct cache_file *f,
			  const struct fs_open_mode *mode)
{
	struct fs_node *n;
	bool keep;

	if (mode->passthrough)
		return false;
	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	keep = n && n->pc_whole && strcmp(n->open_version, cache_file_version(f)) == 0;
	pthread_mutex_unlock(&s->inodes->lock);
	if (keep)
		atomic_fetch_add_explicit(&s->push_kept_opens, 1, memory_order_relaxed);
	return keep;
}

bool fs_inode_passthrough(struct fs_session *s, fuse_req_t req, fuse_ino_t ino,
			  struct cache_file *f, struct fs_open_mode *mode)
{
#ifdef MCFS_FUSE_PASSTHROUGH
	const char *v = cache_file_version(f);
	bool done = false, keep_pin = false, refused = false;
	struct fs_node *n;
	int fd = -1, id, rc;

	if (mode->passthrough)
		return true;
	/* Builds the backing file if need be (seconds): no lock held. */
	rc = cache_backing_get(s->cache, f, &fd);
	if (rc < 0)
		return false;
	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n && n->pt_opens > 0 && strcmp(n->pt_version, v) == 0) {
		/* Another open turned the inode over meanwhile: join it. */
		done = true;
	} else if (n && n->pt_opens == 0 && n->pc_opens == 1 && strcmp(n->open_version, v) == 0) {
		/* Ours is the inode's only cached open: the kernel lets it switch. */
		id = fuse_passthrough_open(req, fd);
		if (id > 0) {
			n->backing_id = id;
			snprintf(n->pt_version, sizeof(n->pt_version), "%s", v);
			done = keep_pin = true; /* the node's pin, put at the last close */
		} else {
			refused = true;
		}
	}
	if (done) {
		n->pc_opens--;
		n->pt_opens++;
		mode->passthrough = true;
		mode->keep_cache = false; /* the kernel refuses it with passthrough */
		mode->backing_id = n->backing_id;
	}
	pthread_mutex_unlock(&s->inodes->lock);
	close(fd); /* the kernel holds its own reference to a registered file */
	if (!keep_pin)
		cache_backing_put(s->cache, f);
	if (!done)
		atomic_fetch_add_explicit(&s->passthrough_fallbacks, 1, memory_order_relaxed);
	if (refused)
		MCFS_DEBUG("passthrough of %s refused by the kernel (libfuse says why): read "
			   "through the cache",
			   cache_file_path(f));
	return done;
#else
	(void)s, (void)req, (void)ino, (void)f, (void)mode;
	return false;
#endif
}

bool fs_inode_cold_direct(struct fs_session *s, struct fs_open_mode *mode)
{
	if (mode->passthrough || !atomic_load(&s->conn.cold_dio))
		return false;
	mode->direct_io = true;
	mode->keep_cache = false;
	atomic_fetch_add_explicit(&s->cold_direct_opens, 1, memory_order_relaxed);
	return true;
}

int fs_inode_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f)
{
	return open_file(s, ino, f, NULL, false);
}

int fs_inode_file_now(struct fs_session *s, fuse_ino_t ino, struct cache_file **f)
{
	return open_file(s, ino, f, NULL, cache_open_confirms(s->cache));
}

bool fs_inode_cached_open(struct fs_session *s, fuse_ino_t ino)
{
	struct fs_node *n;
	bool cached;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	cached = n && n->pc_opens > 0;
	pthread_mutex_unlock(&s->inodes->lock);
	return cached;
}

int fs_inode_resume_open(struct fs_session *s, uint64_t ino, unsigned flags, int backing_id,
			 const struct cache_attr *a, struct cache_file **f)
{
	struct fs_node *n;
	char path[4096];
	int rc, fd;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (!n) {
		pthread_mutex_unlock(&s->inodes->lock);
		return -ENOENT;
	}
	snprintf(path, sizeof(path), "%s", n->path);
	if (flags & FS_HO_PT) {
		n->pt_opens++;
		n->backing_id = backing_id;
		snprintf(n->pt_version, sizeof(n->pt_version), "%s", a->version);
	} else {
		if (n->pc_opens == 0)
			n->pc_keep = (flags & FS_HO_KEEP) != 0;
		n->pc_opens++;
		snprintf(n->open_version, sizeof(n->open_version), "%s", a->version);
		n->open_size = a->size;
	}
	fs_node_settle(s, n);
	pthread_mutex_unlock(&s->inodes->lock);
	rc = cache_file_get(s->cache, path, a, f);
	if (rc < 0 || !(flags & FS_HO_PT))
		return rc;
	/* The kernel reads the backing file of this open itself: it must keep
	 * every block (the node's pin, put at the last close). */
	rc = cache_backing_get(s->cache, *f, &fd);
	if (rc == 0) {
		close(fd);
		return 0;
	}
	MCFS_WARN("%s: the backing file of a resumed passthrough open could not be pinned (%s): "
		  "the disk tier may evict it",
		  path, strerror(-rc));
	return 0;
}
