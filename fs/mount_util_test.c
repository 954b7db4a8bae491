/*
 * mount_util_test.c - fs_write_knob()'s error paths (issue 22, item 8): a
 * knob whose write fails at the flush (/dev/full: ENOSPC at fclose) must be
 * reported once and its FILE closed once. A second fclose of the freed FILE
 * was a double free (glibc aborts, ASan reports it).
 */
#define _GNU_SOURCE
#include "mount_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcfs_test.h"

int main(void)
{
	char path[] = "/tmp/mcfs-knob-XXXXXX", buf[32] = "";
	FILE *fp;
	int fd, rc;

	rc = fs_write_knob("/dev/full", 4096);
	CHECK(rc == -ENOSPC, "/dev/full: %d (%s)", rc, strerror(-rc));

	rc = fs_write_knob("/nonexistent-dir/read_ahead_kb", 4096);
	CHECK(rc == -ENOENT, "missing: %d (%s)", rc, strerror(-rc));

	fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		return T_EXIT_FAIL;
	}
	close(fd);
	rc = fs_write_knob(path, 4096);
	CHECK(rc == 0, "%s: %d (%s)", path, rc, strerror(-rc));
	fp = fopen(path, "r");
	CHECK(fp && fgets(buf, sizeof(buf), fp) && strcmp(buf, "4096\n") == 0, "read back '%s'",
	      buf);
	if (fp)
		fclose(fp);
	unlink(path);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
