/*
 * cli.h - subcommands of the mcfs command other than mount/umount, each in
 * its own file. They run in the caller's process, talk to a running daemon
 * through the mount (ioctl, xattrs), and print their own errors.
 * Each returns the process exit status.
 */
#ifndef MCFS_FS_CLI_H
#define MCFS_FS_CLI_H

/* Exit status for a command line that is wrong (as getopt-based tools use). */
#define FS_EXIT_USAGE 2

/*
 * Errors go through the logger (MCFS_ERR), so every message reads
 * "mcfs: error: ...", with anything the user typed escaped. -h and --help of
 * every command are answered by main() before the command runs.
 */

/* `mcfs CMD --help`: the command's usage and options, to stdout. Returns 0 (exit status). */
int fs_cli_help(const char *cmd);

/* Prints "usage: mcfs CMD ..." to stderr (fs/main.c's table). Returns FS_EXIT_USAGE. */
int fs_cli_usage(const char *cmd);

/*
 * After a getopt_long() loop run with opterr = 0 and an optstring starting
 * with ':' returned @c ('?' or ':'): says which option of @cmd was refused,
 * then the usage. Returns FS_EXIT_USAGE.
 */
int fs_cli_bad_option(const char *cmd, int c, char **argv);

/* `mcfs prefetch [-q] PATH...` (fs/prefetch.c) */
int fs_cmd_prefetch(int argc, char **argv);

/* `mcfs status MOUNTPOINT` and `mcfs evict PATH...` (fs/status.c) */
int fs_cmd_status(int argc, char **argv);
int fs_cmd_evict(int argc, char **argv);
/* `mcfs refresh PATH...` and `mcfs log-level MOUNTPOINT [LEVEL]` (fs/status.c) */
int fs_cmd_refresh(int argc, char **argv);
int fs_cmd_log_level(int argc, char **argv);

#endif
