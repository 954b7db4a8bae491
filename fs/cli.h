/*
 * cli.h - the table of the mcfs command's commands and its help texts
 * (cli.c), and the subcommands other than mount/umount, each in its own file. They run in the
 * caller's process, talk to a running daemon through the mount (ioctl, xattrs), and print their own
 * errors. Each returns the process exit status.
 */
#ifndef MCFS_FS_CLI_H
#define MCFS_FS_CLI_H

#include <stdbool.h>
#include <stdio.h>

/* Exit status for a command line that is wrong (as getopt-based tools use). */
#define FS_EXIT_USAGE 2

/*
 * Errors go through the logger (MCFS_ERR), so every message reads
 * "mcfs: error: ...", with anything the user typed escaped. -h and --help of
 * every command are answered by main() before the command runs.
 */

/* `mcfs help`: every command with its synopsis and one line, to @fp. */
void fs_cli_print_usage(FILE *fp);

/* True if @cmd names a command of the table ("unmount" is umount). */
bool fs_cli_known(const char *cmd);

/* True if -h or --help is among @argc words of @argv after the first (before any "--"). */
bool fs_cli_wants_help(int argc, char **argv);

/*
 * Says that @word (the first word of the command line, or the word after
 * `mcfs help`) is no command: the nearest command's name if one is near, or
 * (with @argc >= 3, so @word stood where a SOURCE may) that no file of that
 * name is there to mount. Returns FS_EXIT_USAGE.
 */
int fs_cli_unknown(const char *word, int argc);

/* `mcfs CMD --help`: the command's usage and options, to stdout. Returns 0 (exit status). */
int fs_cli_help(const char *cmd);

/* Prints "usage: mcfs CMD ..." to stderr (cli.c's table). Returns FS_EXIT_USAGE. */
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
