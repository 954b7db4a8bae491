/*
 * caller.h - who sent a FUSE request, for the requests that change what
 * every user of the mount sees (user.mcfs.evict) and for the GPU loads
 * that must be bound to their process (MCFS_IOC_BIND).
 *
 * The kernel gives each request the caller's uid, gid and thread id, as seen
 * from the daemon's namespaces (uid in the FUSE connection's user namespace;
 * pid 0 when the caller's thread is not visible in the daemon's pid
 * namespace). Inside a container root is uid 0, in the node's user namespace
 * unless the runtime gives the pod one of its own; its capabilities are what
 * sets a node's admin apart from a root pod (runtimes drop CAP_SYS_ADMIN).
 */
#ifndef MCFS_FS_CALLER_H
#define MCFS_FS_CALLER_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * True if the caller (@uid, thread @pid, from fuse_req_ctx()) may act for the
 * node: it holds CAP_SYS_ADMIN, effective, in the daemon's user namespace; or
 * the daemon runs as a user other than root and the caller is that user (who
 * controls the daemon anyway). Anyone else, root of a pod without
 * CAP_SYS_ADMIN or root of another user namespace included, is refused, as is
 * a caller the daemon cannot see (@pid 0). Reads /proc/PID/status and
 * /proc/PID/ns/user: the caller is blocked in its system call until the
 * reply, so its thread id names it for the whole check. Can't fail; logs
 * nothing.
 */
bool fs_caller_is_admin(uid_t uid, pid_t pid);

/*
 * The process (thread group) of the caller's thread @tid, from
 * /proc/TID/status, or 0 when it cannot be told (@tid 0: not visible in the
 * daemon's pid namespace; or gone). Can't fail otherwise; logs nothing.
 */
pid_t fs_caller_process(pid_t tid);

#endif
