/*
 * cli.h - subcommands of the mcfs command other than mount/umount, each in
 * its own file. They run in the caller's process, talk to a running daemon
 * through the mount (ioctl, xattrs), and print their own errors.
 * Each returns the process exit status.
 */
#ifndef MCFS_FS_CLI_H
#define MCFS_FS_CLI_H

/* `mcfs prefetch [-q] PATH...` (fs/prefetch.c) */
int fs_cmd_prefetch(int argc, char **argv);

/* `mcfs status MOUNTPOINT` and `mcfs evict PATH...` (fs/status.c) */
int fs_cmd_status(int argc, char **argv);
int fs_cmd_evict(int argc, char **argv);

#endif
