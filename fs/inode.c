/*
 * inode.c - lookups, attributes, listings and negative entries.
 *
 * One node per store path in use (inode_table.c: found by path or by inode
 * number, and freed when nothing holds it and it is not among the recently
 * used idle ones). A node records what the cache last said about its path and
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
#include "cache_metadata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* What the cache said about a path: exists (0), or not (-ENOENT, -ENOTDIR). */
struct answer {
	int rc;
	struct cache_attr a; /* when rc is 0 */
	uint64_t expires;    /* the answer holds until then (monotonic ns) */
};

/*
 * Asks the cache about @path: with @confirm, for an open (cache_confirm():
 * the store, now); else the store or LMDB under cache_dir, as fresh as
 * attr_ttl allows. Returns 0 with @ans filled, or the cache's error. No lock
 * held.
 */
static int ask(struct fs_session *s, const char *path, bool confirm, struct answer *ans)
{
	int rc;

	if (confirm)
		rc = cache_confirm(s->cache, path, &ans->a, &ans->expires);
	else
		rc = cache_stat(s->cache, path, &ans->a, &ans->expires);
	if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR)
		return rc;
	ans->rc = rc;
	return 0;
}

/*
 * Records @ans in the node of @path, made if need be. A node whose
 * passthrough opens read a version the store no longer has (another one, or
 * no file) is retired first, and the answer goes to the path's new node.
 * Returns the node, settled (held, or the most recent idle one), or NULL on
 * ENOMEM. Lock held.
 */
static struct fs_node *record(struct fs_session *s, const char *path, const struct answer *ans)
{
	struct fs_node *n = fs_node_get(s, path);

	if (n && n->pt_opens > 0 &&
	    (ans->rc < 0 ||
	     (ans->a.version[0] != '\0' && strcmp(ans->a.version, n->pt_version) != 0))) {
		fs_node_retire(s, n);
		n = fs_node_get(s, path);
	}
	if (!n)
		return NULL;
	n->attr_expires = ans->expires;
	n->exists = ans->rc == 0;
	if (n->exists) {
		n->attr = ans->a;
		if (fs_node_assign_ino(s->inodes, n) < 0) {
			n->exists = false; /* unanswered: asked again next time */
			n->attr_expires = 0;
			fs_node_settle(s, n);
			return NULL;
		}
	}
	fs_node_settle(s, n);
	return n;
}

int fs_node_refresh(struct fs_session *s, const char *path, bool confirm)
{
	struct answer ans;
	bool ok;
	int rc;

	rc = ask(s, path, confirm, &ans);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&s->inodes->lock);
	ok = record(s, path, &ans) != NULL;
	pthread_mutex_unlock(&s->inodes->lock);
	return ok ? 0 : -ENOMEM;
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

/* True if the fresh listing of @dir says @name is absent: a miss is trusted
 * for negative_ttl of the listing's age (cache_list_miss_expiry()). Lock held. */
static bool listed_absent(struct fs_node *dir, const char *name)
{
	size_t i;

	if (!dir->listing || !cache_attr_fresh(dir->list_expires) ||
	    !cache_attr_fresh(dir->list_miss_expires))
		return false;
	for (i = 0; i < dir->listing->n; i++)
		if (strcmp(dir->listing->ents[i].name, name) == 0)
			return false;
	return true;
}

/* True if the listing of @dir (fresh or not) names @name. Lock held. */
static bool listed(struct fs_node *dir, const char *name)
{
	size_t i;

	for (i = 0; i < dir->listing->n; i++)
		if (strcmp(dir->listing->ents[i].name, name) == 0)
			return true;
	return false;
}

/*
 * Answers a lookup from node @n (NULL: a name that the directory's fresh
 * listing lacks): an existing path counts one lookup, anything else is a miss
 * the kernel keeps for negative_ttl. Lock held.
 */
static void answer(struct fs_session *s, struct fs_node *n, struct fuse_entry_param *e)
{
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
	if (n)
		fs_node_settle(s, n); /* held now, or the most recent idle node */
}

/*
 * Answers a lookup of @name in @parent from the table, if what it holds is
 * fresh: the path's node, or the directory's listing. Returns 1 if @e is
 * filled, 0 if the cache must be asked (@path filled; *relist: the listing
 * lacks @name and is too old to say so, negative_ttl, though still trusted
 * for what it names), or -errno. Takes and drops the lock.
 */
static int from_table(struct fs_session *s, fuse_ino_t parent, const char *name, char *path,
		      size_t len, struct fuse_entry_param *e, bool *relist)
{
	struct fs_inodes *t = s->inodes;
	struct fs_node *p, *n;
	int rc;

	*relist = false;
	pthread_mutex_lock(&t->lock);
	p = fs_node_by_ino(t, parent);
	if (!p || !p->exists)
		rc = -ENOENT;
	else if (!S_ISDIR(p->attr.mode))
		rc = -ENOTDIR;
	else
		rc = child_path(p->path, name, path, len);
	if (rc == 0) {
		n = fs_node_find(t, path);
		if ((n && cache_attr_fresh(n->attr_expires)) || (!n && listed_absent(p, name))) {
			answer(s, n, e);
			rc = 1;
		} else {
			*relist = !n && p->listing && cache_attr_fresh(p->list_expires) &&
				  !listed(p, name);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* The listing of @dir lacks a name the store has: the next listing asks the store. Lock held. */
static void list_again(struct fs_node *dir)
{
	dir->list_expires = 0;
	dir->list_from_store = true;
}

/*
 * Lists directory @ino again, from the store (its node's listing is
 * replaced). Marked stale first, so a concurrent lookup that finds the same
 * old listing asks for its name instead of listing too. 0 or -errno.
 */
static int relist_dir(struct fs_session *s, fuse_ino_t ino)
{
	struct fs_listing *l;
	struct fs_node *n;
	int rc;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n)
		list_again(n);
	pthread_mutex_unlock(&s->inodes->lock);
	rc = fs_inode_list(s, ino, &l);
	if (rc == 0)
		fs_listing_put(s, l);
	return rc;
}

int fs_inode_lookup(struct fs_session *s, fuse_ino_t parent, const char *name,
		    struct fuse_entry_param *e)
{
	struct fs_inodes *t = s->inodes;
	char path[4096];
	struct fs_node *p, *n;
	struct answer ans;
	bool relist;
	int rc;

	memset(e, 0, sizeof(*e));
	rc = from_table(s, parent, name, path, sizeof(path), e, &relist);
	/* A miss in a listing older than negative_ttl lists the directory again:
	 * one request answers this name and the loader's next probes, and readdir
	 * shows what is new. A lookup that finds the listing being redone (stale
	 * meanwhile) asks for its name alone. */
	if (rc == 0 && relist && relist_dir(s, parent) == 0)
		rc = from_table(s, parent, name, path, sizeof(path), e, &relist);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	rc = ask(s, path, false, &ans);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&t->lock);
	n = record(s, path, &ans);
	if (n) /* the store's answer, even with a zero ttl */
		answer(s, n, e);
	p = ans.rc == 0 ? fs_node_by_ino(t, parent) : NULL;
	if (p && p->listing && !listed(p, name))
		list_again(p);
	pthread_mutex_unlock(&t->lock);
	return n ? 0 : -ENOMEM;
}

void fs_inode_forget(struct fs_session *s, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_node *n;

	pthread_mutex_lock(&s->inodes->lock);
	n = fs_node_by_ino(s->inodes, ino);
	if (n) {
		n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
		/* The kernel evicted an inode of this number, and its pages with it
		 * (a lookup since may hold the node again: its inode is new). */
		n->pc_whole = false;
		fs_node_settle(s, n);
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

fuse_ino_t fs_inode_entry(struct fs_session *s, const struct fs_listing *l, size_t i, bool plus,
			  struct stat *st)
{
	const struct fs_listent *le = &l->ents[i];
	struct fs_inodes *t = s->inodes;
	fuse_ino_t ino = 0;
	char path[4096];
	struct fs_node *n = NULL;

	pthread_mutex_lock(&t->lock);
	if (child_path(l->dir, le->name, path, sizeof(path)) == 0) {
		n = fs_node_find(t, path); /* the path's node now: never a retired one */
		if (!n) {
			/* Freed since the listing was built: the listing knows it. */
			n = fs_node_get(s, path);
			if (n) {
				n->exists = true;
				n->attr = le->attr;
				n->attr_expires = l->expires;
			}
		}
	}
	if (n && fs_node_assign_ino(t, n) == 0) {
		ino = n->ino;
		if (n->exists)
			node_stat(s, n, st);
		else /* the store said no since: the listing's word, till a lookup */
			fs_attr_to_stat(s, ino, &le->attr, st);
		if (plus)
			n->nlookup++;
	}
	if (n)
		fs_node_settle(s, n);
	pthread_mutex_unlock(&t->lock);
	if (!ino)
		fs_attr_to_stat(s, 0, &le->attr, st);
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
	struct fs_node *n;
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
	n = fs_node_by_ino(s->inodes, ino);
	if (!n) {
		pthread_mutex_unlock(&s->inodes->lock);
		*rc = -ENOENT;
	}
	return n;
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

/*
 * Builds a listing of @dir from the store's entries, and records each entry's
 * attributes in its child's node (made if need be): `ls -l` after a listing
 * asks nothing more. Returns it with the caller's reference, or NULL on
 * ENOMEM. Lock held.
 */
static struct fs_listing *build_listing(struct fs_session *s, const char *dir,
					const struct cache_dirent *ents, size_t n, uint64_t expires)
{
	struct fs_listing *l;
	char path[4096];
	struct fs_node *c;
	size_t i, k = 0;

	l = calloc(1, sizeof(*l) + n * sizeof(l->ents[0]));
	if (!l || !(l->dir = strdup(dir))) {
		free(l);
		return NULL;
	}
	l->refs = 1;
	l->expires = expires;
	for (i = 0; i < n; i++) {
		if (child_path(dir, ents[i].name, path, sizeof(path)) < 0)
			continue;
		c = fs_node_get(s, path);
		if (!c || fs_node_assign_ino(s->inodes, c) < 0) {
			if (c)
				fs_node_settle(s, c);
			fs_listing_unref(l);
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
		fs_node_settle(s, c); /* may free other idle nodes, never one the kernel holds */
		l->ents[k].attr = ents[i].attr;
		snprintf(l->ents[k].name, sizeof(l->ents[k].name), "%s", ents[i].name);
		k++;
	}
	l->n = k;
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
	bool from_store;
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
	from_store = n->list_from_store;
	pthread_mutex_unlock(&t->lock);

	if (from_store)
		rc = cache_relist(s->cache, path, &ents, &cnt, &expires);
	else
		rc = cache_list(s->cache, path, &ents, &cnt, &expires); /* store or LMDB */
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&t->lock);
	l = build_listing(s, path, ents, cnt, expires);
	free(ents);
	n = l ? fs_node_by_ino(t, ino) : NULL; /* the kernel holds it: opendir */
	if (n) {
		fs_listing_unref(n->listing);
		n->listing = l;
		n->list_expires = expires;
		n->list_miss_expires = cache_list_miss_expiry(s->cache, expires);
		if (from_store)
			n->list_from_store = false;
		l->refs++; /* the node's */
	}
	pthread_mutex_unlock(&t->lock);
	if (!l)
		return -ENOMEM;
	*out = l;
	return 0;
}

/* True if @path is @prefix or below it ("" is the root: everything). */
static bool under(const char *path, const char *prefix)
{
	size_t k = strlen(prefix);

	return k == 0 || (strncmp(path, prefix, k) == 0 && (path[k] == '\0' || path[k] == '/'));
}

/*
 * Marks stale every answer kept about @prefix and below; copies the inode
 * numbers the kernel holds among them into a new array (caller frees with
 * free()), in *inos. Returns how many nodes it marked. Lock held.
 */
static size_t mark_stale(struct fs_inodes *t, const char *prefix, fuse_ino_t **inos, size_t *ninos)
{
	size_t i, marked = 0, cap = 0;
	struct fs_node *n;
	fuse_ino_t *a = NULL, *grown;

	*ninos = 0;
	for (i = 0; i < t->nbuckets; i++) {
		for (n = t->buckets[i]; n; n = n->hnext) {
			if (!under(n->path, prefix))
				continue;
			n->attr_expires = 0;
			n->list_expires = 0;
			marked++;
			if (!n->ino || n->nlookup == 0)
				continue;
			if (*ninos == cap) {
				cap = cap ? 2 * cap : 64;
				grown = realloc(a, cap * sizeof(*a));
				if (!grown)
					continue; /* the kernel's copy then lasts its attr_ttl */
				a = grown;
			}
			a[(*ninos)++] = n->ino;
		}
	}
	*inos = a;
	return marked;
}

size_t fs_inode_refresh(struct fs_session *s, const char *prefix)
{
	fuse_ino_t *inos;
	size_t marked, n, i;

	cache_distrust(s->cache); /* first: a stale node must not find LMDB's copy fresh */
	pthread_mutex_lock(&s->inodes->lock);
	marked = mark_stale(s->inodes, prefix, &inos, &n);
	pthread_mutex_unlock(&s->inodes->lock);
	/* The kernel keeps attributes for attr_ttl too: drop them (attributes
	 * only, offset -1: the page cache is the open's business). -ENOENT is an
	 * inode it forgot meanwhile. */
	for (i = 0; s->se && i < n; i++)
		(void)fuse_lowlevel_notify_inval_inode(s->se, inos[i], -1, 0);
	free(inos);
	return marked;
}

void fs_listing_put(struct fs_session *s, struct fs_listing *l)
{
	pthread_mutex_lock(&s->inodes->lock);
	fs_listing_unref(l);
	pthread_mutex_unlock(&s->inodes->lock);
}
