/*
 * whole.c - whole files at a cold open (cold_whole): an open of a file the
 * disk tier does not hold whole first fetches it whole, so that the kernel
 * reads it from its own version file (passthrough) as fast as a local file;
 * with cold_whole=model the other files of its directory with its suffix (a
 * checkpoint's shards) follow in the background, in name order, so that a
 * loader opening them one after another finds each whole already. Eight
 * files at a time: the copies into one version file's pages take turns (the
 * file's lock), so one file at a time falls behind a reader, and several
 * fill side by side (docs/benchmarks.md, "Several files side by side").
 *
 * Why: an mmap reader of a FUSE file faults one read-around window at a
 * time, and even with every page already in the FUSE page cache it ran at
 * 0.68-0.87 of a local file (docs/architecture.md, "Cold opens"). Only a
 * file the kernel reads itself keeps up with a local one.
 *
 * A whole fetch is the usual machinery, driven to the end: warm-up fetches
 * (cache_warm) of every block the disk tier lacks, a window of them at a
 * time; the fetch threads put each block behind (write-behind); every few
 * blocks the file's owed blocks are queued with a wait, which paces the
 * fetches to the disk writers, so none is evicted before it is written.
 * Then cache_backing_get() finds the version whole. Nothing here holds a
 * block or writes a byte itself.
 *
 * Bounds: a file larger than half the disk tier is not fetched whole (its
 * open reads through the cache). The whole fetches running share the fetch
 * threads' warm-up window in the order they were asked for, the opens that
 * wait first (share()). The background queues a directory's files of one
 * suffix at most once per WHOLE_DIRS such queueings (so a server's open of
 * config.json queues the other .json files, and its first shard's open the
 * shards), a sibling only while what it queued fits in half the disk tier.
 *
 * Lock: w->lock (leaf) guards the queue, the directory ring and the
 * running fetches; never held across a call into the rest of the cache.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_metadata.h"
#include "cache_ram.h"
#include "disk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WHOLE_DIRS 16	/* directories (with a suffix) remembered as queued */
#define WHOLE_THREADS 8 /* files fetched whole in the background at once */
#define WHOLE_ROUNDS 3	/* passes over a file's missing blocks before giving up */
#define WHOLE_PACE 8	/* blocks between two waits for the disk writers */

struct whole_job {
	struct whole_job *next;
	char *path;
	struct cache_attr attr;
	bool disk; /* whole in the disk tier even if whole in RAM: a copy's file */
};

/* One whole fetch running, in w->running (share()): on its caller's stack. */
struct whole_run {
	struct whole_run *next;
	uint64_t seq; /* when it started, by w->seq */
	bool open;    /* for an open that waits: before every background fetch */
};

struct cache_whole {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was queued, or stopping */
	struct whole_job *head, *tail;
	char *dirs[WHOLE_DIRS]; /* ".SUFFIX DIR" queued lately (a ring) */
	unsigned ndir;
	struct whole_run *running; /* the whole fetches running (share()) */
	uint64_t seq;
	bool stopping;
	pthread_t threads[WHOLE_THREADS];
	unsigned started;
};

/* True if the disk tier holds block @i of @f whole. No lock held. */
static bool on_disk(struct cache *c, struct cache_file *f, uint64_t i)
{
	struct cache_meta_key key;

	cache_meta_block_key(f->path, f->version, i, &key);
	return cache_disk_held(c->disk, &key) == cache_file_block_len(c, f, i);
}

static bool stopping(struct cache *c)
{
	bool s;

	pthread_mutex_lock(&c->whole->lock);
	s = c->whole->stopping;
	pthread_mutex_unlock(&c->whole->lock);
	return s;
}

/* True if @f fits the bounds above. */
static bool fits(const struct cache *c, const struct cache_file *f)
{
	struct cache_disk_stats st;

	cache_disk_get_stats(c->disk, &st);
	return f->size > 0 && f->size <= st.bytes_limit / 2;
}

/*
 * The blocks whole fetch @me may have in flight beyond the one it awaits:
 * the fetch threads' warm-up window (2 x fetch threads) halved once for each
 * whole fetch ahead of it, at least 2. Ahead: an open that waits before any
 * background fetch, and within each, the one that started first. So files
 * come whole in the order they were asked for, and a reader starts on the
 * first while the next ones fill, where a fair share made them all whole
 * together at the end. Nothing is held back: one file alone gets the whole
 * window (a store 100 ms away needs it), and the window the first file cannot
 * use (its version file's writes take one lock, disk_writer.c; the pace waits
 * for them) is asked for by the files behind it, since the halves add up to
 * more than the window.
 */
static unsigned share(struct cache *c, const struct whole_run *me)
{
	const struct whole_run *r;
	unsigned ahead = 0;

	pthread_mutex_lock(&c->whole->lock);
	for (r = c->whole->running; r; r = r->next)
		if (r != me && (r->open > me->open || (r->open == me->open && r->seq < me->seq)))
			ahead++;
	pthread_mutex_unlock(&c->whole->lock);
	return MCFS_MAX(2u, (2 * c->nthreads) >> MCFS_MIN(ahead, 31u));
}

/*
 * One pass: warm-up fetches of every block of @f the disk tier lacks, at
 * most share(@me) in flight beyond the one awaited. Returns 0, or the
 * first fetch error (the blocks after it are not asked for).
 */
static int one_pass(struct cache *c, struct cache_file *f, const struct whole_run *me)
{
	uint64_t i, next = 0, t0, t1;
	unsigned window = 0; /* set at block 0 */
	int rc = 0;

	for (i = 0; i < f->nblocks && !stopping(c); i++) {
		if (i % WHOLE_PACE == 0)
			window = share(c, me); /* fetches start and end meanwhile */
		while (next < f->nblocks && next <= i + window) {
			if (on_disk(c, f, next)) {
				next++;
				continue;
			}
			rc = cache_warm(c, f, next);
			if (rc == -EAGAIN) { /* the warm-up window or the budget is full */
				pthread_mutex_lock(&c->lock);
				c->st.whole_refusals++;
				pthread_mutex_unlock(&c->lock);
				break;
			}
			if (rc < 0)
				return rc;
			next++;
		}
		t0 = mcfs_now_ns();
		(void)cache_block_settle(c, f, next <= i ? -1 : (int64_t)i);
		t1 = mcfs_now_ns();
		if (next > i && i % WHOLE_PACE == WHOLE_PACE - 1)
			cache_tier_pay_owed(c, f); /* waits for room at the disk writers */
		pthread_mutex_lock(&c->lock);
		c->st.whole_settle_ns += t1 - t0;
		c->st.whole_pay_ns += mcfs_now_ns() - t1;
		pthread_mutex_unlock(&c->lock);
		if (next <= i) /* block i was not asked for yet: that wait was for room */
			i--;
	}
	return 0;
}

/* Fetches @f whole into the disk tier, for an open that waits (@open) or in
 * the background; see cache_whole_fetch(). */
static int fetch_whole(struct cache *c, struct cache_file *f, bool open)
{
	struct cache_whole *w = c->whole;
	struct whole_run me = {.open = open}, **pp;
	unsigned round;
	uint64_t i;
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	if (c->nwhole++ == 0)
		c->whole_t0 = mcfs_now_ns();
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_lock(&w->lock);
	me.seq = w->seq++;
	me.next = w->running;
	w->running = &me;
	pthread_mutex_unlock(&w->lock);
	for (round = 0; round < WHOLE_ROUNDS && !stopping(c); round++) {
		rc = one_pass(c, f, &me);
		if (rc < 0)
			break;
		cache_tier_pay_owed(c, f);
		cache_disk_flush(c->disk);
		for (i = 0; i < f->nblocks && on_disk(c, f, i); i++)
			;
		rc = i == f->nblocks ? 0 : -ENOENT;
		if (rc == 0)
			break;
	}
	pthread_mutex_lock(&w->lock);
	for (pp = &w->running; *pp != &me; pp = &(*pp)->next)
		;
	*pp = me.next;
	pthread_mutex_unlock(&w->lock);
	pthread_mutex_lock(&c->lock);
	if (--c->nwhole == 0)
		c->st.whole_fill_ns += mcfs_now_ns() - c->whole_t0;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static void queue(struct cache_whole *w, const char *path, const struct cache_attr *a, bool disk);

/* True if the disk tier holds at least half of @f's blocks. No lock held. */
static bool half_on_disk(struct cache *c, struct cache_file *f)
{
	uint64_t i, n = 0;

	for (i = 0; i < f->nblocks && 2 * n < f->nblocks; i++)
		n += on_disk(c, f, i);
	return 2 * n >= f->nblocks;
}

/*
 * An open's copy in memory (whole_mem.c), its version file queued behind
 * the background's files: 0, or -errno (none made: the open waits for it).
 * Not for a file the disk tier holds half of already (the background filled
 * it, or an earlier read): its version file is nearer whole than a copy,
 * which would read those blocks back from the disk (docs/benchmarks.md,
 * "`whole_mem` with the half-on-disk fix").
 */
static int copy(struct cache *c, struct cache_file *f)
{
	struct cache_attr a = {.size = f->size, .mode = S_IFREG | 0444};
	int rc;

	if (!c->whole->started || !c->cfg->whole_mem) /* started: the background fills its file */
		return -ENOENT;
	if (half_on_disk(c, f))
		return -EEXIST;
	rc = cache_whole_mem(c, f);
	if (rc < 0)
		return rc;
	snprintf(a.version, sizeof(a.version), "%s", f->version);
	queue(c->whole, f->path, &a, true);
	return 0;
}

int cache_whole_fetch(struct cache *c, struct cache_file *f)
{
	int rc;

	if (!c->whole || !c->disk || !fits(c, f))
		return -ENOENT;
	rc = copy(c, f);
	pthread_mutex_lock(&c->lock);
	if (rc == 0)
		c->st.whole_mem_opens++;
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		return 0;
	rc = fetch_whole(c, f, true);
	pthread_mutex_lock(&c->lock);
	if (rc == 0)
		c->st.whole_opens++;
	else
		c->st.whole_fallbacks++;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0 && rc != -ENOENT)
		MCFS_WARN("%s: fetching it whole at its open: %s; reading it through the cache",
			  f->path, strerror(-rc));
	return rc < 0 ? -ENOENT : 0;
}

/* ---- the background: the other files of a directory ------------------------- */

/* Name order, for a checkpoint's shards. */
static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct cache_dirent *)a)->name,
		      ((const struct cache_dirent *)b)->name);
}

/* True (and remembered) if @key (".SUFFIX DIR": a directory's files of one
 * suffix) was not queued lately. Lock held. */
static bool dir_is_new(struct cache_whole *w, const char *key)
{
	unsigned i;
	char *copy;

	MCFS_ASSERT_HELD(&w->lock);
	for (i = 0; i < WHOLE_DIRS; i++)
		if (w->dirs[i] && strcmp(w->dirs[i], key) == 0)
			return false;
	copy = strdup(key);
	if (!copy)
		return false;
	free(w->dirs[w->ndir % WHOLE_DIRS]);
	w->dirs[w->ndir++ % WHOLE_DIRS] = copy;
	return true;
}

static void queue(struct cache_whole *w, const char *path, const struct cache_attr *a, bool disk)
{
	struct whole_job *j = calloc(1, sizeof(*j));

	if (!j || !(j->path = strdup(path))) {
		free(j);
		return; /* out of memory: that file is only not fetched ahead */
	}
	j->attr = *a;
	j->disk = disk;
	pthread_mutex_lock(&w->lock);
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
}

void cache_whole_siblings(struct cache *c, const struct cache_file *f)
{
	const char *slash = strrchr(f->path, '/'), *dot = strrchr(f->path, '.');
	struct cache_disk_stats st;
	struct cache_dirent *ents = NULL;
	uint64_t expires, room;
	char dir[4096], path[4096 + CACHE_NAME_MAX], seen[sizeof(path) + 2];
	size_t n = 0, i, dlen, slen;
	bool fresh;

	if (!c->whole || !c->disk || strcmp(c->cfg->cold_whole, "model") != 0)
		return;
	if (!dot || (slash && dot < slash))
		return; /* no suffix: nothing says which files belong together */
	dlen = slash ? (size_t)(slash - f->path) : 0;
	if (dlen >= sizeof(dir))
		return;
	memcpy(dir, f->path, dlen);
	dir[dlen] = '\0';
	pthread_mutex_lock(&c->whole->lock);
	snprintf(seen, sizeof(seen), "%s %s", dot, dir); /* config.json first, then a shard */
	fresh = !c->whole->stopping && dir_is_new(c->whole, seen);
	pthread_mutex_unlock(&c->whole->lock);
	if (!fresh || cache_list(c, dir, &ents, &n, &expires) < 0) /* "": the root */
		return;
	qsort(ents, n, sizeof(*ents), by_name);
	cache_disk_get_stats(c->disk, &st);
	room = st.bytes_limit / 2;
	slen = strlen(dot);
	for (i = 0; i < n; i++) {
		size_t nlen = strlen(ents[i].name);

		if (!S_ISREG(ents[i].attr.mode) || nlen <= slen ||
		    strcmp(ents[i].name + nlen - slen, dot) != 0)
			continue;
		snprintf(path, sizeof(path), "%s%s%s", dir, dlen ? "/" : "", ents[i].name);
		if (strcmp(path, f->path) == 0 || ents[i].attr.size > room)
			continue;
		room -= ents[i].attr.size;
		queue(c->whole, path, &ents[i].attr, false);
	}
	free(ents);
}

/* Makes one queued file whole, unless it already is. */
static void run_job(struct cache *c, struct whole_job *j)
{
	struct cache_attr a = j->attr;
	struct cache_file *f;
	uint64_t expires;

	/* The version its open will confirm (a listing's may differ: an http
	 * listing's mtime against the HEAD's ETag). */
	if (cache_open_confirms(c) && cache_confirm(c, j->path, &a, &expires) < 0)
		return;
	if (cache_file_get(c, j->path, &a, &f) < 0)
		return;
	if ((j->disk || !cache_file_complete(c, f)) && fits(c, f) &&
	    fetch_whole(c, f, false) == 0 && !j->disk) {
		pthread_mutex_lock(&c->lock);
		c->st.whole_background++;
		pthread_mutex_unlock(&c->lock);
	}
	if (j->disk) /* its copy in memory, unless an open still reads it */
		cache_backing_mem_unused(c, f);
	cache_file_put(c, f);
}

static void *whole_thread(void *arg)
{
	struct cache *c = arg;
	struct cache_whole *w = c->whole;
	struct whole_job *j;

	pthread_setname_np(pthread_self(), "mcfs-whole");
	pthread_mutex_lock(&w->lock);
	for (;;) {
		/* Sleeps on w->work (w->lock) until a job is queued, or stopping. */
		while (!w->stopping && !w->head)
			pthread_cond_wait(&w->work, &w->lock);
		if (w->stopping)
			break;
		j = w->head;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);
		run_job(c, j);
		free(j->path);
		free(j);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int cache_whole_open(struct cache *c)
{
	struct cache_whole *w;

	if (strcmp(c->cfg->cold_whole, "off") == 0)
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->work, NULL);
	c->whole = w;
	if (strcmp(c->cfg->cold_whole, "model") == 0) {
		while (w->started < WHOLE_THREADS &&
		       pthread_create(&w->threads[w->started], NULL, whole_thread, c) == 0)
			w->started++;
		if (!w->started)
			MCFS_WARN("cold_whole=model: no background thread; each file is fetched "
				  "whole at its own open");
	}
	return 0;
}

void cache_whole_stop(struct cache *c)
{
	struct cache_whole *w = c->whole;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);
	while (w->started)
		pthread_join(w->threads[--w->started], NULL);
}

void cache_whole_close(struct cache *c)
{
	struct cache_whole *w = c->whole;
	struct whole_job *j;
	unsigned i;

	if (!w)
		return;
	cache_whole_stop(c);
	while ((j = w->head)) {
		w->head = j->next;
		free(j->path);
		free(j);
	}
	for (i = 0; i < WHOLE_DIRS; i++)
		free(w->dirs[i]);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->work);
	free(w);
	c->whole = NULL;
}
