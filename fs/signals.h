/*
 * signals.h - the daemon's stop and refresh signals, taken in one thread
 * (signals.c). Not a public header.
 */
#ifndef MCFS_FS_SIGNALS_H
#define MCFS_FS_SIGNALS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct fs_session;
struct fuse_session;

/*
 * Stopping. libfuse's own signal handlers only mark the session exited and
 * count on the signal interrupting the loop's wait in the main thread: a stop
 * signal taken by another thread (a fetch thread, the metrics server, the CUDA
 * runtime's), or one that lands between the loop's check and its wait, leaves
 * the mount up until the next request. So mcfs blocks the stop signals in
 * every thread, takes them in one thread with sigtimedwait(), and then kicks
 * the main thread with SIGUSR1 (whose handler does nothing: the point is the
 * EINTR) until the loop has returned.
 */
struct fs_stopper {
	struct fs_session *s; /* for SIGHUP's refresh, once se is set */
	pthread_t main, tid;
	pthread_mutex_t lock;
	struct fuse_session *se; /* set once the loop may run; under lock */
	atomic_bool requested;	 /* a stop signal came, or the ready check failed */
	atomic_bool done;	 /* the loop returned: stop kicking, end the thread */
	bool started;		 /* tid runs */
};

/* Blocks the stop signals here (so in every thread started later); starts the stop thread.
 * Returns 0 or a negative errno (logged). */
int fs_stopper_start(struct fs_stopper *st);
/* After the loop: ends the stop thread. A signal not yet taken stays pending (blocked). */
void fs_stopper_stop(struct fs_stopper *st);
/* Ends the loop: from the stop thread, or from the ready thread when the mount does not
 * answer. */
void fs_stop_request(struct fs_stopper *st);

#endif
