/*
 * meta.c - LMDB behind the interface of meta.h.
 *
 * Design: one environment, six named databases (meta.h lists them). Values
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
 * Room (meta.h says what is kept): every write transaction goes through
 * write_txn(), which sees before its commit whether the generation it wrote
 * has outgrown its share of the map and, if so, drops the other one in the
 * same transaction (rotate()). A generation is dropped whole with mdb_drop(),
 * which gives all its pages back to LMDB's free list at once: deleting the
 * oldest records one by one would leave most pages in use, because records
 * are sorted by path and their ages are spread over every page. The map
 * itself never shrinks or grows after open (mdb_env_set_mapsize() needs
 * every transaction of the process ended), so LMDB reuses those freed pages
 * and the file stays within the map.
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

/* Bump when a stored struct changes: an old environment is then wiped. The
 * second generation (attrs.1, lists.1) needed no bump: an environment without
 * it starts in generation 0, whose databases have the old names. */
#define META_FORMAT 1
/* attrs and lists of both generations, blocks, info */
#define META_MAXDBS 6
/* FUSE workers + fetch threads + the disk writer, with room to spare. */
#define META_MAXREADERS 1024
#define META_KEY_MAX 500 /* below LMDB's default 511 */
/* Free bytes under which an LMDB I/O error is blamed on a full filesystem: a
 * commit writes a few pages, a large listing a few MiB. */
#define META_LOW_SPACE (16ull << 20)

struct cache_meta {
	MDB_env *env;
	/* fixed after open; [g] is generation g's (info "gen" says which one is written) */
	MDB_dbi attrs[2], lists[2], blocks, info;
	uint64_t map_pages; /* the map asked for at open, in pages: fixed after open */
	unsigned psize;	    /* LMDB's page size, bytes */
	char dir[4096];
	atomic_bool warned;	     /* a metadata write failed and was logged */
	atomic_uint_fast64_t prunes; /* generations dropped (cache_meta_usage()) */
};

static const char *const attrs_name[2] = {"attrs", "attrs.1"};
static const char *const lists_name[2] = {"lists", "lists.1"};

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
	int rc, g;

	rc = mdb_txn_begin(m->env, NULL, 0, &txn);
	if (rc)
		return err(rc);
	for (g = 0; g < 2 && !rc; g++) {
		rc = mdb_dbi_open(txn, attrs_name[g], MDB_CREATE, &m->attrs[g]);
		if (!rc)
			rc = mdb_dbi_open(txn, lists_name[g], MDB_CREATE, &m->lists[g]);
	}
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

static int try_open(struct cache_meta *m, uint64_t map_size)
{
	MDB_envinfo info;
	MDB_stat st;
	int rc, dead = 0;

	rc = mdb_env_create(&m->env);
	if (rc)
		return err(rc);
	mdb_env_set_maxdbs(m->env, META_MAXDBS);
	mdb_env_set_mapsize(m->env, map_size);
	mdb_env_set_maxreaders(m->env, META_MAXREADERS);
	rc = mdb_env_open(m->env, m->dir, MDB_NOSYNC, 0600);
	if (rc == 0) {
		mdb_reader_check(m->env, &dead); /* slots of a killed daemon */
		rc = open_dbs(m);
		if (rc == 0) {
			/* LMDB maps a larger file whole (a smaller map_size than last
			 * time); records are kept within the size asked for all the same. */
			mdb_env_info(m->env, &info);
			mdb_env_stat(m->env, &st);
			m->psize = st.ms_psize;
			m->map_pages = MCFS_MIN(map_size, (uint64_t)info.me_mapsize) / st.ms_psize;
			return 0;
		}
		mdb_env_close(m->env);
		m->env = NULL;
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

int cache_meta_open(const char *dir, uint64_t map_size, struct cache_meta **out)
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
	rc = try_open(m, map_size);
	if (rc == -EUCLEAN) {
		/* A cache: rebuild rather than ask anyone to repair it. */
		MCFS_WARN(
		    "cache metadata %s is unreadable or of another format: starting it afresh",
		    dir);
		wipe(dir);
		rc = try_open(m, map_size);
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
			 "the metadata map is full (%s of its %s used; meta_map_size sets it)", a,
			 mcfs_fmt_bytes(map, b, sizeof(b)));
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

/* ---- generations and room ------------------------------------------------- */

/* The generation written now, as @txn sees it (info "gen"; none: 0). */
static unsigned cur_gen(const struct cache_meta *m, MDB_txn *txn)
{
	MDB_val k = {.mv_size = 3, .mv_data = "gen"}, v;
	uint64_t g = 0;

	if (mdb_get(txn, m->info, &k, &v) == 0 && v.mv_size == sizeof(g))
		memcpy(&g, v.mv_data, sizeof(g));
	return (unsigned)(g & 1);
}

/* Pages database @dbi uses in @txn (0 if LMDB cannot say). */
static uint64_t pages_of(MDB_txn *txn, MDB_dbi dbi)
{
	MDB_stat st;

	if (mdb_stat(txn, dbi, &st) != 0)
		return 0;
	return st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
}

/* Pages generation @g's attributes and listings use in @txn. */
static uint64_t gen_pages(const struct cache_meta *m, MDB_txn *txn, unsigned g)
{
	return pages_of(txn, m->attrs[g]) + pages_of(txn, m->lists[g]);
}

/*
 * True if generation @g has its share of the map: half the map holds the
 * records (the other half is room for LMDB's copy-on-write and free list), the
 * block index and info take theirs first, and each generation gets half of
 * what is left. So the records never use more than half the map, and a
 * rotation frees at least a quarter of it whenever the index is small.
 */
static bool gen_full(const struct cache_meta *m, MDB_txn *txn, unsigned g)
{
	uint64_t fixed = pages_of(txn, m->blocks) + pages_of(txn, m->info);
	uint64_t budget = m->map_pages / 2 > fixed ? m->map_pages / 2 - fixed : 0;

	return gen_pages(m, txn, g) >= MCFS_MAX(budget / 2, 2);
}

/* Drops the generation not written now and writes into it from now on. LMDB code. */
static int rotate(struct cache_meta *m, MDB_txn *txn)
{
	MDB_val k = {.mv_size = 3, .mv_data = "gen"}, v;
	uint64_t next = cur_gen(m, txn) ^ 1;
	int rc;

	rc = mdb_drop(txn, m->attrs[next], 0);
	if (!rc)
		rc = mdb_drop(txn, m->lists[next], 0);
	v.mv_size = sizeof(next);
	v.mv_data = &next;
	if (!rc)
		rc = mdb_put(txn, m->info, &k, &v, 0);
	return rc;
}

/* The body of a write transaction: its puts and deletes. Returns an LMDB code. */
typedef int (*write_fn)(struct cache_meta *m, MDB_txn *txn, void *arg);

/* A transaction that only rotates (write_txn()'s way out of a full map). */
static int rotate_only(struct cache_meta *m, MDB_txn *txn, void *arg)
{
	(void)arg;
	return rotate(m, txn);
}

/*
 * Runs @fn in a write transaction and commits it, first rotating the
 * generations if the one written is full (gen_full()). A map found full all the
 * same (MDB_MAP_FULL: one listing larger than the room left, or LMDB's free
 * pages still held by a reader) drops the older generation and tries again,
 * then the other one: a write fails with -ENOSPC only if it does not fit a map
 * holding no attributes and listings at all. Returns 0 or a negative errno.
 */
static int write_txn(struct cache_meta *m, write_fn fn, void *arg)
{
	MDB_txn *txn;
	bool rotated;
	int rc, tries;

	for (tries = 0;; tries++) {
		rc = mdb_txn_begin(m->env, NULL, 0, &txn);
		if (rc)
			return err(rc);
		rc = fn(m, txn, arg);
		rotated = false;
		if (rc == 0 && fn != rotate_only && gen_full(m, txn, cur_gen(m, txn))) {
			rc = rotate(m, txn);
			rotated = rc == 0;
		}
		if (rc == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
		if (rc == 0 && (rotated || fn == rotate_only))
			atomic_fetch_add_explicit(&m->prunes, 1, memory_order_relaxed);
		if (rc != MDB_MAP_FULL || fn == rotate_only || tries == 2)
			return err(rc);
		MCFS_DEBUG("cache metadata %s: the map is full: dropping the older recorded "
			   "attributes and listings",
			   m->dir);
		if (write_txn(m, rotate_only, NULL) < 0)
			return err(rc);
	}
}

void cache_meta_usage(struct cache_meta *m, uint64_t *map_bytes, uint64_t *used_bytes,
		      uint64_t *prunes)
{
	const MDB_dbi dbis[] = {m->attrs[0], m->attrs[1], m->lists[0],
				m->lists[1], m->blocks,	  m->info};
	uint64_t pages = 0;
	MDB_txn *txn;
	size_t i;

	if (mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn) == 0) {
		for (i = 0; i < MCFS_ARRAY_SIZE(dbis); i++)
			pages += pages_of(txn, dbis[i]);
		mdb_txn_abort(txn);
	}
	*map_bytes = m->map_pages * m->psize;
	*used_bytes = pages * m->psize;
	*prunes = atomic_load_explicit(&m->prunes, memory_order_relaxed);
}

/* ---- small helpers -------------------------------------------------------- */

/*
 * In @txn: the value of @k in @dbi[], the pair of one kind's generations: the
 * one written now if it has @k (the last write went there), else the other.
 * Borrowed: valid until the transaction ends. An LMDB code.
 */
static int get_gen(const struct cache_meta *m, MDB_txn *txn, const MDB_dbi dbi[2], MDB_val *k,
		   MDB_val *v)
{
	unsigned g = cur_gen(m, txn);
	int rc;

	rc = mdb_get(txn, dbi[g], k, v);
	if (rc == MDB_NOTFOUND)
		rc = mdb_get(txn, dbi[g ^ 1], k, v);
	return rc;
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

/* One put into a database (@gen: the generation written now of attrs), or a delete. */
struct put_args {
	MDB_val k, v;
	const MDB_dbi *gen; /* m->attrs: put into the one written now, delete from both */
	MDB_dbi dbi;	    /* else this one */
	bool del;
};

static int put_one(struct cache_meta *m, MDB_txn *txn, void *arg)
{
	struct put_args *a = arg;
	int rc, g;

	if (!a->del)
		return mdb_put(txn, a->gen ? a->gen[cur_gen(m, txn)] : a->dbi, &a->k, &a->v, 0);
	for (g = 0, rc = 0; g < 2 && rc == 0; g++) {
		rc = mdb_del(txn, a->gen[g], &a->k, NULL);
		if (rc == MDB_NOTFOUND)
			rc = 0;
	}
	return rc;
}

int cache_meta_put_attr(struct cache_meta *m, const char *path, const struct cache_attr *a,
			int64_t fetched)
{
	char kb[META_KEY_MAX + 1];
	struct attr_rec r;
	struct put_args p = {.k = path_key(path, kb), .gen = m->attrs};

	memset(&r, 0, sizeof(r));
	r.fetched = fetched;
	r.exists = a != NULL;
	if (a)
		r.a = *a;
	p.v.mv_size = sizeof(r);
	p.v.mv_data = &r;
	return noted(m, write_txn(m, put_one, &p), path);
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
	rc = get_gen(m, txn, m->attrs, &k, &v);
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
	struct put_args p = {.k = path_key(path, kb), .gen = m->attrs, .del = true};

	return noted(m, write_txn(m, put_one, &p), path);
}

/* A listing to record (cache_meta_put_list()'s arguments). */
struct list_args {
	const char *dir;
	const struct cache_dirent *ents;
	size_t n;
	int64_t fetched;
};

/* Puts each entry's attributes into generation @g, under @dir's transaction. */
static int put_children(struct cache_meta *m, MDB_txn *txn, unsigned g, const struct list_args *l)
{
	char path[4096], kb[META_KEY_MAX + 1];
	struct attr_rec r;
	MDB_val k, v = {.mv_size = sizeof(r), .mv_data = &r};
	size_t i;
	int rc;

	memset(&r, 0, sizeof(r));
	r.fetched = l->fetched;
	r.exists = 1;
	for (i = 0; i < l->n; i++) {
		if (snprintf(path, sizeof(path), "%s%s%s", l->dir, l->dir[0] ? "/" : "",
			     l->ents[i].name) >= (int)sizeof(path))
			continue;
		r.a = l->ents[i].attr;
		k = path_key(path, kb);
		rc = mdb_put(txn, m->attrs[g], &k, &v, 0);
		if (rc)
			return rc;
	}
	return 0;
}

static int put_list(struct cache_meta *m, MDB_txn *txn, void *arg)
{
	const struct list_args *l = arg;
	struct list_hdr h = {.fetched = l->fetched, .n = l->n};
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(l->dir, kb), v;
	unsigned g = cur_gen(m, txn);
	int rc;

	/* MDB_RESERVE: LMDB gives the space, we copy once into it. */
	v.mv_size = sizeof(h) + l->n * sizeof(*l->ents);
	rc = mdb_put(txn, m->lists[g], &k, &v, MDB_RESERVE);
	if (rc)
		return rc;
	memcpy(v.mv_data, &h, sizeof(h));
	if (l->n)
		memcpy((char *)v.mv_data + sizeof(h), l->ents, l->n * sizeof(*l->ents));
	return put_children(m, txn, g, l);
}

int cache_meta_put_list(struct cache_meta *m, const char *dir, const struct cache_dirent *ents,
			size_t n, int64_t fetched)
{
	struct list_args l = {.dir = dir, .ents = ents, .n = n, .fetched = fetched};

	return noted(m, write_txn(m, put_list, &l), dir);
}

int cache_meta_get_list(struct cache_meta *m, const char *dir, struct cache_dirent **ents,
			size_t *n, int64_t *fetched)
{
	char kb[META_KEY_MAX + 1];
	MDB_val k = path_key(dir, kb), v;
	struct list_hdr h;
	MDB_txn *txn;
	void *data = NULL;
	size_t len = 0;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return err(rc);
	rc = get_gen(m, txn, m->lists, &k, &v);
	if (rc == 0) {
		len = v.mv_size;
		data = malloc(len ? len : 1);
		if (data)
			memcpy(data, v.mv_data, len);
		else
			rc = ENOMEM;
	}
	mdb_txn_abort(txn);
	if (rc)
		return err(rc);
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

/* A block index update (cache_meta_blocks_update()'s arguments). */
struct blocks_args {
	const struct cache_meta_key *dels, *keys;
	const struct cache_meta_block *vals;
	size_t ndel, nput;
};

static int update_blocks(struct cache_meta *m, MDB_txn *txn, void *arg)
{
	const struct blocks_args *b = arg;
	MDB_val k, v;
	size_t i;
	int rc = 0;

	for (i = 0; i < b->ndel && rc == 0; i++) {
		k.mv_size = sizeof(b->dels[i]);
		k.mv_data = (void *)&b->dels[i];
		rc = mdb_del(txn, m->blocks, &k, NULL);
		if (rc == MDB_NOTFOUND)
			rc = 0;
	}
	for (i = 0; i < b->nput && rc == 0; i++) {
		k.mv_size = sizeof(b->keys[i]);
		k.mv_data = (void *)&b->keys[i];
		v.mv_size = sizeof(b->vals[i]);
		v.mv_data = (void *)&b->vals[i];
		rc = mdb_put(txn, m->blocks, &k, &v, 0);
	}
	return rc;
}

int cache_meta_blocks_update(struct cache_meta *m, const struct cache_meta_key *dels, size_t ndel,
			     const struct cache_meta_key *keys, const struct cache_meta_block *vals,
			     size_t nput)
{
	struct blocks_args b = {
	    .dels = dels, .keys = keys, .vals = vals, .ndel = ndel, .nput = nput};

	return write_txn(m, update_blocks, &b);
}

static int clear_blocks(struct cache_meta *m, MDB_txn *txn, void *arg)
{
	(void)arg;
	return mdb_drop(txn, m->blocks, 0);
}

int cache_meta_blocks_clear(struct cache_meta *m)
{
	return write_txn(m, clear_blocks, NULL);
}

int cache_meta_get_u64(struct cache_meta *m, const char *name, uint64_t *out)
{
	MDB_val k = {.mv_size = strlen(name), .mv_data = (void *)name}, v;
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return err(rc);
	rc = mdb_get(txn, m->info, &k, &v);
	if (rc == 0 && v.mv_size != sizeof(*out))
		rc = MDB_CORRUPTED;
	if (rc == 0)
		memcpy(out, v.mv_data, sizeof(*out));
	mdb_txn_abort(txn);
	return err(rc);
}

int cache_meta_put_u64(struct cache_meta *m, const char *name, uint64_t val)
{
	struct put_args p = {.dbi = m->info};

	p.k.mv_size = strlen(name);
	p.k.mv_data = (void *)name;
	p.v.mv_size = sizeof(val);
	p.v.mv_data = &val;
	return write_txn(m, put_one, &p);
}
