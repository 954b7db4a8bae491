/*
 * page_fill.c - how fast one file's page cache fills, for bench_page_fill.py
 * (issue 23: a cold open that waits for its file whole waits for this).
 *
 *   page_fill TARGET SIZE THREADS METHOD [FILES]
 *
 * TARGET: a path (created, fallocated to SIZE bytes, unlinked at the end) or
 * "memfd" (a memfd: shmem). THREADS threads take 8 MiB blocks in turn and put
 * a block of their own bytes at each offset by METHOD: "pwrite" (one pwrite
 * per block), "map" (memcpy into one shared mapping of the whole file) or
 * "mapblk" (a mapping per block, unmapped after). Then one thread reads the
 * file back with 16 MiB preads (the page cache, when the fill left it there)
 * and compares every byte. Prints "FILL_GBPS READ_GBPS"; exits 1 with a line
 * on stderr naming what failed.
 *
 * FILES (default 1) splits SIZE over that many files (TARGET.0, TARGET.1, ...;
 * memfds), filled at once, thread i taking the blocks of file i % FILES: what
 * a model's shards fetched whole side by side fill at together.
 *
 * "cold" after FILES copies each block from its own place in a buffer of
 * SIZE bytes written before the clock starts, so that every source byte
 * comes from memory, as mcfs's blocks come from the RAM tier; by default a
 * thread refills one 8 MiB buffer per block, which the CPU's cache holds.
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

#define MAXF 64

static int method, nfiles;
static char *cold_src; /* "cold": the whole source, file after file */
static size_t size;    /* of each file */
static struct one {
	int fd;
	char *map;
	size_t base; /* the file's place in cold_src */
	atomic_size_t next_off;
} files[MAXF];

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
	struct one *f = arg;
	char *own = aligned_alloc(4096, BS), *src = own, *m;
	size_t off, n;
	int fd = f->fd;
	char *map = f->map;

	if (!own)
		die("aligned_alloc");
	while ((off = atomic_fetch_add(&f->next_off, BS)) < size) {
		n = size - off < BS ? size - off : BS;
		if (cold_src)
			src = cold_src + f->base + off;
		else
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
	free(own);
	return NULL;
}

/* Reads file @f back, 16 MiB preads into @buf: seconds; exits 1 on a short read or a wrong byte. */
static double read_back(int fd, char *buf)
{
	size_t got = 0, i;
	double t0 = now(), rd;
	ssize_t r;

	while (got < size && (r = pread(fd, buf, RD, (off_t)got)) > 0)
		got += (size_t)r;
	rd = now() - t0;
	if (got != size) {
		fprintf(stderr, "page_fill: read back %zu of %zu bytes\n", got, size);
		exit(1);
	}
	for (got = 0; got < size; got += RD) {
		if (pread(fd, buf, RD, (off_t)got) < 0)
			die("pread");
		for (i = 0; i < RD && got + i < size; i += 4096)
			if ((unsigned char)buf[i] != byte_at(got + i)) {
				fprintf(stderr, "page_fill: wrong byte at %zu\n", got + i);
				exit(1);
			}
	}
	return rd;
}

int main(int argc, char **argv)
{
	pthread_t t[64];
	char path[4096], *buf;
	double t0, fill, rd = 0;
	size_t total;
	int nt, i;

	if (argc < 5 || argc > 7 || (argc == 7 && strcmp(argv[6], "cold"))) {
		fprintf(
		    stderr,
		    "usage: page_fill PATH|memfd SIZE THREADS pwrite|map|mapblk [FILES [cold]]\n");
		return 2;
	}
	total = strtoull(argv[2], NULL, 10);
	nt = atoi(argv[3]);
	nfiles = argc >= 6 ? atoi(argv[5]) : 1;
	method = !strcmp(argv[4], "pwrite") ? 0 : !strcmp(argv[4], "map") ? 1 : 2;
	if (nt < 1 || nt > 64 || nfiles < 1 || nfiles > MAXF || total < (size_t)nfiles ||
	    (method == 2 && strcmp(argv[4], "mapblk"))) {
		fprintf(stderr, "page_fill: bad arguments (size > 0, 1 to 64 threads, a method, "
				"1 to 64 files)\n");
		return 2;
	}
	size = total / (size_t)nfiles;
	if (argc == 7) {
		cold_src = aligned_alloc(4096, (size * (size_t)nfiles + 4095) / 4096 * 4096);
		if (!cold_src)
			die("aligned_alloc of the source");
	}
	for (i = 0; i < nfiles; i++) {
		struct one *f = &files[i];
		size_t off;

		f->base = (size_t)i * size;
		for (off = 0; cold_src && off < size; off += BS)
			memset(cold_src + f->base + off, byte_at(off),
			       size - off < BS ? size - off : BS);

		if (!strcmp(argv[1], "memfd")) {
			f->fd = memfd_create("page_fill", MFD_CLOEXEC);
		} else {
			snprintf(path, sizeof(path), nfiles > 1 ? "%s.%d" : "%s", argv[1], i);
			unlink(path);
			f->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		}
		if (f->fd < 0)
			die(argv[1]);
		if (fallocate(f->fd, 0, 0, (off_t)size))
			die("fallocate");
		if (method == 1) {
			f->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
			if (f->map == MAP_FAILED)
				die("mmap of the file");
		}
	}
	t0 = now();
	for (i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, filler, &files[i % nfiles]))
			die("pthread_create");
	for (i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	fill = now() - t0;
	buf = aligned_alloc(4096, RD);
	if (!buf)
		die("aligned_alloc");
	for (i = 0; i < nfiles; i++) {
		if (files[i].map)
			munmap(files[i].map, size);
		rd += read_back(files[i].fd, buf);
		if (strcmp(argv[1], "memfd")) {
			snprintf(path, sizeof(path), nfiles > 1 ? "%s.%d" : "%s", argv[1], i);
			unlink(path);
		}
	}
	printf("%.2f %.2f\n", (double)(size * (size_t)nfiles) / fill / 1e9,
	       (double)(size * (size_t)nfiles) / rd / 1e9);
	return 0;
}
