/*
 * meta.c - LMDB behind the interface of meta.h.
 *
 * Design: one environment, four named databases (meta.h lists them). Values
 * are fixed C structs copied in and out (the file is private to this build of
 * mcfs; "format" in info is bumped when a layout changes, and a mismatch
 * wipes the environment). Long paths (over LMDB's 511-byte key limit) are
 * keyed by "#" + their XXH3-128 in hex: a collision would need 2^64 paths.
 *
 * Why NOSYNC: see meta.h. Why the default thread-local reader slots (no
 * MDB_NOTLS): a stat that misses the in-memory table does one read
 * transaction, and a thread reusing its slot makes that about a microsecond.
 * Stale reader slots of a killed daemon are cleared at open (mdb_reader_check).
 *
 * LMDB codes become negative errnos in err(), nowhere else.
 */
#define _GNU_SOURCE
#include "meta.h"

#include <errno.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* Bump when a stored struct changes: an old environment is then wiped. */
#define META_FORMAT 1
/* Address space reserved for the map; the file grows only as pages are used. */
#define META_MAPSIZE (8ull << 30)
/* FUSE workers + fetch threads + the disk writer, with room to spare. */
#define META_MAXREADERS 1024
#define META_KEY_MAX 500 /* below LMDB's default 511 */
/* Free bytes under which an LMDB I/O error is blamed on a full filesystem: a
 * commit writes a few pages, a large listing a few MiB. */
#define META_LOW_SPACE (16ull << 20)

struct cache_meta {
	MDB_env *env;
	MDB_dbi attrs, lists, blocks, info; /* fixed after open */
	char dir[4096];
	atomic_bool warned; /* a metadata write failed and was logged */
};

/* Stored value of attrs. */
struct attr_rec {
	int64_t fetched;
	uint32_t exists;
	uint32_t pad;
	struct cache_attr a;
};

/* Stored value of lists: this header, then n entries. */
struct list_hdr {
	int64_t fetched;
	uint64_t n;
};

static int err(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
		return -ENOSPC;
	case MDB_CORRUPTED:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_PAGE_NOTFOUND:
		return -EUCLEAN;
	case MDB_READERS_FULL:
		return -EAGAIN;
	default:
		return rc > 0 ? -rc : -EIO;
	}
}

int64_t cache_meta_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The LMDB key of a path; buf holds META_KEY_MAX + 1 bytes. */
static MDB_val path_key(const char *path, char *buf)
{
	size_t n = strlen(path);
	MDB_val k;

	if (n + 1 <= META_KEY_MAX) {
		/* "/" + path: never empty (the root is "") */
		buf[0] = '/';
		memcpy(buf + 1, path, n);
		k.mv_size = n + 1;
	} else {
		XXH128_hash_t h = XXH3_128bits(path, n);

		k.mv_size =
		    (size_t)snprintf(buf, META_KEY_MAX + 1, "#%016llx%016llx",
				     (unsigned long long)h.high64, (unsigned long long)h.low64);
	}
	k.mv_data = buf;
	return k;
}

/* ---- open / close -------------------------------------------------------- */

static int open_dbs(struct cache_meta *m)
{
	MDB_txn *txn;
	MDB_val k, v;
	uint64_t fmt = META_FORMAT;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	rc = mdb_dbi_open(txn, "attrs", MDB_CREATE, &m->attrs);
	if (!rc)
		rc = mdb_dbi_open(txn, "lists", MDB_CREATE, &m->lists);
	if (!rc)
		rc = mdb_dbi_open(txn, "blocks", MDB_CREATE, &m->blocks);
	if (!rc)
		rc = mdb_dbi_open(txn, "info", MDB_CREATE, &m->info);
	if (!rc) {
		k.mv_data = "format";
		k.mv_size = strlen("format");
		rc = mdb_get(txn, m->info, &k, &v);
		if (rc == MDB_NOTFOUND) {
			v.mv_data = &fmt;
			v.mv_size = sizeof(fmt);
			rc = mdb_put(txn, m->info, &k, &v, 0);
		} else if (rc == 0 && (v.mv_size != sizeof(fmt) || memcmp(v.mv_data, &fmt, 8))) {
			rc = MDB_VERSION_MISMATCH;
		}
	}
	if (rc) {
		mdb_txn_abort(txn);
		return err(rc);
	}
	return err(mdb_txn_commit(txn));
}

static int try_open(struct cache_meta *m)
{
	int rc, dead = 0;

	rc = mdb_env_create(&m->env);
	if (rc)
		return err(rc);
	mdb_env_set_maxdbs(m->env, 4);
	mdb_env_set_mapsize(m->env, META_MAPSIZE);
	mdb_env_set_maxreaders(m->env, META_MAXREADERS);
	rc = mdb_env_open(m->env, m->dir, MDB_NOSYNC, 0600);
	if (rc == 0) {
		mdb_reader_check(m->env, &dead); /* slots of a killed daemon */
		rc = open_dbs(m);
		if (rc < 0) {
			mdb_env_close(m->env);
			m->env = NULL;
		}
		return rc;
	}
	mdb_env_close(m->env);
	m->env = NULL;
	return err(rc);
}

static void wipe(const char *dir)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/lock.mdb", dir);
	unlink(p);
}

int cache_meta_open(const char *dir, struct cache_meta **out)
{
	struct cache_meta *m = calloc(1, sizeof(*m));
	int rc;

	if (!m)
		return -ENOMEM;
	snprintf(m->dir, sizeof(m->dir), "%s", dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		MCFS_ERR("cache metadata %s: %s", dir, strerror(-rc));
		free(m);
		return rc;
	}
	rc = try_open(m);
	if (rc == -EUCLEAN) {
		/* A cache: rebuild rather than ask anyone to repair it. */
		MCFS_WARN(
		    "cache metadata %s is unreadable or of another format: starting it afresh",
		    dir);
		wipe(dir);
		rc = try_open(m);
	}
	if (rc < 0) {
		MCFS_ERR("cache metadata %s: cannot open the LMDB environment: %s", dir,
			 strerror(-rc));
		free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void cache_meta_close(struct cache_meta *m)
{
	if (!m)
		return;
	mdb_env_sync(m->env, 1);
	mdb_env_close(m->env);
	free(m);
}

int cache_meta_sync(struct cache_meta *m)
{
	return err(mdb_env_sync(m->env, 1));
}

const char *cache_meta_strerror(struct cache_meta *m, int rc, char *buf, size_t len)
{
	uint64_t map, used, avail;
	char a[32], b[32], c[32];
	struct statvfs sv;
	MDB_envinfo ei;
	MDB_stat st;

	if ((rc != -ENOSPC && rc != -EIO) || mdb_env_info(m->env, &ei) ||
	    mdb_env_stat(m->env, &st) || statvfs(m->dir, &sv) < 0) {
		snprintf(buf, len, "%s", strerror(-rc));
		return buf;
	}
	map = ei.me_mapsize;
	used = MCFS_MIN(((uint64_t)ei.me_last_pgno + 1) * st.ms_psize, map);
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	mcfs_fmt_bytes(used, a, sizeof(a));
	mcfs_fmt_bytes(avail, c, sizeof(c));
	/* MDB_MAP_FULL and a full filesystem are both -ENOSPC: blame the tighter */
	if (rc == -ENOSPC && map - used < avail)
		snprintf(buf, len,
			 "the metadata map is full (%s of its %s used; the size is META_MAPSIZE, "
			 "fixed in this build)",
			 a, mcfs_fmt_bytes(map, b, sizeof(b)));
	else if (rc == -ENOSPC)
		snprintf(buf, len,
			 "no space left on the cache filesystem (%s free at %s; the metadata "
			 "uses %s)",
			 c, m->dir, a);
	/* LMDB's own errors (a commit cut by a full disk leaves MDB_PANIC) read as EIO */
	else if (avail < META_LOW_SPACE)
		snprintf(buf, len, "%s (LMDB; the cache filesystem is full: %s free at %s)",
			 strerror(-rc), c, m->dir);
	else
		snprintf(buf, len, "%s (LMDB)", strerror(-rc));
	return buf;
}

/* ---- small helpers -------------------------------------------------------- */

static int put1(struct cache_meta *m, MDB_dbi dbi, MDB_val *k, MDB_val *v)
{
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	rc = mdb_put(txn, dbi, k, v, 0);
	if (rc) {
		mdb_txn_abort(txn);
		return err(rc);
	}
	return err(mdb_txn_commit(txn));
}

/* Copies the value of @k into a new buffer (caller frees). */
static int get1(struct cache_meta *m, MDB_dbi dbi, MDB_val *k, void **data, size_t *len)
{
	MDB_txn *txn;
	MDB_val v;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return err(rc);
	rc = mdb_get(txn, dbi, k, &v);
	if (rc == 0) {
		*data = malloc(v.mv_size ? v.mv_size : 1);
		if (*data) {
			memcpy(*data, v.mv_data, v.mv_size);
			*len = v.mv_size;
		} else {
			rc = ENOMEM;
		}
	}
	mdb_txn_abort(txn);
	return err(rc);
}

/* ---- attributes and listings ----------------------------------------------- */

/* Logs the first failed metadata write (callers ignore them: the store's
 * answer is served anyway); returns @rc. */
static int noted(struct cache_meta *m, int rc, const char *path)
{
	char why[256];

	if (rc < 0 && !atomic_exchange(&m->warned, true))
		MCFS_WARN("cache metadata %s: recording '%s' failed: %s (further failures "
			  "are not logged)",
			  m->dir, path, cache_meta_strerror(m, rc, why, sizeof(why)));
	return rc;
}

int cache_meta_put_attr(struct cache_meta *m, const char *path, const struct cache_attr *a,
			int64_t fetched)
{
	char kb[META_KEY_MAX + 1];
	struct attr_rec r;
	MDB_val k = path_key(path, kb), v = {.mv_size = sizeof(r), .mv_data = &r};

	memset(&r, 0, sizeof(r));
	r.fetched = fetched;
	r.exists = a != NULL;
	if (a)
		r.a = *a;
	return noted(m, put1(m, m->attrs, &k, &v), path);
}

int cache_meta_get_attr(struct cache_meta *m, const char *path, struct cache_attr *a, bool *exists,
			int64_t *fetched)
{
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(path, kb), v;
	struct attr_rec r;
	MDB_txn *txn;
	int rc;

	/* Hot after a restart (one per first stat of a path): no malloc. */
	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return err(rc);
	rc = mdb_get(txn, m->attrs, &k, &v);
	if (rc == 0 && v.mv_size != sizeof(r))
		rc = MDB_CORRUPTED;
	if (rc == 0)
		memcpy(&r, v.mv_data, sizeof(r));
	mdb_txn_abort(txn);
	if (rc)
		return err(rc);
	*a = r.a;
	*exists = r.exists != 0;
	*fetched = r.fetched;
	return 0;
}

int cache_meta_del_attr(struct cache_meta *m, const char *path)
{
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(path, kb);
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	rc = mdb_del(txn, m->attrs, &k, NULL);
	if (rc && rc != MDB_NOTFOUND) {
		mdb_txn_abort(txn);
		return noted(m, err(rc), path);
	}
	return noted(m, err(mdb_txn_commit(txn)), path);
}

/* Puts each entry's attributes, under @dir's transaction. */
static int put_children(struct cache_meta *m, MDB_txn *txn, const char *dir,
			const struct cache_dirent *ents, size_t n, int64_t fetched)
{
	char path[4096], kb[META_KEY_MAX + 1];
	struct attr_rec r;
	MDB_val k, v = {.mv_size = sizeof(r), .mv_data = &r};
	size_t i;
	int rc;

	memset(&r, 0, sizeof(r));
	r.fetched = fetched;
	r.exists = 1;
	for (i = 0; i < n; i++) {
		if (snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "", ents[i].name) >=
		    (int)sizeof(path))
			continue;
		r.a = ents[i].attr;
		k = path_key(path, kb);
		rc = mdb_put(txn, m->attrs, &k, &v, 0);
		if (rc)
			return rc;
	}
	return 0;
}

int cache_meta_put_list(struct cache_meta *m, const char *dir, const struct cache_dirent *ents,
			size_t n, int64_t fetched)
{
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(dir, kb), v;
	struct list_hdr h = {.fetched = fetched, .n = n};
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	/* MDB_RESERVE: LMDB gives the space, we copy once into it. */
	v.mv_size = sizeof(h) + n * sizeof(*ents);
	rc = mdb_put(txn, m->lists, &k, &v, MDB_RESERVE);
	if (rc == 0) {
		memcpy(v.mv_data, &h, sizeof(h));
		if (n)
			memcpy((char *)v.mv_data + sizeof(h), ents, n * sizeof(*ents));
		rc = put_children(m, txn, dir, ents, n, fetched);
	}
	if (rc) {
		mdb_txn_abort(txn);
		return noted(m, err(rc), dir);
	}
	return noted(m, err(mdb_txn_commit(txn)), dir);
}

int cache_meta_get_list(struct cache_meta *m, const char *dir, struct cache_dirent **ents,
			size_t *n, int64_t *fetched)
{
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(dir, kb);
	struct list_hdr h;
	void *data;
	size_t len;
	int rc;

	rc = get1(m, m->lists, &k, &data, &len);
	if (rc < 0)
		return rc;
	memcpy(&h, data, MCFS_MIN(len, sizeof(h)));
	if (len < sizeof(h) || len != sizeof(h) + h.n * sizeof(**ents)) {
		free(data);
		return -EUCLEAN;
	}
	/* Hands the entries over in place: move them to the buffer's start. */
	memmove(data, (char *)data + sizeof(h), len - sizeof(h));
	*ents = data;
	*n = h.n;
	*fetched = h.fetched;
	return 0;
}

/* ---- block index -------------------------------------------------------------- */

static void put_be64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static void path_hash(const char *path, unsigned char out[16])
{
	XXH128_hash_t h = XXH3_128bits(path, strlen(path));

	put_be64(out, h.high64);
	put_be64(out + 8, h.low64);
}

void cache_meta_block_key(const char *path, const char *version, uint64_t index,
			  struct cache_meta_key *k)
{
	path_hash(path, k->b);
	put_be64(k->b + 16, XXH3_64bits(version, strlen(version)));
	put_be64(k->b + 24, index);
}

bool cache_meta_key_has_path(const struct cache_meta_key *k, const char *path)
{
	unsigned char h[16];

	path_hash(path, h);
	return memcmp(k->b, h, sizeof(h)) == 0;
}

int cache_meta_blocks_scan(struct cache_meta *m,
			   int (*fn)(void *arg, const struct cache_meta_key *k,
				     const struct cache_meta_block *v),
			   void *arg)
{
	struct cache_meta_block blk;
	struct cache_meta_key key;
	MDB_cursor *cur;
	MDB_txn *txn;
	MDB_val k, v;
	int rc, ret = 0;

	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return err(rc);
	rc = mdb_cursor_open(txn, m->blocks, &cur);
	if (rc) {
		mdb_txn_abort(txn);
		return err(rc);
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && ret == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != sizeof(key) || v.mv_size != sizeof(blk))
			continue; /* not ours: skipped, and dropped by LRU never */
		memcpy(&key, k.mv_data, sizeof(key));
		memcpy(&blk, v.mv_data, sizeof(blk));
		ret = fn(arg, &key, &blk);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (ret)
		return ret;
	return rc == MDB_NOTFOUND ? 0 : err(rc);
}

int cache_meta_blocks_update(struct cache_meta *m, const struct cache_meta_key *dels, size_t ndel,
			     const struct cache_meta_key *keys, const struct cache_meta_block *vals,
			     size_t nput)
{
	MDB_txn *txn;
	MDB_val k, v;
	size_t i;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	for (i = 0; i < ndel && rc == 0; i++) {
		k.mv_size = sizeof(dels[i]);
		k.mv_data = (void *)&dels[i];
		rc = mdb_del(txn, m->blocks, &k, NULL);
		if (rc == MDB_NOTFOUND)
			rc = 0;
	}
	for (i = 0; i < nput && rc == 0; i++) {
		k.mv_size = sizeof(keys[i]);
		k.mv_data = (void *)&keys[i];
		v.mv_size = sizeof(vals[i]);
		v.mv_data = (void *)&vals[i];
		rc = mdb_put(txn, m->blocks, &k, &v, 0);
	}
	if (rc) {
		mdb_txn_abort(txn);
		return err(rc);
	}
	return err(mdb_txn_commit(txn));
}

int cache_meta_blocks_clear(struct cache_meta *m)
{
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	rc = mdb_drop(txn, m->blocks, 0);
	if (rc) {
		mdb_txn_abort(txn);
		return err(rc);
	}
	return err(mdb_txn_commit(txn));
}

int cache_meta_get_u64(struct cache_meta *m, const char *name, uint64_t *out)
{
	MDB_val k = {.mv_size = strlen(name), .mv_data = (void *)name};
	void *data;
	size_t len;
	int rc;

	rc = get1(m, m->info, &k, &data, &len);
	if (rc < 0)
		return rc;
	if (len == sizeof(*out))
		memcpy(out, data, sizeof(*out));
	else
		rc = -EUCLEAN;
	free(data);
	return rc;
}

int cache_meta_put_u64(struct cache_meta *m, const char *name, uint64_t val)
{
	MDB_val k = {.mv_size = strlen(name), .mv_data = (void *)name};
	MDB_val v = {.mv_size = sizeof(val), .mv_data = &val};

	return put1(m, m->info, &k, &v);
}
