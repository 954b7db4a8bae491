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
#include <xxhash.h>

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
	f->verified = false; /* a block comes or changes: check them all again */
	return 0;
}

bool cache_disk_file_put(struct cache_disk *d, const struct cache_meta_key *k)
{
	struct dfile *f = cache_disk_file(d, k), **pp;

	if (!f)
		return false;
	/* verified stays: a block leaving makes the version not whole (no pin
	 * gets it), and the block that comes back resets it (file_get). */
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

	MCFS_ASSERT_HELD(&d->lock);
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
	int rc;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->nslots; i++) {
		struct dslot *s = &d->slots[i];

		if (s->state != DS_VALID || s->readers || !cache_meta_key_has_path(&s->key, path) ||
		    (keep && memcmp(s->key.b, keep->b, CACHE_DISK_FILE_ID) == 0))
			continue;
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
	 * pinned one goes at its last unpin: backing.c). */
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
			   uint64_t size, bool drop)
{
	uint64_t n = (size + d->bs - 1) / d->bs, j;
	struct cache_meta_key *keys = calloc(n ? n : 1, sizeof(*keys));
	uint32_t *idx = calloc(n ? n : 1, sizeof(*idx)), i, dead = 0;
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

/* ---- open / close ------------------------------------------------------------ */

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
	if (!d->slots || !d->buckets || !d->free_stack || !d->q)
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
	pthread_cond_init(&d->wb_done, NULL);
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
	pthread_cond_destroy(&d->wb_done);
	free(d);
}
