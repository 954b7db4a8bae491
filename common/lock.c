/*
 * lock.c - the lock assertions' two functions (see mcfs_lock.h for why they
 * read glibc's owner field). Compiled in every build, so that the unit test
 * proves them in release builds too; only the macros are debug-only.
 */
#define _GNU_SOURCE
#include "mcfs_lock.h"
#include "mcfs.h"

#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __GLIBC__
/* The caller's kernel thread id, asked once per thread (it is a system call;
 * SYS_gettid rather than gettid(), which glibc has only since 2.30). */
static _Thread_local pid_t self;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A forked child runs in a new thread: its cached id is its parent's. */
static void forget_self(void)
{
	self = 0;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, forget_self);
}
#endif

int mcfs_mutex_owned(const pthread_mutex_t *m)
{
#ifdef __GLIBC__
	if (self == 0) {
		pthread_once(&atfork_once, register_atfork);
		self = (pid_t)syscall(SYS_gettid);
	}
	return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) == self;
#else
	(void)m;
	return -1;
#endif
}

void mcfs_lock_fail(const char *file, int line, const char *expr, const char *what)
{
	MCFS_ERR("%s:%d: lock %s %s here (see the lock order in cache/cache.h)", file, line, expr,
		 what);
	abort();
}
