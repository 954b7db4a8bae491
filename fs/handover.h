/*
 * handover.h - readers survive a daemon restart: the FUSE connection and
 * what the kernel holds of it outlive the daemon.
 *
 * The kernel ends a FUSE mount's connection when the last descriptor of its
 * /dev/fuse file closes; until then requests wait for an answer, and a
 * reader sees only a pause. So the descriptor is kept outside the daemon, by
 * a holder: systemd's file descriptor store (FDSTORE=1, the unit's
 * FileDescriptorStoreMax=) or mcfs's own supervisor (supervise=true, for
 * Kubernetes and other non-systemd use: supervise.c). A new daemon, given the
 * descriptor back (LISTEN_FDS / LISTEN_FDNAMES, as systemd and the supervisor
 * pass them), resumes serving it without mounting.
 *
 * What the kernel holds must mean the same to the new daemon:
 *  - inode numbers (every LOOKUP reply, READDIRPLUS entry) and the paths
 *    they name, with retired nodes' versions (inode_open.c);
 *  - open file and directory handles (fi->fh): ids in ops.c's handle table,
 *    each with its inode, version and how it uses the page cache, and, for
 *    passthrough, the backing id the kernel holds;
 *  - the connection's INIT (what the kernel negotiated): replayed to the new
 *    daemon's libfuse session through its custom I/O (the reply goes nowhere:
 *    the kernel took the first one).
 * They are kept in the state: a memfd holding an append-only log of those
 * records, written before the reply that tells the kernel of them, and held
 * by the same holder. A kill -9 at any instruction leaves a log whose every
 * record is whole (the header's end moves after the record is written).
 * Requests the dead daemon had read but not answered are re-queued by the
 * kernel on FUSE_NOTIFY_RESEND (Linux 6.9), sent once the new session runs.
 *
 * Where it cannot resume (the daemon then mounts afresh, after a lazy
 * unmount of a dead mount, and logs why): FUSE over io_uring (the rings die
 * with the daemon), splice (needs libfuse's own I/O), a libfuse older than
 * 3.17, a kernel without FUSE_NOTIFY_RESEND (requests in flight at the crash
 * would never be answered: resume is refused), or a holder that was stopped.
 *
 * Locks: the state's own leaf lock; records are written with inodes->lock
 * or handles_lock held by the caller, never the other way round.
 */
#ifndef MCFS_FS_HANDOVER_H
#define MCFS_FS_HANDOVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "cache_attr.h"
#include "mcfs.h"

struct fs_session;
struct fuse_session;

/* Exit status of a daemon that handed its mount over (SIGUSR2): its holder starts a new one. */
#define FS_HANDOVER_EXIT 75

/* Names of the descriptors in LISTEN_FDNAMES and in systemd's store. */
#define FS_HANDOVER_FUSE_NAME "mcfs-fuse"
#define FS_HANDOVER_STATE_NAME "mcfs-state"

/* In struct fs_session. */
struct fs_handover {
	int fuse_fd;	      /* given back at start (resume), else -1 until mounted */
	int state_fd;	      /* the state memfd, or -1: nothing is kept */
	int sup_fd;	      /* the supervisor's socket (MCFS_SUPERVISOR_FD), or -1 */
	bool systemd;	      /* NOTIFY_SOCKET is set: systemd's store holds the descriptors */
	bool resume;	      /* this daemon resumes a connection (fuse_fd from a holder) */
	atomic_bool held;     /* a holder keeps them: a crash survives; the signal thread reads */
	pthread_mutex_t lock; /* guards end and the writes to state_fd */
	uint64_t end;	      /* the log's end */
	/* The INIT replayed on resume (libfuse reads it first), then the answer swallowed. */
	unsigned char *init;
	size_t init_len;
	uint64_t init_unique;
	atomic_int init_stage; /* 0: not given, 1: given to libfuse, 2: answered */
	pthread_mutex_t init_lock;
	pthread_cond_t init_done;
	atomic_bool upgrade; /* SIGUSR2: end the loop without unmounting, exit FS_HANDOVER_EXIT */
};

/*
 * At start, in the command's process (before it forks): takes the
 * descriptors a holder passes (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES;
 * cleared from the environment) and the supervisor's socket. Returns 0
 * (resume set when the FUSE descriptor came with its state), or -errno
 * after logging why (a state that does not parse).
 */
MCFS_MUST_CHECK int fs_handover_init(struct fs_session *s);

/*
 * Resume: replays the state into the inode table and the handle table (the
 * cache must be up), and sets the session's custom I/O on the held
 * descriptor. Returns 0 or -errno after logging why.
 */
MCFS_MUST_CHECK int fs_handover_resume(struct fs_session *s, struct fuse_session *se);

/*
 * A fresh mount: makes the state and, if a holder is there (systemd's store
 * or the supervisor), sets the session's custom I/O (which records INIT) and
 * hands both descriptors over. Returns 0 (nothing kept when there is no
 * holder, or the session cannot be resumed: said once) or -errno.
 */
MCFS_MUST_CHECK int fs_handover_fresh(struct fs_session *s, struct fuse_session *se);

/* Once the resumed session's INIT was answered: asks the kernel to resend
 * the requests the dead daemon had read (FUSE_NOTIFY_RESEND). */
void fs_handover_resend(struct fs_session *s);

/* Records, each before the reply that tells the kernel of it; no-ops when nothing is kept. */
void fs_handover_node(struct fs_session *s, uint64_t ino, const char *path);
void fs_handover_node_free(struct fs_session *s, uint64_t ino);
void fs_handover_retire(struct fs_session *s, uint64_t ino, const struct cache_attr *a);
/* An open file: @kind 'f'; its flags FS_HO_KEEP, _DIRECT, _PT; @a its version. */
#define FS_HO_KEEP 1u
#define FS_HO_DIRECT 2u
#define FS_HO_PT 4u
void fs_handover_open(struct fs_session *s, uint64_t fh, uint64_t ino, unsigned flags,
		      int backing_id, const struct cache_attr *a);
void fs_handover_opendir(struct fs_session *s, uint64_t fh, uint64_t ino);
void fs_handover_release(struct fs_session *s, uint64_t fh, bool dir);

/* Frees what init made (not the held descriptors' holders' copies). */
void fs_handover_free(struct fs_session *s);

/*
 * The supervisor (supervise=true): runs the daemon as its child, holds the
 * descriptors it hands over, and starts a new child (this binary's path as
 * started: an upgraded binary) with them when one dies or hands over. Stop
 * signals go to the child. @ready_fd (-1 in the foreground) goes to the
 * first child, which says there when the mount is up. Returns the exit
 * status for the command.
 */
int fs_supervise(int argc, char **argv, int ready_fd, const char *mountpoint);

#endif
