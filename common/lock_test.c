/*
 * lock_test.c - unit test of the lock assertions (mcfs_lock.h): "held" is
 * true exactly while the calling thread holds the mutex - not before, not
 * after unlock, not while another thread holds it - also after a condition
 * wait gave the mutex back, for every mutex type, and in a forked child.
 * MCFS_ASSERT_HELD and MCFS_ASSERT_NOT_HELD abort when they are wrong (run
 * in a child, which must die of SIGABRT) and pass when they are right.
 * Exits 0 (pass), 1 (fail) or 77 (skip: a C library that does not record a
 * mutex's owner).
 */
#define _GNU_SOURCE
#include "mcfs.h"
#include "mcfs_lock.h"
#include "mcfs_test.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t bar;

/* Holds m between the first and the second barrier, while main looks. */
static void *holder(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&m);
	CHECK(mcfs_mutex_owned(&m) == 1, "the holder thread holds m");
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar);
	pthread_mutex_unlock(&m);
	return NULL;
}

static void test_other_thread(void)
{
	pthread_t t;

	pthread_barrier_init(&bar, NULL, 2);
	pthread_create(&t, NULL, holder, NULL);
	pthread_barrier_wait(&bar);
	CHECK(mcfs_mutex_owned(&m) == 0, "m held by another thread reads as not ours");
	pthread_barrier_wait(&bar);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&bar);
	CHECK(mcfs_mutex_owned(&m) == 0, "m after the other thread let go");
}

/* pthread_cond_timedwait gives the mutex up and takes it back: still ours. */
static void test_cond_wait(void)
{
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	struct timespec now;

	pthread_mutex_lock(&m);
	clock_gettime(CLOCK_REALTIME, &now); /* a deadline already past: returns at once */
	CHECK(pthread_cond_timedwait(&cv, &m, &now) == ETIMEDOUT, "timed wait");
	CHECK(mcfs_mutex_owned(&m) == 1, "held again after a condition wait");
	MCFS_ASSERT_HELD(&m);
	pthread_mutex_unlock(&m);
	pthread_cond_destroy(&cv);
}

static void test_types(void)
{
	static const int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
				    PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_DEFAULT};
	pthread_mutexattr_t a;
	pthread_mutex_t x;
	size_t i;

	for (i = 0; i < MCFS_ARRAY_SIZE(types); i++) {
		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, types[i]);
		pthread_mutex_init(&x, &a);
		CHECK(mcfs_mutex_owned(&x) == 0, "type %d: fresh", types[i]);
		pthread_mutex_lock(&x);
		CHECK(mcfs_mutex_owned(&x) == 1, "type %d: locked", types[i]);
		pthread_mutex_unlock(&x);
		CHECK(mcfs_mutex_owned(&x) == 0, "type %d: unlocked", types[i]);
		pthread_mutex_destroy(&x);
		pthread_mutexattr_destroy(&a);
	}
}

/* Runs @what in a child; returns its wait status. */
static int in_child(int what)
{
	pthread_mutex_t y = PTHREAD_MUTEX_INITIALIZER;
	int status = 0;
	pid_t pid;

	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		if (what == 0) {
			MCFS_ASSERT_HELD(&y); /* not held: aborts */
		} else if (what == 1) {
			pthread_mutex_lock(&y);
			MCFS_ASSERT_NOT_HELD(&y); /* held: aborts */
		} else {
			/* the child is a new thread: its own locks read as held */
			pthread_mutex_lock(&y);
			MCFS_ASSERT_HELD(&y);
			pthread_mutex_unlock(&y);
			MCFS_ASSERT_NOT_HELD(&y);
		}
		_exit(0);
	}
	CHECK(pid > 0, "fork");
	if (pid > 0)
		CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	return status;
}

static void test_macros(void)
{
	int st;

	pthread_mutex_lock(&m);
	MCFS_ASSERT_HELD(&m);
	pthread_mutex_unlock(&m);
	MCFS_ASSERT_NOT_HELD(&m);
	fprintf(stderr, "lock_test: two deliberate assertion failures follow\n");
	st = in_child(0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "HELD on a free mutex aborts (%#x)", st);
	st = in_child(1);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "NOT_HELD on a held mutex aborts (%#x)",
	      st);
	st = in_child(2);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a forked child's own lock (%#x)", st);
}

int main(void)
{
	mcfs_log_setup(MCFS_LOG_ERR, false);
	if (mcfs_mutex_owned(&m) < 0) {
		fprintf(stderr, "lock_test: this C library does not record mutex owners: skip\n");
		return T_EXIT_SKIP;
	}
	CHECK(mcfs_mutex_owned(&m) == 0, "fresh mutex");
	pthread_mutex_lock(&m);
	CHECK(mcfs_mutex_owned(&m) == 1, "locked by us");
	pthread_mutex_unlock(&m);
	CHECK(mcfs_mutex_owned(&m) == 0, "unlocked");
	test_other_thread();
	test_cond_wait();
	test_types();
	test_macros();
	if (failures)
		fprintf(stderr, "lock_test: %d failures\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
