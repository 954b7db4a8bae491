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
#include <stdlib.h>
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

/* The number on line "@key:" of thread @pid's /proc status, read in @base,
 * in *@out. True if found. */
static bool status_field(pid_t pid, const char *key, int base, uint64_t *out)
{
	char path[64], line[256];
	size_t klen = strlen(key);
	bool found = false;
	char *end;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fp = fopen(path, "re");
	if (!fp)
		return false;
	while (!found && fgets(line, sizeof(line), fp)) {
		if (strncmp(line, key, klen) != 0 || line[klen] != ':')
			continue;
		*out = strtoull(line + klen + 1, &end, base);
		found = end != line + klen + 1;
	}
	fclose(fp);
	return found;
}

/* True if thread @pid holds CAP_SYS_ADMIN, effective (its CapEff line). */
static bool has_sys_admin(pid_t pid)
{
	uint64_t eff = 0;

	return status_field(pid, "CapEff", 16, &eff) && (eff & (UINT64_C(1) << CAP_SYS_ADMIN)) != 0;
}

pid_t fs_caller_process(pid_t tid)
{
	uint64_t tgid = 0;

	if (tid <= 0 || !status_field(tid, "Tgid", 10, &tgid))
		return 0;
	return (pid_t)tgid;
}

bool fs_caller_is_admin(uid_t uid, pid_t pid)
{
	if (getuid() != 0 && uid == getuid())
		return true;
	if (pid <= 0)
		return false;
	return same_user_ns(pid) && has_sys_admin(pid);
}
