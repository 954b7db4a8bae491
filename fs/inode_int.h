/*
 * inode_int.h - what the inode table's files share (inode_table.c: the nodes,
 * their hashes and when they are freed; inode.c: lookups, attributes,
 * listings; inode_open.c: opens). Not for use outside them: the table's
 * interface is inode.h. Every function here runs with inodes->lock held
 * unless it says otherwise.
 */
#ifndef MCFS_FS_INODE_INT_H
#define MCFS_FS_INODE_INT_H

#include "inode.h"
#include "mcfs_lock.h"

#include <pthread.h>

struct fs_node {
	fuse_ino_t ino;	       /* 0 until the path is known to exist */
	char *path;	       /* store path, "" for the root */
	struct fs_node *hnext; /* path-hash chain (none while retired) */
	struct fs_node *inext; /* inode-number hash chain (while ino != 0) */
	/* The idle list (inode_table.c), while nothing holds the node: no lookup
	 * the kernel has not forgotten, no open, not the root. */
	struct fs_node *lru_prev, *lru_next;
	bool idle;
	struct cache_attr attr;	    /* valid when exists */
	uint64_t attr_expires;	    /* attr (or the miss) is fresh until then; 0 = stale */
	bool exists;		    /* false: the store said there is no such path */
	uint64_t nlookup;	    /* kernel references (lookups minus forgets) */
	struct fs_listing *listing; /* directories: last listing, or NULL */
	uint64_t list_expires;	    /* listing is fresh until then */
	uint64_t list_miss_expires; /* a name it lacks is absent until then (negative_ttl) */
	/* The listing lacked a name the store has: the next one asks the store,
	 * not LMDB, whose record is as old as the listing found wanting. */
	bool list_from_store;
	/* The kernel's page cache of this inode holds pages of open_version only:
	 * an open of another version while pc_opens > 0 retires the node. */
	char open_version[CACHE_VERSION_MAX]; /* version of the page-cache opens */
	unsigned pc_opens;		      /* open handles that use the page cache */
	uint64_t open_size;		      /* bytes of open_version */
	/* The opens since pc_opens was last 0 may keep the kernel's pages: they
	 * are of open_version (page_cache_mode()). */
	bool pc_keep;
	/* A push filled the kernel's page cache of this inode with open_version
	 * whole (every block pushed or READ): later opens of that version stay
	 * page-cache opens (fs_inode_keeps_pages()). Until a forget of the
	 * inode (the kernel evicted it, and its pages) or another version. */
	bool pc_whole;
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
	/* An open of this inode is between fs_inode_open_begin() and _end(): its
	 * mode is decided and answered, so that two opens of one cold file never
	 * count each other as the cached open that keeps both from passthrough. */
	bool opening;
	/* Out of the path hash: the path names a newer node now (fs_node_retire()). The
	 * node keeps attr (of its opens' version) for good and lives until nlookup and
	 * its opens are 0 (fs_node_settle()). */
	bool retired;
};

struct fs_inodes {
	pthread_mutex_t lock;	  /* guards everything below and all nodes */
	pthread_cond_t opened;	  /* a node's opening went false */
	struct fs_session *sess;  /* the session this table is of (its counters) */
	struct fs_node **buckets; /* path hash */
	size_t nbuckets, count;
	struct fs_node **ibuckets; /* inode-number hash of the nodes with a number */
	size_t nibuckets, icount;
	fuse_ino_t next_ino;		       /* the next number given; numbers are never reused */
	struct fs_node *idle_head, *idle_tail; /* idle nodes, least recently used first */
	size_t nidle;
};

/* The node of path @path (never a retired one), or NULL. */
struct fs_node *fs_node_find(struct fs_inodes *t, const char *path);

/* The node of inode @ino, or NULL: the kernel forgot it and it was freed. */
struct fs_node *fs_node_by_ino(struct fs_inodes *t, fuse_ino_t ino);

/*
 * The node of @path, made (with no number, nothing known) if there is none;
 * NULL on ENOMEM. The caller fills it in and then calls fs_node_settle(), so
 * that a node nothing holds joins the idle list.
 */
struct fs_node *fs_node_get(struct fs_session *s, const char *path);

/* Gives @n the next inode number if it has none. 0 or -ENOMEM. */
int fs_node_assign_ino(struct fs_inodes *t, struct fs_node *n);

/*
 * After anything that may change whether @n is held (a lookup counted or
 * forgotten, an open or a close) or made it: takes it off the idle list if
 * something holds it; else makes it the idle list's most recent, freeing the
 * least recent beyond the bound, or frees it if it is retired. @n, and any
 * other node nothing holds, may be freed: use none after this but by a fresh
 * lookup. Can't fail.
 */
void fs_node_settle(struct fs_session *s, struct fs_node *n);

/*
 * Takes @n out of the path hash, so that the next lookup of its path makes a
 * new node with a new inode number (inode_open.c says why). @n keeps its
 * number, attributes and opens.
 */
void fs_node_retire(struct fs_session *s, struct fs_node *n);

/* Drops a node's or an open directory's reference to @l (may be NULL); the last frees it. */
void fs_listing_unref(struct fs_listing *l);

/* Asks the cache about @path now (@confirm: its version confirmed with the
 * store) and updates its node. No lock held. 0 or -errno. */
int fs_node_refresh(struct fs_session *s, const char *path, bool confirm);

/*
 * Copies @ino's path into buf and says whether its attributes are fresh and
 * whether the node is retired (may be NULL). 0, or -ENOENT. No lock held.
 */
int fs_node_state(struct fs_session *s, fuse_ino_t ino, char *buf, size_t len, bool *is_fresh,
		  bool *is_retired);

/* Refreshes @ino if stale, then returns with the lock held: the node, or NULL with *rc. */
struct fs_node *fs_node_fresh(struct fs_session *s, fuse_ino_t ino, int *rc);

#endif
