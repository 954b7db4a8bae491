/*
 * supervise.c - the supervisor (supervise=true): a small process that holds
 * the mount's /dev/fuse descriptor and its state (handover.h) and runs the
 * daemon as its child, for Kubernetes and other hosts without systemd's
 * descriptor store.
 *
 * The child gets a socket (MCFS_SUPERVISOR_FD) on which it hands both
 * descriptors over once it mounted, and again after each resume. When the
 * child dies (a crash, kill -9) or hands over (SIGUSR2, exit
 * FS_HANDOVER_EXIT), the supervisor starts this binary again, from the path
 * it was started as (so a package upgrade's new binary), with the
 * descriptors in LISTEN_FDS as systemd passes them: the new child resumes the
 * connection, and readers see a pause. A child that exits 0 unmounted (a
 * stop): the supervisor exits 0. A child that fails before it handed the
 * descriptors over failed to start: the supervisor exits with its status.
 * Five crashes within 30 s: the supervisor gives up, unmounts lazily (the
 * readers get ENOTCONN) and exits 1.
 *
 * Stop signals (TERM, INT, QUIT), SIGHUP and SIGUSR2 go to the child. The
 * supervisor is one thread: between fork() and exec() it may do anything.
 */
#define _GNU_SOURCE
#include "handover.h"

#include "fs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUP_CRASHES 5
#define SUP_CRASH_WINDOW_NS (30ull * 1000 * 1000 * 1000)

struct sup {
	char self[PATH_MAX];
	char **argv;
	int sock[2]; /* [0] ours, [1] the child's */
	int fuse_fd, state_fd;
	int ready_fd; /* the first child's, then -1 */
	pid_t child;
	bool stopping;
	uint64_t crashes[SUP_CRASHES];
	unsigned ncrash;
};

/* Moves @fd to @to (a fixed number in the child); @fd may be any number. */
static void place(int fd, int to)
{
	if (fd != to)
		dup2(fd, to);
}

static pid_t start_child(struct sup *p)
{
	char buf[32];
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	/* The child: descriptors first to numbers out of the way, then to 3.. */
	{
		int fuse = p->fuse_fd >= 0 ? fcntl(p->fuse_fd, F_DUPFD, 100) : -1;
		int state = p->state_fd >= 0 ? fcntl(p->state_fd, F_DUPFD, 100) : -1;
		int sock = fcntl(p->sock[1], F_DUPFD, 100);
		int ready = p->ready_fd >= 0 ? fcntl(p->ready_fd, F_DUPFD, 100) : -1;
		int next = 3;

		if (fuse >= 0 && state >= 0) {
			place(fuse, 3);
			place(state, 4);
			next = 5;
			setenv("LISTEN_FDS", "2", 1);
			setenv("LISTEN_FDNAMES", FS_HANDOVER_FUSE_NAME ":" FS_HANDOVER_STATE_NAME,
			       1);
			snprintf(buf, sizeof(buf), "%d", (int)getpid());
			setenv("LISTEN_PID", buf, 1);
		}
		place(sock, next);
		snprintf(buf, sizeof(buf), "%d", next);
		setenv("MCFS_SUPERVISOR_FD", buf, 1);
		next++;
		if (ready >= 0) {
			place(ready, next);
			snprintf(buf, sizeof(buf), "%d", next);
			setenv("MCFS_READY_FD", buf, 1);
			next++;
		}
		(void)close_range((unsigned)next, ~0u, 0);
	}
	setenv("MCFS_SUPERVISED", "1", 1);
	{
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
	}
	execv(p->self, p->argv);
	fprintf(stderr, "mcfs supervisor: cannot start %s: %s\n", p->self, strerror(errno));
	_exit(127);
}

/* Takes the descriptors the child hands over; replaces those held. */
static void take_fds(struct sup *p)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	char tag[8];
	struct iovec iov = {tag, sizeof(tag)};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c;
	int fds[2];

	if (recvmsg(p->sock[0], &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) <= 0)
		return;
	c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(fds)))
		return;
	memcpy(fds, CMSG_DATA(c), sizeof(fds));
	if (p->fuse_fd >= 0)
		close(p->fuse_fd);
	if (p->state_fd >= 0)
		close(p->state_fd);
	p->fuse_fd = fds[0];
	p->state_fd = fds[1];
}

/* A crash: true if another start is allowed (fewer than SUP_CRASHES in the window). */
static bool crash_allowed(struct sup *p)
{
	uint64_t now = mcfs_now_ns();
	unsigned i, recent = 0;

	p->crashes[p->ncrash++ % SUP_CRASHES] = now;
	for (i = 0; i < SUP_CRASHES && i < p->ncrash; i++)
		if (now - p->crashes[i] < SUP_CRASH_WINDOW_NS)
			recent++;
	return recent < SUP_CRASHES;
}

/* Returns the supervisor's exit status once the child ended for good. */
static int on_exit_of_child(struct sup *p, int status, const char *mnt, bool *again)
{
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;

	*again = false;
	if (code == 0)
		return 0; /* unmounted */
	if (p->fuse_fd < 0) {
		MCFS_ERR("supervisor: the daemon failed before its mount was up (%s %d)",
			 code >= 0 ? "exit" : "signal", code >= 0 ? code : WTERMSIG(status));
		return code > 0 ? code : 1;
	}
	if (code == FS_HANDOVER_EXIT && !p->stopping) {
		MCFS_INFO("supervisor: the daemon handed the mount over: starting %s", p->self);
		*again = true;
		return 0;
	}
	if (!p->stopping && crash_allowed(p)) {
		MCFS_WARN("supervisor: the daemon died (%s %d): starting a new one; readers of %s "
			  "wait for it",
			  code >= 0 ? "exit" : "signal", code >= 0 ? code : WTERMSIG(status), mnt);
		*again = true;
		return 0;
	}
	MCFS_ERR("supervisor: %s: unmounting %s lazily (its readers get ENOTCONN)",
		 p->stopping ? "the daemon died while stopping" : "5 crashes in 30 s", mnt);
	if (umount2(mnt, MNT_DETACH) < 0)
		MCFS_WARN("supervisor: unmount %s: %s", mnt, strerror(errno));
	return 1;
}

int fs_supervise(int argc, char **argv, int ready_fd, const char *mountpoint)
{
	struct sup p = {.fuse_fd = -1, .state_fd = -1, .ready_fd = ready_fd, .argv = argv};
	struct signalfd_siginfo si;
	struct pollfd pf[2];
	sigset_t set;
	ssize_t n;
	int sfd, status, rc = 1;
	bool again;

	(void)argc;
	n = readlink("/proc/self/exe", p.self, sizeof(p.self) - 1);
	if (n <= 0) {
		MCFS_ERR("supervisor: /proc/self/exe: %s", strerror(errno));
		return 1;
	}
	p.self[n] = '\0';
	if (n > 10 && strcmp(p.self + n - 10, " (deleted)") == 0)
		p.self[n - 10] = '\0'; /* replaced since: the path names the new binary */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p.sock) < 0) {
		MCFS_ERR("supervisor: socketpair: %s", strerror(errno));
		return 1;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGQUIT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0) {
		MCFS_ERR("supervisor: signalfd: %s", strerror(errno));
		return 1;
	}
	for (;;) {
		p.child = start_child(&p);
		if (p.child < 0) {
			MCFS_ERR("supervisor: fork: %s", strerror(errno));
			break;
		}
		if (p.ready_fd >= 0) { /* the first child tells the command; we don't hold it */
			close(p.ready_fd);
			p.ready_fd = -1;
		}
		again = false;
		while (p.child > 0) {
			pf[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
			pf[1] = (struct pollfd){.fd = p.sock[0], .events = POLLIN};
			if (poll(pf, 2, -1) < 0 && errno != EINTR)
				break;
			if (pf[1].revents & POLLIN)
				take_fds(&p);
			if (!(pf[0].revents & POLLIN))
				continue;
			if (read(sfd, &si, sizeof(si)) != sizeof(si))
				continue;
			if (si.ssi_signo != SIGCHLD) {
				if (si.ssi_signo != SIGHUP && si.ssi_signo != SIGUSR2)
					p.stopping = true;
				kill(p.child, (int)si.ssi_signo);
				continue;
			}
			if (waitpid(p.child, &status, WNOHANG) != p.child)
				continue;
			p.child = 0;
			take_fds(&p); /* a hand-over sent just before the exit */
			rc = on_exit_of_child(&p, status, mountpoint, &again);
		}
		if (!again)
			break;
	}
	close(sfd);
	if (p.fuse_fd >= 0)
		close(p.fuse_fd);
	if (p.state_fd >= 0)
		close(p.state_fd);
	close(p.sock[0]);
	close(p.sock[1]);
	return rc;
}
