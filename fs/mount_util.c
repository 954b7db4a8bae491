/*
 * mount_util.c - reading /proc/self/mountinfo, checking mount points, the
 * mount's bdi readahead, and unmounting.
 *
 * Why the bdi: the kernel offers FUSE 128 KiB of readahead and libfuse can
 * only lower it, so buffered reads arrive as 128 KiB requests. Raising the
 * mount's read_ahead_kb after mounting gives 1 MiB requests (the ceiling with
 * libfuse 3.14) with several in flight, which reads faster (docs/benchmarks.md,
 * "FUSE request size").
 */
#define _GNU_SOURCE
#include "mount_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *w = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
			*w++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
			s += 4;
		} else {
			*w++ = *s++;
		}
	}
	*w = '\0';
}

int fs_mount_find(const char *abs, char *majmin, size_t mlen, char *fstype, size_t flen)
{
	char *line = NULL, *save, *tok, *fields[6], *dash;
	size_t cap = 0;
	int found = 0, i;
	FILE *fp;

	fp = fopen("/proc/self/mountinfo", "r");
	if (!fp)
		return -errno;
	while (!found && getline(&line, &cap, fp) > 0) {
		dash = strstr(line, " - ");
		if (!dash)
			continue;
		*dash = '\0';
		for (i = 0, tok = strtok_r(line, " ", &save); tok && i < 6;
		     tok = strtok_r(NULL, " ", &save))
			fields[i++] = tok;
		if (i < 5)
			continue;
		unescape(fields[4]);
		if (strcmp(fields[4], abs) != 0)
			continue;
		found = 1;
		if (majmin)
			snprintf(majmin, mlen, "%s", fields[2]);
		if (fstype) {
			tok = strtok_r(dash + 3, " ", &save);
			snprintf(fstype, flen, "%s", tok ? tok : "");
		}
	}
	free(line);
	fclose(fp);
	return found;
}

/* @path made absolute without resolving symlinks (a dead mount can't be resolved). */
static int absolute(const char *path, char *out, size_t len)
{
	char cwd[4096];
	int n;

	if (path[0] == '/') {
		n = snprintf(out, len, "%s", path);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		n = snprintf(out, len, "%s/%s", cwd, path);
	}
	if (n >= (int)len)
		return -ENAMETOOLONG;
	/* trailing slashes would not match mountinfo */
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	return 0;
}

/*
 * True if the FUSE mount at @abs answers ENOTCONN (its daemon died and
 * nothing holds its connection). Asked from a child (a statfs always reaches
 * the daemon; the kernel caches a stat): a mount that is alive but does not
 * answer (held, its next daemon not up yet) leaves the child waiting, and
 * after 2 s counts as alive. The child makes system calls only.
 */
static bool fuse_dead(const char *abs)
{
	struct timespec ms = {0, 10 * 1000 * 1000};
	struct statfs sf;
	int status, i;
	pid_t pid = fork();

	if (pid < 0)
		return false;
	if (pid == 0) {
		(void)close_range(3, ~0u, 0);
		_exit(statfs(abs, &sf) < 0 && errno == ENOTCONN ? 1 : 0);
	}
	for (i = 0; i < 200; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) && WEXITSTATUS(status) == 1;
		nanosleep(&ms, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return false;
}

int fs_mount_check_target(const char *path, char *abs, size_t len)
{
	char plain[4096], fstype[64];
	struct stat st;
	int rc;

	rc = absolute(path, plain, sizeof(plain));
	if (rc < 0) {
		MCFS_ERR("mount point %s: %s", path, strerror(-rc));
		return rc;
	}
	if (stat(plain, &st) < 0) {
		rc = -errno;
		if (rc != -ENOTCONN) /* a dead FUSE mount: the caller says what it does */
			MCFS_ERR("mount point %s: %s", path, strerror(-rc));
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		MCFS_ERR("mount point %s is not a directory", path);
		return -ENOTDIR;
	}
	if (!realpath(plain, abs)) {
		rc = -errno;
		MCFS_ERR("mount point %s: %s", path, strerror(-rc));
		return rc;
	}
	(void)len;
	if (fs_mount_find(abs, NULL, 0, fstype, sizeof(fstype)) == 1) {
		if (strncmp(fstype, "fuse", 4) == 0 && fuse_dead(abs))
			return -ENOTCONN; /* the caller says what it does */
		MCFS_ERR("%s is already mounted (%s): unmount it first (`mcfs umount %s`) or pick "
			 "another mount point",
			 abs, fstype, abs);
		return -EBUSY;
	}
	return 0;
}

int fs_write_knob(const char *path, unsigned value)
{
	FILE *fp = fopen(path, "w");
	int rc = 0;

	if (!fp)
		return -errno;
	if (fprintf(fp, "%u\n", value) < 0)
		rc = -errno;
	if (fclose(fp) != 0 && rc == 0)
		rc = -errno; /* the write happens here, at the flush; fp is gone either way */
	return rc;
}

void fs_mount_set_readahead(const char *abs, unsigned kb)
{
	char majmin[32], path[128];
	int rc;

	if (kb == 0)
		return;
	if (fs_mount_find(abs, majmin, sizeof(majmin), NULL, 0) != 1) {
		MCFS_WARN("read_ahead_kb: mount %s not found in mountinfo", abs);
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", majmin);
	rc = fs_write_knob(path, kb);
	if (rc < 0) {
		MCFS_WARN("cannot set %s to %u (%s): kernel readahead stays at its default", path,
			  kb, strerror(-rc));
		return;
	}
	MCFS_DEBUG("set %s to %u", path, kb);
}

/* The daemon's pid from the root's stats xattr, or 0 if it doesn't answer. */
static pid_t daemon_pid(const char *abs)
{
	char buf[4096];
	ssize_t n;
	int pid;

	n = getxattr(abs, "user.mcfs.stats", buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "pid %d", &pid) != 1)
		return 0;
	return pid;
}

static bool alive(pid_t pid)
{
	char path[64], state = 0, buf[512], *p;
	FILE *fp;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fp = fopen(path, "r");
	if (!fp)
		return false;
	p = fgets(buf, sizeof(buf), fp) ? strrchr(buf, ')') : NULL;
	if (p)
		state = p[2];
	fclose(fp);
	return state != 'Z' && state != 'X';
}

static int run_fusermount(const char *abs, bool lazy)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", "--", abs, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

int fs_umount(const char *path, bool lazy)
{
	char abs[4096], fstype[64];
	struct timespec ts = {0, 20 * 1000 * 1000};
	pid_t pid;
	int rc, i;

	rc = absolute(path, abs, sizeof(abs));
	if (rc == 0 && fs_mount_find(abs, NULL, 0, fstype, sizeof(fstype)) != 1) {
		char real[4096];

		if (realpath(abs, real) &&
		    fs_mount_find(real, NULL, 0, fstype, sizeof(fstype)) == 1)
			snprintf(abs, sizeof(abs), "%s", real);
		else
			rc = -EINVAL;
	}
	if (rc < 0) {
		MCFS_ERR("%s is not mounted", path);
		return rc;
	}
	if (strncmp(fstype, "fuse", 4) != 0) {
		MCFS_ERR("%s is a %s mount, not mcfs: not touching it", abs, fstype);
		return -EINVAL;
	}
	pid = daemon_pid(abs);
	if (geteuid() == 0)
		rc = umount2(abs, lazy ? MNT_DETACH : 0) < 0 ? -errno : 0;
	else
		rc = run_fusermount(abs, lazy);
	if (rc == -EBUSY) {
		MCFS_ERR("%s is busy (files are open: see `fuser -vm %s`); `mcfs umount -l` "
			 "detaches it now and finishes when they close",
			 abs, abs);
		return rc;
	}
	if (rc < 0) {
		MCFS_ERR("cannot unmount %s: %s", abs, strerror(-rc));
		return rc;
	}
	/* The daemon ends its loop, waits for fetches in flight and flushes: wait for
	 * it. Not after a lazy unmount: it serves the open files until they close. */
	for (i = 0; pid > 0 && !lazy && i < 3000 && alive(pid); i++)
		nanosleep(&ts, NULL);
	if (pid > 0 && alive(pid))
		MCFS_WARN("%s unmounted; daemon %d is still finishing%s", abs, (int)pid,
			  lazy ? " (it ends when the open files close)" : "");
	return 0;
}
