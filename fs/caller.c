/*
 * caller.c - whether the process behind a FUSE request may act for the node.
 *
 * The check is on capabilities, not on uid 0: a pod's root shares the node's
 * uid 0 unless its runtime gives it a user namespace, but not CAP_SYS_ADMIN,
 * which container runtimes drop by default. Capabilities count only in the
 * user namespace that holds them, so the caller's must be the daemon's.
 */
#define _GNU_SOURCE
#include "caller.h"

#include <inttypes.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* True if thread @pid's user namespace is this process's. */
static bool same_user_ns(pid_t pid)
{
	struct stat mine, theirs;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	if (stat("/proc/self/ns/user", &mine) < 0 || stat(path, &theirs) < 0)
		return false;
	return mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

/* True if thread @pid holds CAP_SYS_ADMIN, effective (its CapEff line). */
static bool has_sys_admin(pid_t pid)
{
	char path[64], line[256];
	uint64_t eff = 0;
	bool found = false;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fp = fopen(path, "re");
	if (!fp)
		return false;
	while (!found && fgets(line, sizeof(line), fp))
		found = sscanf(line, "CapEff: %" SCNx64, &eff) == 1;
	fclose(fp);
	return found && (eff & (UINT64_C(1) << CAP_SYS_ADMIN)) != 0;
}

bool fs_caller_is_admin(uid_t uid, pid_t pid)
{
	if (getuid() != 0 && uid == getuid())
		return true;
	if (pid <= 0)
		return false;
	return same_user_ns(pid) && has_sys_admin(pid);
}
