/*
 * persist.h - the metadata cache's second level: what the store said about
 * paths and directories, kept in LMDB (cache/meta.h) under cache_dir so that
 * it survives restarts, and served when the store is unreachable with
 * -o offline.
 *
 * inode.c calls these in place of remote_stat() and remote_list(). Each
 * answers from LMDB while the recorded answer is younger than attr_ttl
 * (negative_ttl for "no such path"), else asks the store and records its
 * answer. With -o offline, a store failure (anything but "no such path")
 * is answered from LMDB whatever the age, if LMDB has an answer.
 *
 * *learned is the monotonic time (mcfs_now_ns()) the answer dates from: now
 * for the store's, in the past for a recorded one, so that in-memory
 * freshness expires when the recorded one would.
 *
 * Without a cache_dir these are remote_stat() and remote_list().
 * Threads: any. No lock held on entry; none is taken across I/O.
 */
#ifndef MCFS_FS_PERSIST_H
#define MCFS_FS_PERSIST_H

#include "fs_int.h"

/* As remote_stat(): 0, -ENOENT, -ENOTDIR or a store error. */
MCFS_MUST_CHECK int fs_persist_stat(struct fs_session *s, const char *path, struct remote_attr *a,
				    uint64_t *learned);

/* As remote_list(): *ents (caller frees with free()) of *n entries, or an error. */
MCFS_MUST_CHECK int fs_persist_list(struct fs_session *s, const char *path,
				    struct remote_dirent **ents, size_t *n, uint64_t *learned);

/* Forgets the recorded attributes of @path (the file changed under a reader). */
void fs_persist_forget(struct fs_session *s, const char *path);

#endif
