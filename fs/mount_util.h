/*
 * mount_util.h - mount points: checks before mounting, the bdi readahead
 * after it, and unmounting (also of a mount whose daemon died).
 *
 * These run in the CLI process and print their errors to stderr themselves
 * (the user is at the terminal): one line naming the path and the cause.
 */
#ifndef MCFS_FS_MOUNT_UTIL_H
#define MCFS_FS_MOUNT_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "mcfs.h"

/*
 * Checks that @path is a directory we can mount on: it exists, it is not a
 * mount point already, and it is not a dead FUSE mount. Writes its absolute
 * path into abs. Returns 0, -ENOTCONN for a dead FUSE mount (not printed:
 * the caller recovers it), or a negative errno after printing why.
 */
MCFS_MUST_CHECK int fs_mount_check_target(const char *path, char *abs, size_t len);

/*
 * Finds the mount at exactly @abs in /proc/self/mountinfo. Returns 1 and
 * fills majmin ("0:52") and fstype ("fuse.mcfs") if there is one, 0 if not,
 * or a negative errno. Either output may be NULL.
 */
MCFS_MUST_CHECK int fs_mount_find(const char *abs, char *majmin, size_t mlen, char *fstype,
				  size_t flen);

/*
 * Writes "@value\n" to the existing file @path (a sysfs knob), in one write
 * at the close (the line is buffered). Returns 0, or a negative
 * errno from the open, the write or the close; logs nothing. The file is
 * closed whatever fails.
 */
MCFS_MUST_CHECK int fs_write_knob(const char *path, unsigned value);

/* Writes read_ahead_kb of the mount's bdi (0 = leave it). Logs a warning on failure. */
void fs_mount_set_readahead(const char *abs, unsigned kb);

/*
 * Unmounts @path (lazily with @lazy) and waits for its daemon to finish
 * (in-flight fetches, index flush), up to a minute. Works on a mount whose
 * daemon crashed. Returns 0 or a negative errno after printing why.
 */
MCFS_MUST_CHECK int fs_umount(const char *path, bool lazy);

#endif
