/*
 * signals.c - the daemon's signals (signals.h says why one thread takes
 * them): SIGTERM, SIGINT and SIGQUIT unmount, SIGUSR2 hands the mount over
 * to a new daemon, SIGHUP re-confirms every listing and attribute.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "signals.h"
#include "inode.h"
#include "cache.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void kick_handler(int sig)
{
	(void)sig;
}

static void stop_signal_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGQUIT);
	sigaddset(set, SIGUSR2);
}

void fs_stop_request(struct fs_stopper *st)
{
	bool serving;

	atomic_store(&st->requested, true);
	pthread_mutex_lock(&st->lock);
	serving = st->se != NULL;
	if (serving)
		fuse_session_exit(st->se);
	pthread_mutex_unlock(&st->lock);
	/* A stop (not a hand-over, whose waiting requests the next daemon gets
	 * again): a read waiting for another node's block would hold the session
	 * up to twice shared_wait; it goes to the store now. The cache lives
	 * until after fs_stopper_stop() joined this thread. */
	if (serving && !atomic_load(&st->s->ho.upgrade))
		cache_stop_waits(st->s->cache);
	pthread_kill(st->tid, SIGUSR1); /* out of sigtimedwait(), to start kicking */
}

/*
 * SIGHUP: re-confirm every listing and attribute (fs_inode_refresh()), as
 * operators expect of a daemon; it never unmounts. Runs in the signal thread,
 * not in a handler; the session is whole from the moment se is set until
 * fs_stopper_stop() has joined this thread.
 */
static void refresh_all(struct fs_stopper *st)
{
	bool serving;

	pthread_mutex_lock(&st->lock);
	serving = st->se != NULL;
	pthread_mutex_unlock(&st->lock);
	if (!serving) {
		MCFS_INFO("SIGHUP during start-up: nothing to re-confirm yet");
		return;
	}
	MCFS_INFO("SIGHUP: %zu paths' listings and attributes will be asked of the store again",
		  fs_inode_refresh(st->s, ""));
}

/* A hand-over waits this many kicks (50 ms) for the requests in flight. */
#define HANDOVER_DRAIN_KICKS 40

static void *stop_thread(void *arg)
{
	const struct timespec kick_every = {.tv_nsec = 50 * 1000 * 1000};
	struct fs_stopper *st = arg;
	unsigned handover_kicks = 0;
	sigset_t set;
	siginfo_t si;

	pthread_setname_np(pthread_self(), "mcfs-signals");
	stop_signal_set(&set);
	while (!atomic_load(&st->done)) {
		if (!atomic_load(&st->requested)) {
			int sig = sigtimedwait(&set, &si, NULL);

			if (sig == SIGHUP) {
				refresh_all(st);
			} else if (sig == SIGUSR2 && !atomic_load(&st->s->ho.held)) {
				MCFS_WARN("SIGUSR2: nothing holds this mount's connection "
					  "(supervise=false, no systemd descriptor store): "
					  "not handing over");
			} else if (sig == SIGUSR2) {
				MCFS_INFO("SIGUSR2: handing the mount over to a new daemon");
				atomic_store(&st->s->ho.upgrade, true);
				fs_stop_request(st);
			} else if (sig > 0) {
				MCFS_INFO("%s: unmounting", strsignal(sig));
				fs_stop_request(st);
			}
			continue;
		}
		pthread_mutex_lock(&st->lock);
		if (st->se && !atomic_load(&st->done))
			pthread_kill(st->main, SIGUSR1);
		pthread_mutex_unlock(&st->lock);
		nanosleep(&kick_every, NULL);
		if (atomic_load(&st->s->ho.upgrade) && ++handover_kicks > HANDOVER_DRAIN_KICKS &&
		    !atomic_load(&st->done)) {
			/* A request still waits (a slow store): the kernel gives it to
			 * the next daemon again (FUSE_NOTIFY_RESEND), as after a crash,
			 * whose every step the disk tier and the state are safe for. */
			MCFS_INFO("requests still in flight after %d ms: handing over with them",
				  HANDOVER_DRAIN_KICKS * 50);
			/* At once, as a crash would: not _exit(), which a sanitizer's
			 * interceptor turns into a report of the threads left running. */
			syscall(SYS_exit_group, FS_HANDOVER_EXIT);
		}
	}
	return NULL;
}

int fs_stopper_start(struct fs_stopper *st)
{
	struct sigaction sa = {.sa_handler = kick_handler}; /* no SA_RESTART: EINTR is the point */
	sigset_t set;
	int rc;

	stop_signal_set(&set);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	st->main = pthread_self();
	pthread_mutex_init(&st->lock, NULL);
	rc = pthread_create(&st->tid, NULL, stop_thread, st);
	st->started = rc == 0;
	if (rc)
		MCFS_ERR("cannot start the signal thread: %s", strerror(rc));
	return -rc;
}

void fs_stopper_stop(struct fs_stopper *st)
{
	pthread_mutex_lock(&st->lock);
	atomic_store(&st->done, true);
	st->se = NULL;
	pthread_mutex_unlock(&st->lock);
	pthread_kill(st->tid, SIGUSR1);
	pthread_join(st->tid, NULL);
}
