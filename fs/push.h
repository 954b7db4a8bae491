/*
 * push.h - a cold file pushed into the kernel's page cache ahead of its
 * reader (cold_push; the design at the top of push.c). Not a public header.
 */
#ifndef MCFS_FS_PUSH_H
#define MCFS_FS_PUSH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fs_session;
struct fs_handle;
struct fs_push;

/* The session's pushers and the inodes they push. */
struct fs_pusher {
	bool on;	      /* cold_push */
	pthread_mutex_t lock; /* guards the fields below and every push's state */
	pthread_cond_t work;  /* a push has blocks left, or stopping */
	pthread_cond_t idle;  /* a pusher left a block */
	struct fs_push *list; /* pushes of open files, in turn order */
	pthread_t *tids;      /* n threads "mcfs-push" */
	unsigned n;
	bool stopping;
};

/* Starts the pushers (none without cold_push). Returns 0 or a negative errno (logged). */
int fs_push_start(struct fs_session *s);
/* Stops them; before the FUSE session is destroyed. Can't fail. */
void fs_push_stop(struct fs_session *s);

/*
 * A READ of [off, off+len) on @h (an open that may push: h->push_ok), after
 * the cache served it: marks the blocks it touched, and starts the push of
 * the inode once the open's stream has entered its second block. Can't fail
 * (a push that cannot be set up is not started; the reads go on).
 */
void fs_push_read(struct fs_session *s, struct fs_handle *h, uint64_t off, size_t len);

/*
 * @h closes: the last open of a push stops it and waits until no pusher is
 * inside one of its blocks, before the release is answered. Can't fail.
 */
void fs_push_close(struct fs_session *s, struct fs_handle *h);

#endif
