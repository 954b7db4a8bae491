/*
 * inode_table.c - the inode table's nodes: found by path and by inode number,
 * and freed when nothing needs them (inode_int.h has the interface).
 *
 * Design. A node is *held* while the kernel holds its inode (nlookup > 0:
 * lookups and readdirplus entries it has not forgotten), while it has opens,
 * and for good if it is the root. A node nothing holds is *idle*: it goes to
 * the tail of the idle list, and the list keeps the FS_IDLE_NODES most
 * recently used; the one at its head is freed when another joins. libfuse's
 * example/passthrough_ll.c frees a node at its last FORGET; mcfs keeps some
 * idle ones because they are the in-memory metadata cache (inode.c): a
 * "no such name" answer is an idle node, and so is a file the kernel
 * forgot under memory pressure, or a child a listing named. Without the
 * bound, a daemon whose store shows it a million names over its life would
 * keep a million nodes. A retired node (a replaced version) is never idle:
 * it is freed as soon as nothing holds it.
 *
 * Inode numbers come from a counter and are never reused, so the kernel can
 * never confuse a freed node's number with a later one. A path whose node
 * was freed gets a new number when it is seen again; the kernel had
 * forgotten the old one (nothing held it).
 *
 * Lock: inodes->lock (inode.h) guards all of it, and every function here
 * runs with it held. Freeing a node frees memory only (its listing, if the
 * last reference): nothing here waits or does I/O.
 */
#define _GNU_SOURCE
#include "inode_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Idle nodes kept (see above). 16384 holds the recent answers about a few
 * large model trees with room to spare, and costs about 11 MiB at most (a
 * node is about 600 bytes with its three version strings, plus its path).
 */
#define FS_IDLE_NODES 16384

static size_t path_hash(const char *p)
{
	size_t h = 1469598103934665603ull;

	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static size_t ino_bucket(const struct fs_inodes *t, fuse_ino_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 32) & (t->nibuckets - 1);
}

struct fs_node *fs_node_find(struct fs_inodes *t, const char *path)
{
	struct fs_node *n;

	MCFS_ASSERT_HELD(&t->lock);
	for (n = t->buckets[path_hash(path) & (t->nbuckets - 1)]; n; n = n->hnext)
		if (strcmp(n->path, path) == 0)
			return n;
	return NULL;
}

struct fs_node *fs_node_by_ino(struct fs_inodes *t, fuse_ino_t ino)
{
	struct fs_node *n;

	MCFS_ASSERT_HELD(&t->lock);
	for (n = t->ibuckets[ino_bucket(t, ino)]; n; n = n->inext)
		if (n->ino == ino)
			return n;
	return NULL;
}

static int grow_paths(struct fs_inodes *t)
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

static int grow_inos(struct fs_inodes *t)
{
	struct fs_node **old = t->ibuckets, *n, *next;
	size_t i, nold = t->nibuckets;

	t->ibuckets = calloc(nold * 2, sizeof(*t->ibuckets));
	if (!t->ibuckets) {
		t->ibuckets = old;
		return -ENOMEM;
	}
	t->nibuckets = nold * 2;
	for (i = 0; i < nold; i++) {
		for (n = old[i]; n; n = next) {
			next = n->inext;
			n->inext = t->ibuckets[ino_bucket(t, n->ino)];
			t->ibuckets[ino_bucket(t, n->ino)] = n;
		}
	}
	free(old);
	return 0;
}

struct fs_node *fs_node_get(struct fs_session *s, const char *path)
{
	struct fs_inodes *t = s->inodes;
	struct fs_node *n = fs_node_find(t, path);
	size_t i;

	if (n)
		return n;
	if (t->count >= t->nbuckets && grow_paths(t) < 0)
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
	atomic_fetch_add_explicit(&s->inodes_live, 1, memory_order_relaxed);
	return n;
}

int fs_node_assign_ino(struct fs_inodes *t, struct fs_node *n)
{
	size_t i;

	MCFS_ASSERT_HELD(&t->lock);
	if (n->ino)
		return 0;
	if (t->icount >= t->nibuckets && grow_inos(t) < 0)
		return -ENOMEM;
	n->ino = t->next_ino++;
	i = ino_bucket(t, n->ino);
	n->inext = t->ibuckets[i];
	t->ibuckets[i] = n;
	t->icount++;
	if (n->ino != FUSE_ROOT_ID) /* before any reply names it */
		fs_handover_node(t->sess, n->ino, n->path);
	return 0;
}

int fs_inode_restore(struct fs_session *s, uint64_t ino, const char *path, bool retired,
		     const struct cache_attr *a)
{
	struct fs_inodes *t = s->inodes;
	struct fs_node *n = NULL;
	size_t i;
	int rc = -ENOMEM;

	pthread_mutex_lock(&t->lock);
	if (fs_node_by_ino(t, ino)) {
		rc = -EEXIST;
		goto out;
	}
	if (t->icount >= t->nibuckets && grow_inos(t) < 0)
		goto out;
	if (retired) {
		/* In no path chain: the path names a newer node. */
		n = calloc(1, sizeof(*n));
		if (!n || !(n->path = strdup(path))) {
			free(n);
			goto out;
		}
		n->retired = true;
		n->exists = true;
		n->attr = *a;
		n->attr_expires = UINT64_MAX;
		atomic_fetch_add_explicit(&s->inodes_live, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->inodes_retired, 1, memory_order_relaxed);
	} else {
		n = fs_node_get(s, path);
		if (!n)
			goto out;
		if (n->ino) {
			rc = -EEXIST;
			goto out;
		}
	}
	n->ino = ino;
	i = ino_bucket(t, ino);
	n->inext = t->ibuckets[i];
	t->ibuckets[i] = n;
	t->icount++;
	if (ino >= t->next_ino)
		t->next_ino = ino + 1;
	/* The kernel's count of lookups died with the last daemon: held until unmount. */
	n->nlookup = FS_NLOOKUP_RESUMED;
	fs_node_settle(s, n);
	rc = 0;
out:
	pthread_mutex_unlock(&t->lock);
	if (rc < 0)
		MCFS_WARN("inode %llu (%s) could not be resumed: %s", (unsigned long long)ino, path,
			  strerror(-rc));
	return rc == -EEXIST ? 0 : rc;
}

static void unhash_path(struct fs_inodes *t, struct fs_node *n)
{
	struct fs_node **pp = &t->buckets[path_hash(n->path) & (t->nbuckets - 1)];

	while (*pp != n)
		pp = &(*pp)->hnext;
	*pp = n->hnext;
	n->hnext = NULL;
	t->count--;
}

static void idle_del(struct fs_inodes *t, struct fs_node *n)
{
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else
		t->idle_head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		t->idle_tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
	n->idle = false;
	t->nidle--;
}

static void idle_push(struct fs_inodes *t, struct fs_node *n)
{
	n->lru_prev = t->idle_tail;
	n->lru_next = NULL;
	if (t->idle_tail)
		t->idle_tail->lru_next = n;
	else
		t->idle_head = n;
	t->idle_tail = n;
	n->idle = true;
	t->nidle++;
}

/* Drops the node's reference to a listing; the last one frees it. Lock held. */
void fs_listing_unref(struct fs_listing *l)
{
	if (l && --l->refs == 0) {
		free(l->dir);
		free(l);
	}
}

/* Takes @n out of every table and frees it. Lock held (or the table is going). */
static void node_free(struct fs_inodes *t, struct fs_node *n)
{
	struct fs_session *s = t->sess;
	struct fs_node **pp;

	if (!n->retired)
		unhash_path(t, n);
	else
		atomic_fetch_sub_explicit(&s->inodes_retired, 1, memory_order_relaxed);
	if (n->ino) {
		pp = &t->ibuckets[ino_bucket(t, n->ino)];
		while (*pp != n)
			pp = &(*pp)->inext;
		*pp = n->inext;
		t->icount--;
		fs_handover_node_free(s, n->ino);
	}
	if (n->idle)
		idle_del(t, n);
	fs_listing_unref(n->listing);
	free(n->path);
	free(n);
	atomic_fetch_sub_explicit(&s->inodes_live, 1, memory_order_relaxed);
}

void fs_node_settle(struct fs_session *s, struct fs_node *n)
{
	struct fs_inodes *t = s->inodes;

	MCFS_ASSERT_HELD(&t->lock);
	if (n->idle)
		idle_del(t, n);
	if (n->ino == FUSE_ROOT_ID || n->nlookup > 0 || n->pc_opens > 0 || n->pt_opens > 0)
		return;
	if (n->retired) {
		node_free(t, n);
		return;
	}
	idle_push(t, n);
	while (t->nidle > FS_IDLE_NODES)
		node_free(t, t->idle_head);
}

void fs_node_retire(struct fs_session *s, struct fs_node *n)
{
	MCFS_ASSERT_HELD(&s->inodes->lock);
	unhash_path(s->inodes, n);
	n->retired = true;
	fs_handover_retire(s, n->ino, &n->attr);
	atomic_fetch_add_explicit(&s->inode_renumbers, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->inodes_retired, 1, memory_order_relaxed);
	MCFS_INFO("%s changed in the store while open%s: its %u open(s) keep inode %lu and the "
		  "old version; new opens get a new inode",
		  n->path, n->pt_opens > 0 ? " with passthrough" : "", n->pt_opens + n->pc_opens,
		  (unsigned long)n->ino);
}

int fs_inodes_new(struct fs_session *s, struct fs_inodes **out)
{
	struct fs_inodes *t = calloc(1, sizeof(*t));
	struct fs_node *root;

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->opened, NULL);
	t->nbuckets = 1024;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	t->nibuckets = 1024;
	t->ibuckets = calloc(t->nibuckets, sizeof(*t->ibuckets));
	t->next_ino = FUSE_ROOT_ID;
	t->sess = s;
	s->inodes = t;
	root = NULL;
	pthread_mutex_lock(&t->lock);
	if (t->buckets && t->ibuckets) {
		root = fs_node_get(s, "");
		if (root && fs_node_assign_ino(t, root) < 0)
			root = NULL;
	}
	if (root) {
		root->exists = true;
		root->attr.mode = S_IFDIR | 0755;
	}
	pthread_mutex_unlock(&t->lock);
	if (!root) {
		fs_inodes_free(t);
		s->inodes = NULL;
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

void fs_inodes_free(struct fs_inodes *t)
{
	struct fs_node *n, *next;
	size_t i;

	if (!t)
		return;
	for (i = 0; t->ibuckets && i < t->nibuckets; i++) /* retired: in no path chain */
		for (n = t->ibuckets[i]; n; n = next) {
			next = n->inext;
			if (n->retired)
				node_free(t, n);
		}
	for (i = 0; t->buckets && i < t->nbuckets; i++)
		while (t->buckets[i])
			node_free(t, t->buckets[i]);
	free(t->buckets);
	free(t->ibuckets);
	pthread_cond_destroy(&t->opened);
	pthread_mutex_destroy(&t->lock);
	free(t);
}
