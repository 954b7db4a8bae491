/*
 * page_fill.c - how fast one file's page cache fills, for bench_page_fill.py
 * (issue 23: a cold open that waits for its file whole waits for this).
 *
 *   page_fill TARGET SIZE THREADS METHOD
 *
 * TARGET: a path (created, fallocated to SIZE bytes, unlinked at the end) or
 * "memfd" (a memfd: shmem). THREADS threads take 8 MiB blocks in turn and put
 * a block of their own bytes at each offset by METHOD: "pwrite" (one pwrite
 * per block), "map" (memcpy into one shared mapping of the whole file) or
 * "mapblk" (a mapping per block, unmapped after). Then one thread reads the
 * file back with 16 MiB preads (the page cache, when the fill left it there)
 * and compares every byte. Prints "FILL_GBPS READ_GBPS"; exits 1 with a line
 * on stderr naming what failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BS (8ul << 20)
#define RD (16ul << 20)

static int fd, method;
static size_t size;
static char *map;
static atomic_size_t next_off;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "page_fill: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The byte at @off: differs from block to block and from the zeroes of a hole. */
static unsigned char byte_at(size_t off)
{
	return (unsigned char)(1 + (off / BS) % 251);
}

static void *filler(void *arg)
{
	char *src = aligned_alloc(4096, BS), *m;
	size_t off, n;

	(void)arg;
	if (!src)
		die("aligned_alloc");
	while ((off = atomic_fetch_add(&next_off, BS)) < size) {
		n = size - off < BS ? size - off : BS;
		memset(src, byte_at(off), n);
		if (method == 0) {
			if (pwrite(fd, src, n, (off_t)off) != (ssize_t)n)
				die("pwrite");
		} else if (method == 1) {
			memcpy(map + off, src, n);
		} else {
			m = mmap(NULL, n, PROT_WRITE, MAP_SHARED, fd, (off_t)off);
			if (m == MAP_FAILED)
				die("mmap of a block");
			memcpy(m, src, n);
			munmap(m, n);
		}
	}
	free(src);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[64];
	double t0, fill, rd;
	size_t got = 0, i;
	char *buf;
	ssize_t r;
	int nt;

	if (argc != 5) {
		fprintf(stderr, "usage: page_fill PATH|memfd SIZE THREADS pwrite|map|mapblk\n");
		return 2;
	}
	size = strtoull(argv[2], NULL, 10);
	nt = atoi(argv[3]);
	method = !strcmp(argv[4], "pwrite") ? 0 : !strcmp(argv[4], "map") ? 1 : 2;
	if (nt < 1 || nt > 64 || size == 0 || (method == 2 && strcmp(argv[4], "mapblk"))) {
		fprintf(stderr, "page_fill: bad arguments (size > 0, 1 to 64 threads, a method)\n");
		return 2;
	}
	if (!strcmp(argv[1], "memfd")) {
		fd = memfd_create("page_fill", MFD_CLOEXEC);
	} else {
		unlink(argv[1]);
		fd = open(argv[1], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		die(argv[1]);
	if (fallocate(fd, 0, 0, (off_t)size))
		die("fallocate");
	if (method == 1) {
		map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED)
			die("mmap of the file");
	}
	t0 = now();
	for (i = 0; i < (size_t)nt; i++)
		if (pthread_create(&t[i], NULL, filler, NULL))
			die("pthread_create");
	for (i = 0; i < (size_t)nt; i++)
		pthread_join(t[i], NULL);
	fill = now() - t0;
	if (map)
		munmap(map, size);
	buf = aligned_alloc(4096, RD);
	if (!buf)
		die("aligned_alloc");
	t0 = now();
	while (got < size && (r = pread(fd, buf, RD, (off_t)got)) > 0)
		got += (size_t)r;
	rd = now() - t0;
	if (got != size) {
		fprintf(stderr, "page_fill: read back %zu of %zu bytes\n", got, size);
		return 1;
	}
	for (got = 0; got < size; got += RD) {
		if (pread(fd, buf, RD, (off_t)got) < 0)
			die("pread");
		for (i = 0; i < RD && got + i < size; i += 4096)
			if ((unsigned char)buf[i] != byte_at(got + i)) {
				fprintf(stderr, "page_fill: wrong byte at %zu\n", got + i);
				return 1;
			}
	}
	if (strcmp(argv[1], "memfd"))
		unlink(argv[1]);
	printf("%.2f %.2f\n", (double)size / fill / 1e9, (double)size / rd / 1e9);
	return 0;
}
