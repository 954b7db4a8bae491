/*
 * whole_mem.c - a cold open answered from a copy of the file in memory
 * (whole_mem): the open that waits for its file whole gets a memfd of the
 * version's bytes, filled through the cache, and the kernel reads that
 * (passthrough) until the open's last close; the disk tier's version file
 * fills behind as before (whole.c's background), for later opens.
 *
 * Why: one version file fills no faster with more writers (its writes take
 * the file's lock in turn), and the first open of a checkpoint waits for
 * that one file while the others fill beside it; a memfd filled through
 * one shared mapping takes its pages' faults from many threads at once
 * (docs/benchmarks.md, "One file's page cache fills", and "The writers
 * shared out by file" for what the first open waits).
 *
 * The fill: whole_mem threads each take the next block, get it through the
 * cache (cache_block_get(): from RAM, the disk tier verified, or fetched
 * first, as a reader's miss is: at the front of the fetch queue) and copy
 * it into the mapping as soon as it is there. Then the mapping goes, the
 * memfd is sealed (no write, no resize: F_SEAL_WRITE needs no writable
 * mapping left) and handed to backing.c, which gives it to the kernel at
 * the open and closes it at the last put. So the kernel reads only bytes
 * the cache verified, and nobody can change them after.
 *
 * Where: a file on a tmpfs of our own with huge pages (huge=always), made
 * with the new mount API and never attached anywhere, so that the copy's
 * pages are 2 MiB: the fill takes a fault per 2 MiB, and the kernel maps
 * them to the reader whole. Without the right to mount (not root), a memfd
 * (shmem with 4 KiB pages, unless the host's shmem_enabled says otherwise).
 *
 * Bounds: whole_mem bytes of such copies at once (backing.c counts them);
 * a file that does not fit waits for its version file as before.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_ram.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#define FILL_THREADS 16 /* copies at once: each waits for its block's fetch first */

struct fill {
	struct cache *c;
	struct cache_file *f;
	char *map;
	atomic_uint_fast64_t next; /* the next block to take */
	atomic_int rc;		   /* the first error, or 0 */
};

static void *fill_thread(void *arg)
{
	struct fill *fl = arg;
	struct cache_block *b;
	uint64_t i;
	int rc, zero;

	pthread_setname_np(pthread_self(), "mcfs-wmem");
	while (atomic_load(&fl->rc) == 0 && (i = atomic_fetch_add(&fl->next, 1)) < fl->f->nblocks) {
		rc = cache_block_get(fl->c, fl->f, i, &b);
		if (rc < 0) {
			zero = 0;
			atomic_compare_exchange_strong(&fl->rc, &zero, rc);
			break;
		}
		memcpy(fl->map + i * fl->c->bs, cache_block_data(b), cache_block_len(b));
		cache_block_put(fl->c, b);
	}
	return NULL;
}

/* Fills @fd (sized) with @f's bytes from up to FILL_THREADS threads. 0 or -errno. */
static int fill(struct cache *c, struct cache_file *f, int fd)
{
	struct fill fl = {.c = c, .f = f};
	pthread_t t[FILL_THREADS];
	unsigned n = 0, want = (unsigned)MCFS_MIN((uint64_t)FILL_THREADS, f->nblocks), i;

	fl.map = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fl.map == MAP_FAILED)
		return -errno;
	(void)madvise(fl.map, f->size, MADV_HUGEPAGE); /* where shmem allows it */
	while (n < want && pthread_create(&t[n], NULL, fill_thread, &fl) == 0)
		n++;
	if (n == 0)
		fill_thread(&fl);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	munmap(fl.map, f->size);
	return atomic_load(&fl.rc);
}

int cache_whole_mem_mount(uint64_t limit)
{
	char size[32];
	int fs, mnt;

	fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	snprintf(size, sizeof(size), "%llu", (unsigned long long)limit);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "always", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		mnt = -errno;
		close(fs);
		return mnt;
	}
	mnt =
	    fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (mnt < 0)
		mnt = -errno;
	close(fs);
	return mnt;
}

/* A new file of @f's size for its copy: nameless, on the detached tmpfs
 * (@mnt >= 0) or a memfd. Its descriptor, or -errno. */
static int new_copy(const struct cache_file *f, int mnt)
{
	char name[64];
	int fd;

	if (mnt >= 0) {
		fd = openat(mnt, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	} else {
		snprintf(name, sizeof(name), "mcfs-whole-%llu", (unsigned long long)f->id);
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)f->size) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

/* Makes copy @fd read-only for good: a memfd sealed; a tmpfs file (no seals
 * there) reopened read-only, the writable descriptor closed, so that no
 * descriptor that may write it is left (nameless, on a mount nobody reaches).
 * The read-only descriptor, or -errno (@fd closed either way). */
static int freeze(int fd, bool memfd)
{
	char proc[64];
	int ro, rc;

	if (memfd) {
		if (fcntl(fd, F_ADD_SEALS,
			  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0)
			return fd;
		rc = -errno;
		close(fd);
		return rc;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ro = open(proc, O_RDONLY | O_CLOEXEC);
	rc = ro < 0 ? -errno : ro;
	close(fd);
	return rc;
}

int cache_whole_mem(struct cache *c, struct cache_file *f)
{
	int mnt, fd, rc;

	if (!cache_backing_mem_claim(c, f->size)) /* whole_mem 0: no copy, and no mount */
		return -ENOSPC;
	mnt = cache_backing_mem_mount(c);
	fd = new_copy(f, mnt);
	if (fd < 0) {
		rc = fd;
		goto fail;
	}
	rc = fill(c, f, fd);
	if (rc < 0)
		goto fail;
	fd = freeze(fd, mnt < 0);
	if (fd < 0) {
		rc = fd;
		goto fail;
	}
	rc = cache_backing_mem_add(c, f, fd); /* takes @fd, and the claim, either way */
	if (rc < 0)
		MCFS_WARN("%s: its copy in memory not kept (%s): waiting for its version file",
			  f->path, strerror(-rc));
	return rc;
fail:
	if (fd >= 0)
		close(fd);
	cache_backing_mem_release(c, f->size);
	MCFS_WARN("%s: no copy in memory (%s): waiting for its version file", f->path,
		  strerror(-rc));
	return rc;
}
