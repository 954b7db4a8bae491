/*
 * disk.c - the disk tier's version files, in-memory index and read path.
 *
 * Layout (docs/architecture.md, layout (d)): CACHE_DIR/blocks holds one
 * sparse file per file version, named by the path and version hashes of its
 * blocks' keys, with block i at offset i * block_size. A block gets its disk
 * blocks when written (fallocate in the writer, so a full filesystem shows up
 * as ENOSPC on one block); an evicted block is punched out (FALLOC_FL_PUNCH_
 * HOLE), and a file with no block left is unlinked. So the tier holds each
 * byte once, and a version held whole is its own backing file for FUSE
 * passthrough (cache_disk_pin_file()): no copy. The tier holds at most
 * nslots = disk_cache / block_size blocks, each at most one block of disk.
 *
 * Start-up (the index loaded, the files swept) and stop are in
 * disk_open.c.
 *
 * Reads: a RAM-tier miss calls cache_disk_read(): look the key up, pin the
 * slot (readers++, so no eviction punches it), read it through a pooled
 * io_uring in 1 MiB pieces submitted together, verify XXH3-64, unpin. The
 * bytes land straight in the caller's buffer, the RAM-tier slot.
 *
 * Writes, punches and unlinks are in disk_writer.c, on one thread: so a
 * file is never unlinked while a block is being written into it.
 */
#define _GNU_SOURCE
#include "disk_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE (1u << 20) /* bytes per SQE: big enough for the disk, 8 per 8 MiB block */
#define RING_DEPTH 64	 /* per read ring: a 64 MiB block in one submission */

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- index (lock held) ------------------------------------------------------ */

static uint32_t hash_of(const struct cache_disk *d, const struct cache_meta_key *k)
{
	return (uint32_t)(XXH3_64bits(k->b, sizeof(k->b)) & (d->nbuckets - 1));
}

uint32_t cache_disk_find(struct cache_disk *d, const struct cache_meta_key *k)
{
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	for (i = d->buckets[hash_of(d, k)]; i != DNIL; i = d->slots[i].hnext)
		if (memcmp(&d->slots[i].key, k, sizeof(*k)) == 0)
			return i;
	return DNIL;
}

void cache_disk_hash_insert(struct cache_disk *d, uint32_t i)
{
	uint32_t h = hash_of(d, &d->slots[i].key);

	MCFS_ASSERT_HELD(&d->lock);
	d->slots[i].hnext = d->buckets[h];
	d->buckets[h] = i;
}

void cache_disk_hash_remove(struct cache_disk *d, uint32_t i)
{
	uint32_t *pp = &d->buckets[hash_of(d, &d->slots[i].key)];

	struct dfile *f;

	MCFS_ASSERT_HELD(&d->lock);
	while (*pp != i)
		pp = &d->slots[*pp].hnext;
	*pp = d->slots[i].hnext;
	d->slots[i].hnext = DNIL;
	if (d->slots[i].old) {
		f = cache_disk_file(d, &d->slots[i].key);
		if (f && f->nold)
			f->nold--;
		d->slots[i].old = false;
	}
}

void cache_disk_lru_del(struct cache_disk *d, uint32_t i)
{
	struct dslot *s = &d->slots[i];

	MCFS_ASSERT_HELD(&d->lock);
	if (!s->on_lru)
		return;
	d->slots[s->prev].next = s->next;
	d->slots[s->next].prev = s->prev;
	s->on_lru = false;
}

/* Appends at the most recently used end. */
void cache_disk_lru_push(struct cache_disk *d, uint32_t i)
{
	struct dslot *s = &d->slots[i], *head = &d->slots[d->nslots];

	MCFS_ASSERT_HELD(&d->lock);
	s->prev = head->prev;
	s->next = d->nslots;
	d->slots[head->prev].next = i;
	head->prev = i;
	s->on_lru = true;
}

/* ---- version files (lock held) ---------------------------------------------- */

static unsigned file_bucket(const struct cache_meta_key *k)
{
	return (unsigned)(XXH3_64bits(k->b, CACHE_DISK_FILE_ID) % DFILE_BUCKETS);
}

struct dfile *cache_disk_file(struct cache_disk *d, const struct cache_meta_key *k)
{
	struct dfile *f;

	MCFS_ASSERT_HELD(&d->lock);
	for (f = d->files[file_bucket(k)]; f; f = f->hnext)
		if (memcmp(f->id, k->b, CACHE_DISK_FILE_ID) == 0)
			return f;
	return NULL;
}

int cache_disk_file_get(struct cache_disk *d, const struct cache_meta_key *k)
{
	struct dfile *f = cache_disk_file(d, k);
	unsigned h;

	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f)
			return -ENOMEM;
		memcpy(f->id, k->b, CACHE_DISK_FILE_ID);
		h = file_bucket(k);
		f->hnext = d->files[h];
		d->files[h] = f;
	}
	f->nheld++;
	f->verified = false;   /* a block comes or changes: check them all again */
	f->superseded = false; /* the version is being fetched again: current */
	return 0;
}

bool cache_disk_file_put(struct cache_disk *d, const struct cache_meta_key *k)
{
	struct dfile *f = cache_disk_file(d, k), **pp;

	if (!f)
		return false;
	if (--f->nheld > 0)
		return false;
	for (pp = &d->files[file_bucket(k)]; *pp != f; pp = &(*pp)->hnext)
		;
	*pp = f->hnext;
	free(f);
	return true;
}

void cache_disk_file_name(const struct cache_disk *d, const struct cache_meta_key *k, char *out,
			  size_t outlen)
{
	size_t n = (size_t)snprintf(out, outlen, "%s/", d->path);
	unsigned i;

	for (i = 0; i < CACHE_DISK_FILE_ID && n + 3 <= outlen; i++, n += 2)
		snprintf(out + n, 3, "%02x", k->b[i]);
}

uint64_t cache_disk_offset(const struct cache_disk *d, const struct cache_meta_key *k)
{
	uint64_t index = 0;
	unsigned i;

	for (i = CACHE_DISK_FILE_ID; i < CACHE_META_KEY_LEN; i++) /* big endian (meta.c) */
		index = index << 8 | k->b[i];
	return index * d->bs;
}

void cache_disk_punch_later(struct cache_disk *d, uint32_t i)
{
	MCFS_ASSERT_HELD(&d->lock);
	d->slots[i].next = d->punch;
	d->punch = i;
	pthread_cond_signal(&d->work);
}

/* ---- I/O ------------------------------------------------------------------------ */

int cache_disk_rw(struct cache_disk *d, struct io_uring *ring, bool write, int fd, uint64_t base,
		  char *buf, uint32_t len)
{
	uint64_t total = round_up(len, CACHE_DISK_ALIGN);
	unsigned n = (unsigned)((total + PIECE - 1) / PIECE), sent = 0, done = 0, i;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int rc = 0, r;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	while (done < n) {
		/* Fill the ring with the pieces not yet sent, then reap one. */
		while (sent < n && (sqe = io_uring_get_sqe(ring)) != NULL) {
			uint64_t off = (uint64_t)sent * PIECE;
			unsigned plen = (unsigned)MCFS_MIN((uint64_t)PIECE, total - off);
			/* A read needs only the valid bytes: the last block of a
			 * version file ends at the file's size, not rounded up. */
			unsigned need =
			    write ? plen : (unsigned)MCFS_MIN((uint64_t)plen, len - off);

			if (write)
				io_uring_prep_write(sqe, fd, buf + off, plen, base + off);
			else
				io_uring_prep_read(sqe, fd, buf + off, plen, base + off);
			io_uring_sqe_set_data64(sqe, need);
			sent++;
		}
		r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR) {
			rc = r;
			break;
		}
		for (i = 0; io_uring_peek_cqe(ring, &cqe) == 0; i++) {
			if (cqe->res < 0 && rc == 0)
				rc = cqe->res;
			else if ((uint64_t)cqe->res < io_uring_cqe_get_data64(cqe) && rc == 0)
				rc = -EIO; /* short: the version file was cut */
			io_uring_cqe_seen(ring, cqe);
			done++;
		}
	}
	/* After a submit error, reap what is still in flight before the ring is reused. */
	while (done < sent && io_uring_wait_cqe(ring, &cqe) == 0) {
		io_uring_cqe_seen(ring, cqe);
		done++;
	}
	return rc;
}

static struct dring *ring_get(struct cache_disk *d)
{
	struct dring *r;

	pthread_mutex_lock(&d->lock);
	r = d->rings;
	if (r)
		d->rings = r->next;
	pthread_mutex_unlock(&d->lock);
	if (r)
		return r;
	r = calloc(1, sizeof(*r));
	if (r && io_uring_queue_init(RING_DEPTH, &r->ring, 0) < 0) {
		free(r);
		r = NULL;
	}
	return r;
}

static void ring_put(struct cache_disk *d, struct dring *r)
{
	pthread_mutex_lock(&d->lock);
	r->next = d->rings;
	d->rings = r;
	pthread_mutex_unlock(&d->lock);
}

/* Takes VALID slot @i (no readers) out of the hash and the LRU: DEAD. Lock held. */
static void kill_slot(struct cache_disk *d, uint32_t i)
{
	struct dslot *s = &d->slots[i];
	struct dfile *f = cache_disk_file(d, &s->key);

	MCFS_ASSERT_HELD(&d->lock);
	/* Its version is no longer whole: no backing file now (its file stays
	 * named until the punch, which must not count it), and a block that
	 * comes back is checked with the others at the next pin. */
	if (f)
		f->verified = false;
	cache_disk_hash_remove(d, i);
	cache_disk_lru_del(d, i);
	s->state = DS_DEAD;
	d->st.slots_used--;
	d->st.bytes_used -= s->len;
}

/* Deletes the index entries of DEAD slots @idx (their keys in @keys), then
 * hands them to the writer to punch. No lock held. */
static int drop_dead(struct cache_disk *d, const uint32_t *idx, const struct cache_meta_key *keys,
		     uint32_t n)
{
	uint32_t j;
	int rc;

	MCFS_ASSERT_NOT_HELD(&d->lock);
	rc = cache_meta_blocks_update(d->meta, keys, n, NULL, NULL, 0);
	pthread_mutex_lock(&d->lock);
	/* On failure they stay DEAD (never punched nor reused) until restart; the
	 * checksum guards the entries left behind. */
	for (j = 0; rc == 0 && j < n; j++)
		cache_disk_punch_later(d, idx[j]);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* Opens @k's version file for reading. No lock held. */
static int open_file(struct cache_disk *d, const struct cache_meta_key *k, bool direct)
{
	char p[sizeof(d->path) + 64];

	cache_disk_file_name(d, k, p, sizeof(p));
	return open(p, O_RDONLY | O_CLOEXEC | (direct && d->direct ? O_DIRECT : 0));
}

int cache_disk_read(struct cache_disk *d, const struct cache_meta_key *k, char *buf, size_t cap,
		    uint32_t *len)
{
	struct cache_meta_key key = *k;
	struct dring *r;
	struct dslot *s;
	uint64_t csum;
	uint32_t i, n;
	bool ok;
	int rc, fd;

	pthread_mutex_lock(&d->lock);
	i = cache_disk_find(d, k);
	if (i == DNIL || d->slots[i].state != DS_VALID || d->slots[i].len > cap) {
		d->st.misses++;
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	s = &d->slots[i];
	if (s->readers++ == 0)
		cache_disk_lru_del(d, i);
	n = s->len;
	csum = s->csum;
	pthread_mutex_unlock(&d->lock);

	r = ring_get(d);
	fd = open_file(d, k, true);
	if (fd < 0)
		rc = errno == ENOENT ? -EIO
				     : -errno; /* ENOENT: the file is gone, so are the bytes */
	else
		rc = r ? cache_disk_rw(d, &r->ring, false, fd, cache_disk_offset(d, k), buf, n)
		       : -ENOMEM;
	if (fd >= 0)
		close(fd);
	if (r)
		ring_put(d, r);
	ok = rc == 0 && XXH3_64bits(buf, n) == csum;

	pthread_mutex_lock(&d->lock);
	s->readers--;
	if (ok) {
		d->st.hits++;
		d->st.read_bytes += n;
		s->last_use = (uint64_t)cache_meta_now();
		s->dirty = true;
		d->ndirty = true;
		if (s->readers == 0)
			cache_disk_lru_push(d, i);
		pthread_mutex_unlock(&d->lock);
		*len = n;
		return 0;
	}
	if (rc < 0)
		d->st.io_errors++;
	else
		d->st.csum_errors++;
	if (rc < 0 && rc != -EIO) {
		/* not about the bytes (e.g. no io_uring for this thread: -ENOMEM):
		 * keep the block, read from the store this time */
		if (s->readers == 0)
			cache_disk_lru_push(d, i);
		pthread_mutex_unlock(&d->lock);
		MCFS_ERR("disk tier %s: reading a block at offset %llu: %s", d->path,
			 (unsigned long long)cache_disk_offset(d, &key), strerror(-rc));
		return -EIO;
	}
	/* Torn, overwritten or rotten bytes: never served; the block goes. */
	if (s->readers == 0 && s->state == DS_VALID)
		kill_slot(d, i);
	else
		i = DNIL; /* pinned (a read or the kernel): dropped once unpinned and read again */
	pthread_mutex_unlock(&d->lock);
	MCFS_ERR("disk tier %s: block at offset %llu of version file %02x%02x%02x... (%u bytes) "
		 "%s: dropped, fetching the block again",
		 d->path, (unsigned long long)cache_disk_offset(d, &key), key.b[0], key.b[1],
		 key.b[2], n, rc < 0 ? "could not be read" : "failed its checksum");
	if (i != DNIL && drop_dead(d, &i, &key, 1) < 0)
		MCFS_ERR("disk tier %s: dropping a bad block from the index failed", d->path);
	return -ENOENT;
}

uint32_t cache_disk_held(struct cache_disk *d, const struct cache_meta_key *k)
{
	uint32_t i, n = 0;

	pthread_mutex_lock(&d->lock);
	i = cache_disk_find(d, k);
	if (i != DNIL && d->slots[i].state == DS_VALID)
		n = d->slots[i].len;
	pthread_mutex_unlock(&d->lock);
	return n;
}

/* Sleeps on d->drained (d->lock) until the writer punched every DEAD slot queued. */
static void wait_punched(struct cache_disk *d)
{
	pthread_mutex_lock(&d->lock);
	while ((d->punch != DNIL || d->punching) && d->writer_started && !d->stopping)
		pthread_cond_wait(&d->drained, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

/* Drops @path's blocks no read uses and no pin holds; with @keep, not those
 * of @keep's version. Returns the bytes dropped. No lock held. */
static uint64_t evict(struct cache_disk *d, const char *path, const struct cache_meta_key *keep)
{
	struct cache_meta_key *keys = NULL;
	uint32_t *idx = NULL, i, n = 0;
	uint64_t bytes = 0;
	struct dfile *f;
	int rc;

	pthread_mutex_lock(&d->lock);
	/* The version pinned last is the current one, even if it was marked
	 * superseded before (an old version's open inode opened again). */
	if (keep && (f = cache_disk_file(d, keep)))
		f->superseded = false;
	for (i = 0; i < d->nslots; i++) {
		struct dslot *s = &d->slots[i];

		if (s->state != DS_VALID || !cache_meta_key_has_path(&s->key, path) ||
		    (keep && memcmp(s->key.b, keep->b, CACHE_DISK_FILE_ID) == 0))
			continue;
		if (s->readers) {
			/* Pinned (the kernel reads it) or being read: a superseded
			 * version's blocks go at its last unpin. Marked under the
			 * lock that unpin takes, so no unpin slips between. */
			if (keep && (f = cache_disk_file(d, &s->key)))
				f->superseded = true;
			continue;
		}
		if (!keys) {
			keys = malloc(d->nslots * sizeof(*keys));
			idx = malloc(d->nslots * sizeof(*idx));
			if (!keys || !idx)
				break;
		}
		bytes += s->len;
		kill_slot(d, i);
		keys[n] = s->key;
		idx[n++] = i;
	}
	pthread_mutex_unlock(&d->lock);
	if (n) {
		rc = drop_dead(d, idx, keys, n);
		if (rc < 0)
			MCFS_ERR("disk tier: evicting %s from the index: %s", path, strerror(-rc));
		else if (!keep)
			wait_punched(d); /* `mcfs evict` returns with the disk space freed */
	}
	free(keys);
	free(idx);
	return bytes;
}

uint64_t cache_disk_evict_path(struct cache_disk *d, const char *path)
{
	return evict(d, path, NULL);
}

/* Unpins the @n blocks of @keys pinned by pin_blocks(). Lock held. */
static void unpin_blocks(struct cache_disk *d, const struct cache_meta_key *keys, uint64_t n)
{
	uint64_t j;
	uint32_t i;

	MCFS_ASSERT_HELD(&d->lock);
	for (j = 0; j < n; j++) {
		i = cache_disk_find(d, &keys[j]);
		if (i == DNIL || !d->slots[i].readers)
			continue;
		if (--d->slots[i].readers == 0 && d->slots[i].state == DS_VALID)
			cache_disk_lru_push(d, i);
	}
}

/* Fills @keys with the @n block keys of a version of @size bytes. */
static void version_keys(struct cache_disk *d, const char *path, const char *version,
			 struct cache_meta_key *keys, uint64_t n)
{
	uint64_t j;

	(void)d;
	for (j = 0; j < n; j++)
		cache_meta_block_key(path, version, j, &keys[j]);
}

#define VERIFY_CHUNK (32u << 20) /* bytes read at once: 32 pieces in flight */

/* Reads the version file @fd through an io_uring, up to VERIFY_CHUNK at once
 * in 1 MiB pieces in flight together (buffered: it fills the page cache the
 * kernel will read from; faster than one pread at a time: docs/benchmarks.md,
 * "Backing-file verification"), and checks each block against its checksum.
 * Returns the index of the first bad block, or @n if all are good; *err is
 * set for a failure that is not about the bytes (no memory, no ring). No lock
 * held. */
static uint64_t verify_blocks(struct cache_disk *d, int fd, const uint64_t *csum,
			      const uint32_t *lens, uint64_t n, int *err)
{
	uint64_t per = MCFS_MAX(1, VERIFY_CHUNK / d->bs), j, k, len;
	struct dring *r = ring_get(d);
	char *buf = NULL;

	*err = r && posix_memalign((void **)&buf, CACHE_DISK_ALIGN, per * d->bs) == 0 ? 0 : -ENOMEM;
	for (j = 0; *err == 0 && j < n; j += per) {
		k = MCFS_MIN(per, n - j); /* blocks j .. j+k-1: all whole but the file's last */
		len = (k - 1) * d->bs + lens[j + k - 1];
		if (cache_disk_rw(d, &r->ring, false, fd, j * d->bs, buf, (uint32_t)len) < 0)
			break; /* a short file: block j is the first one not there */
		for (k = 0; k < MCFS_MIN(per, n - j); k++)
			if (XXH3_64bits(buf + k * d->bs, lens[j + k]) != csum[j + k])
				break;
		if (k < MCFS_MIN(per, n - j)) {
			j += k;
			break;
		}
	}
	if (r)
		ring_put(d, r);
	free(buf);
	return *err ? 0 : MCFS_MIN(j, n);
}

/* Unpins the @n blocks of @keys and drops block @bad, which failed its
 * checksum (unless another pin or read holds it: then its next read through
 * the cache drops it). No lock held. */
static void refuse(struct cache_disk *d, const struct cache_meta_key *keys, uint64_t n,
		   uint64_t bad)
{
	uint32_t i;

	pthread_mutex_lock(&d->lock);
	unpin_blocks(d, keys, n);
	i = cache_disk_find(d, &keys[bad]);
	if (i != DNIL && d->slots[i].readers == 0 && d->slots[i].state == DS_VALID)
		kill_slot(d, i);
	else
		i = DNIL;
	pthread_mutex_unlock(&d->lock);
	if (i != DNIL && drop_dead(d, &i, &keys[bad], 1) < 0)
		MCFS_ERR("disk tier %s: dropping a bad block from the index failed", d->path);
}

int cache_disk_pin_file(struct cache_disk *d, const char *path, const char *version, uint64_t size,
			int *fd)
{
	uint64_t n = (size + d->bs - 1) / d->bs, j, pinned = 0, bad;
	struct cache_meta_key *keys = calloc(n ? n : 1, sizeof(*keys));
	uint32_t *lens = calloc(n ? n : 1, sizeof(*lens)), i;
	uint64_t *csum = calloc(n ? n : 1, sizeof(*csum));
	char p[sizeof(d->path) + 64];
	struct dfile *f;
	struct stat st;
	bool verified = false, fresh = false;
	int rc = 0;

	*fd = -1;
	if (!keys || !lens || !csum || n == 0) {
		rc = n ? -ENOMEM : -ENOENT;
		goto out;
	}
	version_keys(d, path, version, keys, n);
	pthread_mutex_lock(&d->lock);
	for (j = 0; j < n; j++) {
		uint32_t whole = (uint32_t)MCFS_MIN(d->bs, size - j * d->bs);

		i = cache_disk_find(d, &keys[j]);
		if (i == DNIL || d->slots[i].state != DS_VALID || d->slots[i].len != whole)
			break;
		if (d->slots[i].readers++ == 0)
			cache_disk_lru_del(d, i); /* pinned: never evicted while the kernel reads */
		lens[j] = whole;
		csum[j] = d->slots[i].csum;
		pinned++;
	}
	f = cache_disk_file(d, &keys[0]);
	verified = f && f->verified;
	/* Every block written by this mount: each was hashed from the bytes
	 * it wrote, as it wrote them; nothing is read back. */
	fresh = f && f->nold == 0;
	if (pinned < n) {
		unpin_blocks(d, keys, pinned);
		rc = -ENOENT; /* not held whole: reads go through the cache */
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0)
		goto out;
	cache_disk_file_name(d, &keys[0], p, sizeof(p));
	/* The last block was written rounded up to CACHE_DISK_ALIGN: the kernel
	 * must see the file's own size. No write runs on a version held whole. */
	if (stat(p, &st) < 0 || ((uint64_t)st.st_size != size && truncate(p, (off_t)size) < 0))
		rc = -errno;
	if (rc == 0) {
		*fd = open(p, O_RDONLY | O_CLOEXEC);
		if (*fd < 0)
			rc = -errno;
	}
	if (rc == 0 && !verified) {
		bad = fresh ? n : verify_blocks(d, *fd, csum, lens, n, &rc);
		pthread_mutex_lock(&d->lock);
		if (rc == 0 && bad == n) {
			d->verifies++;
			f = cache_disk_file(d, &keys[0]);
			if (f) {
				f->verified = true;
				f->size = size;
			}
		} else if (rc == 0) {
			d->verify_errors++;
			d->st.csum_errors++;
			rc = -EIO;
		}
		pthread_mutex_unlock(&d->lock);
		if (rc == -EIO) {
			MCFS_ERR("disk tier %s: %s (%s): block %llu failed its checksum at "
				 "registration: no passthrough; the block is fetched again",
				 d->path, path, version, (unsigned long long)bad);
			refuse(d, keys, n, bad);
			close(*fd);
			*fd = -1;
			goto out;
		}
	}
	/* This version is whole: the path's others are superseded (the store
	 * changed), and go unless a reader or the kernel still holds them (a
	 * held one is marked here and goes at its last unpin). */
	if (rc == 0)
		(void)evict(d, path, &keys[0]);
	if (rc < 0) {
		MCFS_ERR("disk tier %s: %s (%s) as a backing file: %s", p, path, version,
			 strerror(-rc));
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		pthread_mutex_lock(&d->lock);
		unpin_blocks(d, keys, n);
		pthread_mutex_unlock(&d->lock);
	}
out:
	free(keys);
	free(lens);
	free(csum);
	return rc;
}

void cache_disk_unpin_file(struct cache_disk *d, const char *path, const char *version,
			   uint64_t size)
{
	uint64_t n = (size + d->bs - 1) / d->bs, j;
	struct cache_meta_key *keys = calloc(n ? n : 1, sizeof(*keys));
	uint32_t *idx = calloc(n ? n : 1, sizeof(*idx)), i, dead = 0;
	struct dfile *f;
	bool drop;
	int rc;

	if (!keys || !idx) {
		MCFS_ERR("disk tier: unpinning %s: out of memory; its blocks stay until restart",
			 path);
		free(keys);
		free(idx);
		return;
	}
	version_keys(d, path, version, keys, n);
	pthread_mutex_lock(&d->lock);
	unpin_blocks(d, keys, n);
	f = cache_disk_file(d, &keys[0]);
	drop = f && f->superseded;
	for (j = 0; drop && j < n; j++) {
		i = cache_disk_find(d, &keys[j]);
		if (i == DNIL || d->slots[i].state != DS_VALID || d->slots[i].readers)
			continue; /* a read or another pin still uses it: LRU takes it later */
		kill_slot(d, i);
		keys[dead] = keys[j];
		idx[dead++] = i;
	}
	pthread_mutex_unlock(&d->lock);
	if (dead && (rc = drop_dead(d, idx, keys, dead)) < 0)
		MCFS_ERR("disk tier: dropping superseded %s (%s) from the index: %s", path, version,
			 strerror(-rc));
	free(keys);
	free(idx);
}

void cache_disk_verify_stats(struct cache_disk *d, struct cache_disk_verified *out)
{
	struct dfile *f;
	unsigned h;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&d->lock);
	out->verifies = d->verifies;
	out->errors = d->verify_errors;
	for (h = 0; h < DFILE_BUCKETS; h++)
		for (f = d->files[h]; f; f = f->hnext)
			if (f->verified) {
				out->files++;
				out->bytes += f->size;
			}
	pthread_mutex_unlock(&d->lock);
}

void cache_disk_get_stats(struct cache_disk *d, struct cache_disk_stats *out)
{
	pthread_mutex_lock(&d->lock);
	*out = d->st;
	out->queued = d->qlen + d->writing;
	out->full = d->full;
	pthread_mutex_unlock(&d->lock);
}
