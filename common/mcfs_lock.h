/*
 * mcfs_lock.h - lock assertions: MCFS_ASSERT_HELD(&mutex) says "the calling
 * thread holds this mutex here", MCFS_ASSERT_NOT_HELD(&mutex) the opposite
 * (before blocking I/O, and before taking a lock that must come first in the
 * lock order written at the top of cache/cache.h). A failed assertion logs
 * file, line and the mutex expression, then aborts.
 *
 * Active where MCFS_DEBUG_LOCKS is defined: the root CMakeLists.txt defines
 * it for Debug builds and for sanitizer builds (MCFS_SANITIZE). Elsewhere the
 * macros compile to nothing, so release builds pay nothing.
 *
 * How "held" is known: glibc records in every mutex, whatever its type, the
 * kernel thread id of its owner (pthread_mutex_t.__data.__owner: set by
 * pthread_mutex_lock and by the relock inside pthread_cond_wait, cleared by
 * unlock; glibc's own gdb pretty printers read it the same way). Comparing it
 * with the caller's thread id answers the question exactly, and needs no
 * change to how our mutexes are created, locked or waited on. The obvious
 * alternatives were worse: an error-checking mutex answers only if the
 * assertion calls pthread_mutex_lock(), which blocks while another thread
 * holds the mutex and adds synchronisation that hides data races from TSan;
 * a wrapper type that records its owner means rewriting every lock, unlock
 * and condition wait in the tree. A read that races with another thread's
 * lock or unlock sees 0 or that thread's id, never ours: our id is written
 * there only by this thread, so the answer is right even then.
 *
 * With a C library other than glibc, mcfs_mutex_owned() answers -1 and both
 * assertions pass: no checking, never a false alarm.
 */
#ifndef MCFS_LOCK_H
#define MCFS_LOCK_H

#include <pthread.h>

/*
 * 1 if the calling thread holds @m, 0 if it does not, -1 if this C library
 * does not say. Does not touch the mutex. Can't fail.
 */
int mcfs_mutex_owned(const pthread_mutex_t *m);

/* Logs "file:line: lock EXPR WHAT here" (WHAT: "should be held", ...) and aborts. */
void mcfs_lock_fail(const char *file, int line, const char *expr, const char *what)
    __attribute__((noreturn));

#ifdef MCFS_DEBUG_LOCKS
#define MCFS_ASSERT_HELD(m)                                                                        \
	do {                                                                                       \
		if (mcfs_mutex_owned(m) == 0)                                                      \
			mcfs_lock_fail(__FILE__, __LINE__, #m, "should be held");                  \
	} while (0)
#define MCFS_ASSERT_NOT_HELD(m)                                                                    \
	do {                                                                                       \
		if (mcfs_mutex_owned(m) == 1)                                                      \
			mcfs_lock_fail(__FILE__, __LINE__, #m, "should not be held");              \
	} while (0)
#else
#define MCFS_ASSERT_HELD(m) ((void)sizeof(m))
#define MCFS_ASSERT_NOT_HELD(m) ((void)sizeof(m))
#endif

#endif
