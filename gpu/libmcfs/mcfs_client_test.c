/*
 * mcfs_client_test.c - libmcfs without a mount or a GPU: a file outside mcfs
 * is refused with -ENOTTY and a reason, host memory is not a device buffer,
 * and the ABI's sizes are what the Python package expects. The calls through
 * a real mount are covered by tests/test_gpu_abi.py, and on a GPU by
 * tests/gpu/. Exits 0 on pass, 1 on fail.
 */
#define _GNU_SOURCE
#include "mcfs_client.h"
#include "mcfs_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/tmp";
	struct mcfs_devbuf buf;
	struct mcfs_info info;
	char path[4096], err[512];
	static char host[4096];
	int64_t n;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/client_test.bin", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	if (fd < 0)
		return 1;
	CHECK(write(fd, "\x08\0\0\0\0\0\0\0{}      ", 16) == 16, "write");

	rc = mcfs_info(fd, &info);
	CHECK(rc == -ENOTTY, "mcfs_info on a local file: %d", rc);

	n = mcfs_load_file(path, host, sizeof(host), err, sizeof(err));
	CHECK(n == -ENOTTY, "mcfs_load_file on a local file: %lld", (long long)n);
	CHECK(strstr(err, "not on an mcfs mount") != NULL, "message: %s", err);

	n = mcfs_load_file("/nonexistent/x.safetensors", host, sizeof(host), err, sizeof(err));
	CHECK(n == -ENOENT, "missing file: %lld", (long long)n);

	rc = mcfs_devbuf_from_ptr(host, &buf);
	CHECK(rc == -ENODEV || rc == -EOPNOTSUPP, "host memory as a device buffer: %d", rc);

	CHECK(sizeof(struct mcfs_load_req) == 15536 && sizeof(struct mcfs_info) == 304 &&
		  sizeof(struct mcfs_prefetch_req) == 56,
	      "ABI sizes");
	CHECK(MCFS_IOC_LOAD == 0xfcb06d01ul, "MCFS_IOC_LOAD = %#lx", (unsigned long)MCFS_IOC_LOAD);
	CHECK(MCFS_IOC_BIND == 0xc0786d04ul, "MCFS_IOC_BIND = %#lx", (unsigned long)MCFS_IOC_BIND);
	close(fd);
	unlink(path);
	if (failures)
		return 1;
	printf("mcfs_client_test: pass\n");
	return 0;
}
