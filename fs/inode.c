/*
 * inode.c - inode numbers, attributes, listings and negative entries.
 *
 * One node per store path ever seen, found by path (hash) or by inode number
 * (array index). A node records what the cache last said about its path and
 * until when that holds: attributes (or "missing"), and for a directory its
 * listing. Answers are served from the node while cache_attr_fresh() says
 * so (the cache works out the expiry from attr_ttl and negative_ttl, and
 * from LMDB's record after a restart); a stale node is refreshed with one
 * cache_stat() made without the lock, so a slow store never blocks lookups
 * elsewhere. A listing also refreshes every child's attributes, so `ls -lR`
 * costs one store request per directory.
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
 * that version's (shown_size()): their reads past the new end reach the
 * cache, which serves the old version's bytes it holds and fails the others
 * with EIO (their blocks are keyed by the old version, which the store no
 * longer has). Opens of the new version bypass the page cache meanwhile
 * (page_cache_mode()), so the kernel does not end theirs at the size shown
 * either: the cache ends them at their own. Stat shows the larger size until
 * the last old open closes; then the kernel is told to ask again.
 *
 * A file replaced in the store while open with passthrough. The kernel holds
 * one backing file per inode, of the old version, and refuses any other open
 * of that inode (EINVAL cached, EBUSY with another backing file), so the new
 * version needs another inode: the node is retired (retire()). It leaves the
 * path hash and keeps its inode number, its attributes and its opens, which
 * read the old version whole from its backing file; the path gets a new node,
 * so a new inode number, at once. Only a store answer about the path itself
 * (refresh(): lookup, getattr, open) does this; a listing may be older than
 * the version the passthrough opens confirmed, so it never does. An open of
 * a retired inode (the kernel's dentry is still fresh: entry_timeout is
 * attr_ttl) answers ESTALE, and the VFS walks the path once more with
 * LOOKUP_REVAL: that LOOKUP answers the new number, the kernel drops the old
 * dentry (fuse_dentry_revalidate: another nodeid) and opens the new inode.
 * A retired node is freed when the kernel forgot it and its opens closed
 * (drop_retired()); inode numbers are never reused. Cached opens need none of
 * this: one inode serves two versions through the page cache and direct_io,
 * as above, so an inode changes number only under passthrough.
 */
#define _GNU_SOURCE
#include "inode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fs_node {
	fuse_ino_t ino;		    /* 0 until the path is known to exist */
	char *path;		    /* store path, "" for the root */
	struct fs_node *hnext;	    /* path-hash chain */
	struct cache_attr attr;	    /* valid when exists */
	uint64_t attr_expires;	    /* attr (or the miss) is fresh until then; 0 = stale */
	bool exists;		    /* false: the store said there is no such path */
	uint64_t nlookup;	    /* kernel references (lookups minus forgets) */
	struct fs_listing *listing; /* directories: last listing, or NULL */
	uint64_t list_expires;	    /* listing is fresh until then */
	/* The kernel's page cache of this inode holds pages of open_version only:
	 * opens of another version while pc_opens > 0 bypass it (direct_io). */
	char open_version[CACHE_VERSION_MAX]; /* version of the page-cache opens */
	unsigned pc_opens;		      /* open handles that use the page cache */
	uint64_t open_size;		      /* bytes of open_version */
	/* The opens since pc_opens was last 0 may keep the kernel's pages: they
	 * are of open_version (page_cache_mode()). */
	bool pc_keep;
	/* The kernel was shown open_size, more than the store's size, so that it
	 * would not cut the page-cache opens short (shown_size()); it is told to
	 * ask again when the last of them closes. */
	bool size_held;
	/* Passthrough (fs_inode_passthrough): while pt_opens > 0 the kernel holds
	 * backing_id on this inode, a backing file of pt_version, and refuses
	 * cached opens; the node holds the file's pin (cache_backing_get). */
	char pt_version[CACHE_VERSION_MAX];
	unsigned pt_opens;
	int backing_id;
	/* Out of the path hash: the path names a newer node now (retire()). The
	 * node keeps attr (of pt_version) for good and lives until nlookup and
	 * its opens are 0 (drop_retired()). */
	bool retired;
};

struct fs_inodes {
	pthread_mutex_t lock;	 /* guards everything below and all nodes */
	struct fs_node **by_ino; /* index = inode number; [0] unused */
	size_t ino_cap, next_ino;
	struct fs_node **buckets; /* path hash */
	size_t nbuckets, count;
};

static size_t path_hash(const char *p)
{
	size_t h = 1469598103934665603ull;

	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static struct fs_node *find(struct fs_inodes *t, const char *path)
{
	struct fs_node *n;

	for (n = t->buckets[path_hash(path) & (t->nbuckets - 1)]; n; n = n->hnext)
		if (strcmp(n->path, path) == 0)
			return n;
	return NULL;
}

static int grow_hash(struct fs_inodes *t)
{
	size_t nb = t->nbuckets * 2, i;
	struct fs_node **b = calloc(nb, sizeof(*b)), *n, *next;

	if (!b)
		return -ENOMEM;
	for (i = 0; i < t->nbuckets; i++) {
		for (n = t->buckets[i]; n; n = next) {
			next = n->hnext;
			n->hnext = b[path_hash(n->path) & (nb - 1)];
			b[path_hash(n->path) & (nb - 1)] = n;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
	return 0;
}

/* Finds or creates the node of @path. Lock held. NULL on ENOMEM. */
static struct fs_node *get_node(struct fs_inodes *t, const char *path)
{
	struct fs_node *n = find(t, path);
	size_t i;

	if (n)
		return n;
	if (t->count >= t->nbuckets && grow_hash(t) < 0)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n || !(n->path = strdup(path))) {
		free(n);
		return NULL;
	}
	i = path_hash(path) & (t->nbuckets - 1);
	n->hnext = t->buckets[i];
	t->buckets[i] = n;
	t->count++;
	return n;
}

/* Gives @n an inode number if it has none. Lock held. */
static int assign_ino(struct fs_inodes *t, struct fs_node *n)
{
	struct fs_node **grown;

	if (n->ino)
		return 0;
	if (t->next_ino == t->ino_cap) {
		grown = realloc(t->by_ino, t->ino_cap * 2 * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		t->by_ino = grown;
		t->ino_cap *= 2;
	}
	n->ino = t->next_ino++;
	t->by_ino[n->ino] = n;
	return 0;
}

static struct fs_node *by_ino(struct fs_inodes *t, fuse_ino_t ino)
{
	return ino < t->next_ino ? t->by_ino[ino] : NULL;
}

static void free_node(struct fs_node *n)
{
	free(n->listing);
	free(n->path);
	free(n);
}

/*
 * Takes @n out of the path hash, so that the next get_node() of its path
 * makes a new node with a new inode number (see the top of the file). @n
 * keeps its number, attributes and opens. Lock held.
 */
static void retire(struct fs_session *s, struct fs_node *n)
{
	struct fs_inodes *t = s->inodes;
	struct fs_node **pp = &t->buckets[path_hash(n->path) & (t->nbuckets - 1)];

	while (*pp != n)
		pp = &(*pp)->hnext;
	*pp = n->hnext;
	n->hnext = NULL;
	t->count--;
	n->retired = true;
	atomic_fetch_add_explicit(&s->inode_renumbers, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->inodes_retired, 1, memory_order_relaxed);
	MCFS_INFO("%s changed in the store while open with passthrough: its %u open(s) keep inode "
		  "%lu and the old version; new opens get a new inode",
		  n->path, n->pt_opens, (unsigned long)n->ino);
}

/* Frees @n if it is retired and nothing refers to it any more: the kernel
 * forgot it and its opens closed. Lock held. */
static void drop_retired(struct fs_session *s, struct fs_node *n)
{
	if (!n->retired || n->nlookup > 0 || n->pt_opens > 0 || n->pc_opens > 0)
		return;
	s->inodes->by_ino[n->ino] = NULL;
	atomic_fetch_sub_explicit(&s->inodes_retired, 1, memory_order_relaxed);
	free_node(n);
}

int fs_inodes_new(struct fs_session *s, struct fs_inodes **out)
{
	struct fs_inodes *t = calloc(1, sizeof(*t));
	struct fs_node *root;

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->nbuckets = 1024;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	t->ino_cap = 1024;
	t->by_ino = calloc(t->ino_cap, sizeof(*t->by_ino));
	t->next_ino = FUSE_ROOT_ID;
	root = t->buckets && t->by_ino ? get_node(t, "") : NULL;
	if (!root || assign_ino(t, root) < 0) {
		fs_inodes_free(t);
		return -ENOMEM;
	}
	root->exists = true;
	root->attr.mode = S_IFDIR | 0755;
	(void)s;
	*out = t;
	return 0;
}

void fs_inodes_free(struct fs_inodes *t)
{
	struct fs_node *n, *next;
	size_t i;

	if (!t)
		return;
	for (i = 0; t->by_ino && i < t->next_ino; i++) /* retired: in no hash chain */
		if (t->by_ino[i] && t->by_ino[i]->retired)
			free_node(t->by_ino[i]);
	for (i = 0; t->buckets && i < t->nbuckets; i++) {
		for (n = t->buckets[i]; n; n = next) {
			next = n->hnext;
			free_node(n);
		}
	}
	free(t->buckets);
	free(t->by_ino);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void fs_attr_to_stat(const struct fs_session *s, fuse_ino_t ino, const struct cache_attr *a,
		     struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = a->mode;
	st->st_nlink = S_ISDIR(a->mode) ? 2 : 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_size = (off_t)a->size;
	st->st_blksize = (blksize_t)MCFS_MIN(s->cfg.block_size, 1u << 20);
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_mtim.tv_sec = a->mtime_ns / 1000000000;
	st->st_mtim.tv_nsec = a->mtime_ns % 1000000000;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

/*
 * The size the kernel may be shown of node @n, in @st (which holds the
 * store's): never less than that of the version open through the page cache
 * (see the top of the file). Lock held.
 */
static void shown_size(struct fs_node *n, struct stat *st)
{
	if (n->pc_opens == 0 || n->open_size <= (uint64_t)st->st_size)
		return;
	st->st_size = (off_t)n->open_size;
	st->st_blocks = (blkcnt_t)((n->open_size + 511) / 512);
	n->size_held = true;
}

/* Fills @st with what the kernel may be shown of node @n (exists). Lock held. */
static void node_stat(struct fs_session *s, struct fs_node *n, struct stat *st)
{
	fs_attr_to_stat(s, n->ino, &n->attr, st);
	shown_size(n, st);
}

/*
 * Asks the cache about @path and records the answer in its node: with
 * @confirm, for an open (cache_confirm(): the store, now); else the store or
 * LMDB under cache_dir, as fresh as attr_ttl allows. A node whose passthrough
 * opens read a version the store no longer has (another one, or no file) is
 * retired first, and the answer goes to the path's new node. No lock held on
 * entry.
 */
static int refresh(struct fs_session *s, const char *path, bool confirm)
{
	struct fs_inodes *t = s->inodes;
	struct cache_attr a;
	struct fs_node *n;
	uint64_t expires;
	int rc;

	if (confirm)
		rc = cache_confirm(s->cache, path, &a, &expires);
	else
		rc = cache_stat(s->cache, path, &a, &expires);
	if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR)
		return rc;
	pthread_mutex_lock(&t->lock);
	n = get_node(t, path);
	if (n && n->pt_opens > 0 &&
	    (rc < 0 || (a.version[0] != '\0' && strcmp(a.version, n->pt_version) != 0))) {
		retire(s, n);
		n = get_node(t, path);
	}
	if (!n) {
		pthread_mutex_unlock(&t->lock);
		return -ENOMEM;
	}
	n->attr_expires = expires;
	n->exists = rc == 0;
	if (rc == 0) {
		n->attr = a;
		rc = assign_ino(t, n);
	} else {
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static int child_path(const char *dir, const char *name, char *buf, size_t len)
{
	int n;

	if (name[0] == '\0' || strchr(name, '/') || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0)
		return -EINVAL;
	if (strlen(name) >= CACHE_NAME_MAX)
		return -ENAMETOOLONG;
	n = dir[0] ? snprintf(buf, len, "%s/%s", dir, name) : snprintf(buf, len, "%s", name);
	return n < (int)len ? 0 : -ENAMETOOLONG;
}

/* True if the fresh listing of @dir says @name is absent. Lock held. */
static bool listed_absent(struct fs_node *dir, const char *name)
{
	size_t i;

	if (!dir->listing || !cache_attr_fresh(dir->list_expires))
		return false;
	for (i = 0; i < dir->listing->n; i++)
		if (strcmp(dir->listing->ents[i].name, name) == 0)
			return false;
	return true;
}

int fs_inode_lookup(struct fs_session *s, fuse_ino_t parent, const char *name,
		    struct fuse_entry_param *e)
{
	struct fs_inodes *t = s->inodes;
	char path[4096];
	struct fs_node *p, *n;
	int rc, tries;

	memset(e, 0, sizeof(*e));
	for (tries = 0; tries < 2; tries++) {
		pthread_mutex_lock(&t->lock);
		p = by_ino(t, parent);
		if (!p || !p->exists) {
			pthread_mutex_unlock(&t->lock);
			return -ENOENT;
		}
		if (!S_ISDIR(p->attr.mode)) {
			pthread_mutex_unlock(&t->lock);
			return -ENOTDIR;
		}
		rc = child_path(p->path, name, path, sizeof(path));
		if (rc < 0) {
			pthread_mutex_unlock(&t->lock);
			return rc;
		}
		n = find(t, path);
		/* after a refresh, take the store's answer even with a zero ttl */
		if ((n && (tries == 1 || cache_attr_fresh(n->attr_expires))) ||
		    (!n && listed_absent(p, name))) {
			if (n && n->exists) {
				n->nlookup++;
				e->ino = n->ino;
				node_stat(s, n, &e->attr);
				e->attr_timeout = s->cfg.attr_ttl;
				e->entry_timeout = s->cfg.attr_ttl;
			} else {
				e->ino = 0; /* negative entry, cached by the kernel */
				e->entry_timeout = s->cfg.negative_ttl;
			}
			pthread_mutex_unlock(&t->lock);
			return 0;
		}
		pthread_mutex_unlock(&t->lock);
		rc = refresh(s, path, false);
		if (rc < 0)
			return rc;
	}
	return -EIO; /* not reached: the second pass always answers */
}

void fs_inode_forget(struct fs_session *s, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = by_ino(s->inodes, ino);
	if (n) {
		n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
		drop_retired(s, n);
	}
	pthread_mutex_unlock(&s->inodes->lock);
}

void fs_inode_invalidate(struct fs_session *s, fuse_ino_t ino)
{
	char path[4096] = "";
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = by_ino(s->inodes, ino);
	if (n && n->retired) /* its version is fixed; the path's node is another */
		n = NULL;
	if (n) {
		n->attr_expires = 0;
		snprintf(path, sizeof(path), "%s", n->path);
	}
	pthread_mutex_unlock(&s->inodes->lock);
	if (n) /* and LMDB's copy, or the next stat would find it fresh there */
		cache_forget_attr(s->cache, path);
}

fuse_ino_t fs_inode_ref(struct fs_session *s, fuse_ino_t ino, struct stat *st)
{
	struct fs_inodes *t = s->inodes;
	struct fs_node *n;

	pthread_mutex_lock(&t->lock);
	n = by_ino(t, ino);
	if (n && n->retired) {
		/* The listing is older than the path's new node: name that one. */
		n = find(t, n->path);
		if (n && n->exists && n->ino)
			node_stat(s, n, st);
		else
			n = NULL;
	} else if (n) {
		shown_size(n, st);
	}
	ino = n ? n->ino : 0;
	if (n)
		n->nlookup++;
	pthread_mutex_unlock(&t->lock);
	return ino;
}

/*
 * Copies @ino's path into buf and says whether its attributes are fresh (a
 * retired node's always are: they are its version's) and whether the node is
 * retired (may be NULL). Returns 0, or -ENOENT for an unknown inode.
 */
static int node_state(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len, bool *is_fresh,
		      bool *is_retired)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = by_ino(s->inodes, ino);
	if (!n) {
		pthread_mutex_unlock(&s->inodes->lock);
		return -ENOENT;
	}
	snprintf(buf, len, "%s", n->path);
	/* the root is always there; its attributes come from the store once */
	*is_fresh = n->retired || cache_attr_fresh(n->attr_expires);
	if (is_retired)
		*is_retired = n->retired;
	pthread_mutex_unlock(&s->inodes->lock);
	return 0;
}

/* Refreshes @ino if stale, then runs with the lock held: returns the node or NULL. */
static struct fs_node *fresh_node(struct fs_session *s, fuse_ino_t ino, int *rc)
{
	char path[4096];
	bool ok;

	*rc = node_state(s, ino, path, sizeof(path), &ok, NULL);
	if (*rc < 0)
		return NULL;
	if (!ok) {
		*rc = refresh(s, path, false);
		if (*rc < 0)
			return NULL;
	}
	pthread_mutex_lock(&s->inodes->lock);
	return by_ino(s->inodes, ino);
}

static int open_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
		     struct fs_open_mode *mode);

int fs_inode_getattr(struct fs_session *s, fuse_ino_t ino, struct stat *st)
{
	struct fs_node *n;
	int rc;

	n = fresh_node(s, ino, &rc);
	if (!n)
		return rc;
	rc = n->exists ? 0 : -ENOENT;
	if (rc == 0)
		node_stat(s, n, st);
	pthread_mutex_unlock(&s->inodes->lock);
	return rc;
}

int fs_inode_open(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
		  struct fs_open_mode *mode)
{
	return open_file(s, ino, f, mode);
}

void fs_inode_close(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct cache_file *f,
		    const struct fs_open_mode *mode)
{
	bool reshow = false;
	struct fs_node *n;
	int id = 0;

	if (mode->direct_io)
		return;
	pthread_mutex_lock(&s->inodes->lock);
	n = by_ino(s->inodes, ino);
	if (n && mode->passthrough && n->pt_opens > 0 && --n->pt_opens == 0) {
		id = n->backing_id;
		n->backing_id = 0;
	} else if (n && !mode->passthrough && n->pc_opens > 0 && --n->pc_opens == 0 &&
		   n->size_held) {
		n->size_held = false;
		reshow = true;
	}
	if (n)
		drop_retired(s, n);
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

bool fs_inode_passthrough(struct fs_session *s, fuse_req_t req, fuse_ino_t ino,
			  struct cache_file *f, struct fs_open_mode *mode)
{
#ifdef MCFS_FUSE_PASSTHROUGH
	const char *v = cache_file_version(f);
	bool done = false, keep_pin = false, refused = false;
	struct fs_node *n;
	int fd = -1, id, rc;

	if (mode->direct_io || mode->passthrough)
		return mode->passthrough;
	/* Builds the backing file if need be (seconds): no lock held. */
	rc = cache_backing_get(s->cache, f, &fd);
	if (rc < 0)
		return false;
	pthread_mutex_lock(&s->inodes->lock);
	n = by_ino(s->inodes, ino);
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

int fs_inode_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f)
{
	return open_file(s, ino, f, NULL);
}

/*
 * Decides how an open of version @v uses the kernel's page cache (lock held).
 * One inode has one page cache, so only one version may be in it: the first
 * open after all page-cache opens closed owns it (and keeps the pages if they
 * are of the same version); an open of another version while those are open
 * bypasses it with direct_io, so that concurrent opens of two versions never
 * see each other's pages. Returns true if the version changed.
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
	mode->direct_io = n->pc_opens > 0 && !same;
	if (mode->direct_io)
		return changed;
	if (n->pc_opens == 0)
		n->pc_keep = same || n->open_version[0] == '\0';
	snprintf(n->open_version, sizeof(n->open_version), "%s", v);
	n->open_size = n->attr.size;
	mode->keep_cache = s->cfg.keep_cache && n->pc_keep;
	n->pc_opens++;
	return changed;
}

/*
 * Refreshes @ino's node with the store's answer now (cache_confirm()), then
 * runs with the lock held: returns the node, or NULL with *rc set.
 */
static struct fs_node *confirmed_node(struct fs_session *s, fuse_ino_t ino, int *rc)
{
	char path[4096];
	bool ok, retired;

	*rc = node_state(s, ino, path, sizeof(path), &ok, &retired);
	if (*rc == 0 && retired)
		*rc = -ESTALE; /* see open_file() */
	if (*rc == 0)
		*rc = refresh(s, path, true);
	if (*rc < 0)
		return NULL;
	pthread_mutex_lock(&s->inodes->lock);
	return by_ino(s->inodes, ino);
}

/*
 * The identity of @ino's current version; with @mode, as open() sees it: the
 * version confirmed with the store now (unless open_check=ttl). Without
 * @mode (xattrs), as fresh as attr_ttl allows.
 */
static int open_file(struct fs_session *s, fuse_ino_t ino, struct cache_file **f,
		     struct fs_open_mode *mode)
{
	bool changed = false, confirm = mode && cache_open_confirms(s->cache);
	struct cache_attr a;
	char path[4096];
	struct fs_node *n;
	int rc;

	n = confirm ? confirmed_node(s, ino, &rc) : fresh_node(s, ino, &rc);
	if (!n)
		return rc;
	if (!confirm && n->exists && S_ISREG(n->attr.mode) && n->attr.version[0] == '\0') {
		/* A listing gave no version (an http manifest): reads must carry the
		 * store's own validator, so ask the store before the first read. */
		snprintf(path, sizeof(path), "%s", n->path);
		pthread_mutex_unlock(&s->inodes->lock);
		rc = refresh(s, path, false);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&s->inodes->lock);
		n = by_ino(s->inodes, ino);
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
		 * refresh(), or here when the node's attributes moved on between
		 * an open and its switch to passthrough): the kernel could open no
		 * other version on it. ESTALE makes the VFS look the path up again
		 * (LOOKUP_REVAL), which finds the path's new node. */
		if (mode && !n->retired && n->pt_opens > 0 && strcmp(n->pt_version, a.version) != 0)
			retire(s, n);
		if (mode && n->retired)
			rc = -ESTALE;
		else if (mode)
			changed = page_cache_mode(s, n, a.version, mode);
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

int fs_inode_readlink(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len)
{
	char path[4096];
	bool ok;
	int rc;

	rc = node_state(s, ino, path, sizeof(path), &ok, NULL);
	if (rc < 0)
		return rc;
	rc = cache_readlink(s->cache, path, buf, len);
	return rc < 0 ? rc : 0;
}

int fs_inode_path(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len)
{
	bool ok;

	return node_state(s, ino, buf, len, &ok, NULL);
}

/* Builds a listing from the store's entries, updating the children's nodes. Lock held. */
static struct fs_listing *build_listing(struct fs_session *s, const char *dir,
					const struct cache_dirent *ents, size_t n, uint64_t expires)
{
	struct fs_inodes *t = s->inodes;
	struct fs_listing *l;
	char path[4096];
	struct fs_node *c;
	size_t i, k = 0;

	l = calloc(1, sizeof(*l) + n * sizeof(l->ents[0]));
	if (!l)
		return NULL;
	for (i = 0; i < n; i++) {
		if (child_path(dir, ents[i].name, path, sizeof(path)) < 0)
			continue;
		c = get_node(t, path);
		if (!c || assign_ino(t, c) < 0) {
			free(l);
			return NULL;
		}
		/* A listing may be older than the version that passthrough opens
		 * confirmed: it never retires their node (refresh() does), nor
		 * overwrites the attributes of the version their inode serves. */
		if (c->pt_opens == 0 || strcmp(c->pt_version, ents[i].attr.version) == 0) {
			c->exists = true;
			c->attr = ents[i].attr;
			c->attr_expires = expires; /* as fresh as the listing */
		}
		l->ents[k].ino = c->ino;
		fs_attr_to_stat(s, c->ino, &c->attr, &l->ents[k].st);
		snprintf(l->ents[k].name, sizeof(l->ents[k].name), "%s", ents[i].name);
		k++;
	}
	l->n = k;
	l->refs = 1;
	return l;
}

int fs_inode_list(struct fs_session *s, fuse_ino_t ino, struct fs_listing **out)
{
	struct fs_inodes *t = s->inodes;
	struct cache_dirent *ents = NULL;
	struct fs_listing *l;
	char path[4096];
	struct fs_node *n;
	size_t cnt = 0;
	uint64_t expires;
	int rc;

	pthread_mutex_lock(&t->lock);
	n = by_ino(t, ino);
	if (!n) {
		pthread_mutex_unlock(&t->lock);
		return -ENOENT;
	}
	if (n->listing && cache_attr_fresh(n->list_expires)) {
		n->listing->refs++;
		*out = n->listing;
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	snprintf(path, sizeof(path), "%s", n->path);
	pthread_mutex_unlock(&t->lock);

	rc = cache_list(s->cache, path, &ents, &cnt, &expires); /* store or LMDB */
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&t->lock);
	l = build_listing(s, path, ents, cnt, expires);
	free(ents);
	if (!l) {
		pthread_mutex_unlock(&t->lock);
		return -ENOMEM;
	}
	n = by_ino(t, ino);
	if (n->listing && --n->listing->refs == 0)
		free(n->listing);
	n->listing = l;
	n->list_expires = expires;
	l->refs++; /* the caller's */
	*out = l;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

void fs_listing_put(struct fs_session *s, struct fs_listing *l)
{
	pthread_mutex_lock(&s->inodes->lock);
	if (--l->refs == 0)
		free(l);
	pthread_mutex_unlock(&s->inodes->lock);
}
