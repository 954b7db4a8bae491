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
 * Opens, and how they use the page cache and passthrough while the store
 * changes: inode_open.c.
 */
#define _GNU_SOURCE
#include "inode.h"
#include "inode_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

struct fs_node *fs_node_by_ino(struct fs_inodes *t, fuse_ino_t ino)
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
 * makes a new node with a new inode number (see inode_open.c). @n
 * keeps its number, attributes and opens. Lock held.
 */
void fs_node_retire(struct fs_session *s, struct fs_node *n)
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
	MCFS_INFO("%s changed in the store while open%s: its %u open(s) keep inode %lu and the "
		  "old version; new opens get a new inode",
		  n->path, n->pt_opens > 0 ? " with passthrough" : "", n->pt_opens + n->pc_opens,
		  (unsigned long)n->ino);
}

/* Frees @n if it is retired and nothing refers to it any more: the kernel
 * forgot it and its opens closed. Lock held. */
void fs_node_drop_retired(struct fs_session *s, struct fs_node *n)
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
 * (see inode_open.c). Lock held.
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
int fs_node_refresh(struct fs_session *s, const char *path, bool confirm)
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
		fs_node_retire(s, n);
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
		p = fs_node_by_ino(t, parent);
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
		rc = fs_node_refresh(s, path, false);
		if (rc < 0)
			return rc;
	}
	return -EIO; /* not reached: the second pass always answers */
}

void fs_inode_forget(struct fs_session *s, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n) {
		n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
		fs_node_drop_retired(s, n);
	}
	pthread_mutex_unlock(&s->inodes->lock);
}

void fs_inode_invalidate(struct fs_session *s, fuse_ino_t ino)
{
	char path[4096] = "";
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
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
	n = fs_node_by_ino(t, ino);
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
int fs_node_state(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len, bool *is_fresh,
		  bool *is_retired)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
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
struct fs_node *fs_node_fresh(struct fs_session *s, fuse_ino_t ino, int *rc)
{
	char path[4096];
	bool ok;

	*rc = fs_node_state(s, ino, path, sizeof(path), &ok, NULL);
	if (*rc < 0)
		return NULL;
	if (!ok) {
		*rc = fs_node_refresh(s, path, false);
		if (*rc < 0)
			return NULL;
	}
	pthread_mutex_lock(&s->inodes->lock);
	return fs_node_by_ino(s->inodes, ino);
}

int fs_inode_getattr(struct fs_session *s, fuse_ino_t ino, struct stat *st)
{
	struct fs_node *n;
	int rc;

	n = fs_node_fresh(s, ino, &rc);
	if (!n)
		return rc;
	rc = n->exists ? 0 : -ENOENT;
	if (rc == 0)
		node_stat(s, n, st);
	pthread_mutex_unlock(&s->inodes->lock);
	return rc;
}

int fs_inode_readlink(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len)
{
	char path[4096];
	bool ok;
	int rc;

	rc = fs_node_state(s, ino, path, sizeof(path), &ok, NULL);
	if (rc < 0)
		return rc;
	rc = cache_readlink(s->cache, path, buf, len);
	return rc < 0 ? rc : 0;
}

int fs_inode_path(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len)
{
	bool ok;

	return fs_node_state(s, ino, buf, len, &ok, NULL);
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
		 * confirmed: it never retires their node (fs_node_refresh() does), nor
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
	n = fs_node_by_ino(t, ino);
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
	n = fs_node_by_ino(t, ino);
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
