/*
 * disk_open.c - the disk tier's start and stop: disk_cache's size, the
 * index loaded from LMDB, the start-up sweep of the version files, the
 * writer thread started and joined (disk.c has the tier itself).
 *
 * Start-up: the LMDB block index is scanned once into memory (key,
 * checksum, length, last use); the LRU is rebuilt in last-use order, and
 * when there are more entries than slots (a smaller disk_cache) the oldest
 * go. Then the files are swept: a file no entry names is unlinked, and a
 * range of data no entry claims (a write whose entry was never committed,
 * an eviction whose punch a kill cut off) is punched. Nothing else needs
 * repair after a crash: data is written before its entry is committed, and
 * every read is verified against the committed checksum. An older layout
 * (one slot file, blocks/slots, plus copied backing files under files/) is
 * discarded with one log line.
 */
#define _GNU_SOURCE
#include "disk_int.h"
#include "cfg.h" /* cfg_parse_size: disk_cache sizes */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Bytes the files of @dir hold on disk (st_blocks), not counting subdirectories. */
static uint64_t dir_bytes(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	struct stat st;
	uint64_t held = 0;

	while (dd && (de = readdir(dd)) != NULL)
		if (fstatat(dirfd(dd), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			held += (uint64_t)st.st_blocks * 512;
	if (dd)
		closedir(dd);
	return held;
}

int cache_disk_limit(const char *dir, const char *spec, uint64_t *bytes)
{
	char p[4200];
	struct statvfs sv;
	uint64_t held;
	double pct;
	char *end;

	if (spec[0] && spec[strlen(spec) - 1] != '%')
		return cfg_parse_size(spec, bytes);
	pct = spec[0] ? strtod(spec, &end) : 50;
	if (!(pct > 0 && pct <= 100))
		return -EINVAL;
	if (statvfs(dir, &sv) < 0)
		return -errno;
	/* A share of what is free now plus what our version files (or an older
	 * layout's files) already hold, so that a restart does not shrink the
	 * tier by its own size. */
	snprintf(p, sizeof(p), "%s/blocks", dir);
	held = dir_bytes(p);
	snprintf(p, sizeof(p), "%s/files", dir);
	held += dir_bytes(p);
	*bytes = (uint64_t)((double)((uint64_t)sv.f_bavail * sv.f_frsize + held) * pct / 100);
	return 0;
}

/* One index entry read at start-up. */
struct loaded {
	struct cache_meta_key key;
	struct cache_meta_block v;
};

struct load_ctx {
	struct cache_disk *d;
	struct loaded *all; /* entries to keep, if there is room */
	size_t n, cap;
	struct cache_meta_key *bad; /* entries to delete */
	size_t nbad, capbad;
};

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
	size_t c = *cap ? *cap * 2 : 64;
	void *q;

	if (n < *cap)
		return 0;
	q = realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int load_one(void *arg, const struct cache_meta_key *k, const struct cache_meta_block *v)
{
	struct load_ctx *lc = arg;

	if (v->len == 0 || v->len > lc->d->bs) {
		if (grow((void **)&lc->bad, &lc->capbad, lc->nbad, sizeof(*lc->bad)) < 0)
			return -ENOMEM;
		lc->bad[lc->nbad++] = *k;
		return 0;
	}
	if (grow((void **)&lc->all, &lc->cap, lc->n, sizeof(*lc->all)) < 0)
		return -ENOMEM;
	lc->all[lc->n++] = (struct loaded){.key = *k, .v = *v};
	return 0;
}

static int by_last_use(const void *a, const void *b)
{
	uint64_t x = ((const struct loaded *)a)->v.last_use;
	uint64_t y = ((const struct loaded *)b)->v.last_use;

	return x < y ? -1 : x > y;
}

/* Removes every regular file in @dir (and @dir itself if @rmdir_too);
 * returns how many. */
static unsigned empty_dir(const char *dir, bool rmdir_too)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	while (dd && (de = readdir(dd)) != NULL)
		if (de->d_name[0] != '.' || strcmp(de->d_name, ".probe") == 0)
			n += unlinkat(dirfd(dd), de->d_name, 0) == 0;
	if (dd)
		closedir(dd);
	if (rmdir_too)
		rmdir(dir);
	return n;
}

#define LAYOUT 2 /* "disk_layout" in the index: 2 is one sparse file per version */

/*
 * Empties the tier when its index means something else: another block size,
 * or an older layout (blocks/slots, and copied backing files in files/).
 * Returns 0 or an error of the index.
 */
static int check_layout(struct cache_disk *d, const char *dir)
{
	char p[sizeof(d->path) + 16];
	uint64_t bs = 0, layout = 0, held;
	struct stat st;
	bool old;
	int rc;

	rc = cache_meta_get_u64(d->meta, "block_size", &bs);
	if (rc == 0 || rc == -ENOENT)
		rc = cache_meta_get_u64(d->meta, "disk_layout", &layout);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	snprintf(p, sizeof(p), "%s/slots", d->path);
	old = stat(p, &st) == 0;
	if (!old && layout == LAYOUT && bs == d->bs)
		return 0;
	/* Another block size means other byte ranges; the slot file holds blocks
	 * in any order. Neither is worth a copy: the store has every byte. */
	snprintf(p, sizeof(p), "%s/files", dir);
	held = dir_bytes(d->path) + dir_bytes(p);
	if (old || layout != 0)
		MCFS_WARN("disk tier %s: %s; discarding the blocks it held (%llu MiB on disk): "
			  "they are fetched again when read",
			  d->path,
			  old || layout != LAYOUT ? "an older layout (one slot file and copied "
						    "backing files)"
						  : "the block size changed",
			  (unsigned long long)(held >> 20));
	/* A new store directory (no block size recorded) has no block to clear:
	 * one commit fewer, so that a start-up leaves LMDB as it always did. */
	rc = bs || layout || old ? cache_meta_blocks_clear(d->meta) : 0;
	empty_dir(d->path, false);
	snprintf(p, sizeof(p), "%s/files", dir);
	empty_dir(p, true);
	if (rc == 0)
		rc = cache_meta_put_u64(d->meta, "block_size", d->bs);
	if (rc == 0)
		rc = cache_meta_put_u64(d->meta, "disk_layout", LAYOUT);
	return rc;
}

/* Builds the index from LMDB: the hash, the LRU (oldest first), the free
 * stack and the version files' counts. */
static int load_index(struct cache_disk *d)
{
	struct load_ctx lc = {.d = d};
	size_t j, skip = 0;
	uint32_t i;
	int rc;

	rc = cache_meta_blocks_scan(d->meta, load_one, &lc);
	if (rc == 0) {
		if (lc.n) /* an empty index has no array at all */
			qsort(lc.all, lc.n, sizeof(*lc.all), by_last_use);
		/* More than fit (a smaller disk_cache): the least recently used go. */
		skip = lc.n > d->nslots ? lc.n - d->nslots : 0;
		for (j = 0; j < skip && rc == 0; j++) {
			rc = grow((void **)&lc.bad, &lc.capbad, lc.nbad, sizeof(*lc.bad));
			if (rc == 0)
				lc.bad[lc.nbad++] = lc.all[j].key;
		}
	}
	if (rc == 0 && lc.nbad)
		rc = cache_meta_blocks_update(d->meta, lc.bad, lc.nbad, NULL, NULL, 0);
	/* No other thread yet: the lock only keeps the index helpers' rule
	 * (lock held) true everywhere, so debug builds can check it. */
	pthread_mutex_lock(&d->lock);
	for (j = skip, i = 0; rc == 0 && j < lc.n; j++, i++) {
		struct dslot *s = &d->slots[i];

		s->key = lc.all[j].key;
		s->csum = lc.all[j].v.csum;
		s->len = lc.all[j].v.len;
		s->last_use = lc.all[j].v.last_use;
		s->state = DS_VALID;
		rc = cache_disk_file_get(d, &s->key);
		if (rc == 0) {
			s->old = true;
			cache_disk_file(d, &s->key)->nold++;
		}
		cache_disk_hash_insert(d, i);
		cache_disk_lru_push(d, i);
		d->st.slots_used++;
		d->st.bytes_used += s->len;
	}
	/* Free slots, lowest on top. */
	for (i = d->nslots; rc == 0 && i-- > 0;)
		if (d->slots[i].state == DS_FREE)
			d->free_stack[d->nfree++] = i;
	pthread_mutex_unlock(&d->lock);
	free(lc.all);
	free(lc.bad);
	return rc;
}

/* Parses a version file's name into the first CACHE_DISK_FILE_ID bytes of @k. */
static bool parse_name(const char *name, struct cache_meta_key *k)
{
	unsigned i, v;

	if (strlen(name) != 2 * CACHE_DISK_FILE_ID)
		return false;
	memset(k, 0, sizeof(*k));
	for (i = 0; i < CACHE_DISK_FILE_ID; i++) {
		if (sscanf(name + 2 * i, "%2x", &v) != 1)
			return false;
		k->b[i] = (unsigned char)v;
	}
	return true;
}

/* Punches out of @fd every block of data that no VALID slot claims. Lock not
 * needed (start-up); returns the bytes punched. */
static uint64_t sweep_file(struct cache_disk *d, int fd, struct cache_meta_key *k)
{
	off_t data = 0, hole;
	uint64_t idx, punched = 0;
	unsigned i;

	for (;;) {
		data = lseek(fd, data, SEEK_DATA);
		if (data < 0)
			break;
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			break;
		for (idx = (uint64_t)data / d->bs; idx * d->bs < (uint64_t)hole; idx++) {
			for (i = 0; i < 8; i++)
				k->b[CACHE_DISK_FILE_ID + i] = (unsigned char)(idx >> (56 - 8 * i));
			pthread_mutex_lock(&d->lock);
			i = cache_disk_find(d, k);
			pthread_mutex_unlock(&d->lock);
			if (i != DNIL)
				continue;
			if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				      (off_t)(idx * d->bs), (off_t)d->bs) == 0)
				punched += d->bs;
		}
		data = hole;
	}
	return punched;
}

/* Unlinks version files no entry names and punches unclaimed data out of the
 * others: what a kill left between a write and its entry, or between an
 * entry's deletion and its punch. */
static void sweep(struct cache_disk *d)
{
	DIR *dd = opendir(d->path);
	struct cache_meta_key k;
	struct dirent *de;
	unsigned gone = 0;
	uint64_t punched = 0;
	bool named;
	int fd;

	while (dd && (de = readdir(dd)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		named = parse_name(de->d_name, &k);
		if (named) {
			pthread_mutex_lock(&d->lock);
			named = cache_disk_file(d, &k) != NULL;
			pthread_mutex_unlock(&d->lock);
		}
		if (!named) {
			gone += unlinkat(dirfd(dd), de->d_name, 0) == 0;
			continue;
		}
		fd = openat(dirfd(dd), de->d_name, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			punched += sweep_file(d, fd, &k);
			close(fd);
		}
	}
	if (dd)
		closedir(dd);
	if (gone || punched)
		MCFS_INFO("disk tier %s: %u version files no entry names removed, %llu MiB of "
			  "blocks no entry claims punched (left by a kill)",
			  d->path, gone, (unsigned long long)(punched >> 20));
}

/* Creates the blocks directory and, if @direct, finds out whether it takes O_DIRECT. */
static int open_dir(struct cache_disk *d, const char *dir, bool direct)
{
	char p[sizeof(d->path) + 16];
	int fd;

	if (snprintf(d->path, sizeof(d->path), "%s/blocks", dir) >= (int)sizeof(d->path) - 64)
		return -ENAMETOOLONG;
	if (mkdir(d->path, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(p, sizeof(p), "%s/.probe", d->path);
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
	d->direct = fd >= 0 && direct;
	if (fd < 0 && errno == EINVAL && direct) {
		MCFS_INFO("disk tier %s: the filesystem refuses O_DIRECT; using buffered I/O",
			  d->path);
		fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	close(fd);
	unlink(p);
	return 0;
}

static int alloc_index(struct cache_disk *d, unsigned queue_max)
{
	uint32_t i;

	d->nbuckets = 1;
	while (d->nbuckets < d->nslots * 2)
		d->nbuckets <<= 1;
	d->slots = calloc(d->nslots + 1, sizeof(*d->slots));
	d->buckets = malloc(d->nbuckets * sizeof(*d->buckets));
	d->free_stack = malloc(d->nslots * sizeof(*d->free_stack));
	d->qmax = queue_max ? queue_max : 1;
	d->q = calloc(d->qmax, sizeof(*d->q));
	d->wb = calloc(WB_WINDOW, sizeof(*d->wb));
	if (!d->slots || !d->buckets || !d->free_stack || !d->q || !d->wb)
		return -ENOMEM;
	memset(d->buckets, 0xff, d->nbuckets * sizeof(*d->buckets)); /* DNIL */
	for (i = 0; i <= d->nslots; i++) {
		d->slots[i].hnext = DNIL;
		d->slots[i].state = DS_FREE;
	}
	d->slots[d->nslots].prev = d->slots[d->nslots].next = d->nslots; /* LRU sentinel */
	d->punch = DNIL;
	d->st.slots = d->nslots;
	d->st.bytes_limit = (uint64_t)d->nslots * d->bs;
	return 0;
}

int cache_disk_open(const char *dir, uint64_t limit, uint64_t bs, struct cache_meta *meta,
		    unsigned queue_max, bool direct, unsigned writers,
		    void (*done)(void *ctx, void *arg), void *ctx, struct cache_disk **out)
{
	struct cache_disk *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	d->meta = meta;
	d->bs = bs;
	d->nslots = (uint32_t)MCFS_MIN(limit / bs, (uint64_t)UINT32_MAX - 1);
	d->done = done;
	d->ctx = ctx;
	d->nwriters = MCFS_MAX(1, writers);
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->drained, NULL);
	pthread_cond_init(&d->wb_go, NULL);
	rc = d->nslots ? 0 : -ENOSPC;
	if (rc == 0)
		rc = alloc_index(d, queue_max);
	if (rc == 0)
		rc = open_dir(d, dir, direct);
	if (rc == 0)
		rc = check_layout(d, dir);
	if (rc == 0)
		rc = load_index(d);
	if (rc == 0)
		sweep(d);
	if (rc == 0) {
		rc = -pthread_create(&d->writer, NULL, cache_disk_writer, d);
		d->writer_started = rc == 0;
	}
	if (rc < 0) {
		MCFS_ERR("disk tier in %s (%u slots): %s", dir, d->nslots, strerror(-rc));
		cache_disk_close(d);
		return rc;
	}
	MCFS_INFO("disk tier in %s (%u slots, %llu blocks held, %u writer%s, one file per "
		  "version, %s)",
		  dir, d->nslots, (unsigned long long)d->st.slots_used, d->nwriters,
		  d->nwriters == 1 ? "" : "s", d->direct ? "O_DIRECT" : "buffered");
	*out = d;
	return 0;
}

void cache_disk_close(struct cache_disk *d)
{
	struct dring *r, *next;
	struct dfile *f, *fn;
	unsigned h;

	if (!d)
		return;
	if (d->writer_started) {
		pthread_mutex_lock(&d->lock);
		d->stopping = true;
		pthread_cond_broadcast(&d->work);
		pthread_cond_broadcast(&d->drained);
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->writer, NULL); /* drains the queue and persists use times */
	}
	for (r = d->rings; r; r = next) {
		next = r->next;
		io_uring_queue_exit(&r->ring);
		free(r);
	}
	for (h = 0; h < DFILE_BUCKETS; h++)
		for (f = d->files[h]; f; f = fn) {
			fn = f->hnext;
			free(f);
		}
	free(d->slots);
	free(d->buckets);
	free(d->free_stack);
	free(d->q);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->drained);
	pthread_cond_destroy(&d->wb_go);
	free(d->wb);
	free(d);
}
