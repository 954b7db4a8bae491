/*
 * push.c - a cold file pushed into the kernel's page cache ahead of its
 * reader (cold_push).
 *
 * A reader through an mmap (safetensors' safe_open, so vLLM's and SGLang's
 * loaders) faults one read-around window at a time, and each fault waits for
 * its FUSE READs: a cold mount serves such a loop at a fraction of a local
 * file's speed (docs/benchmarks.md, "Mmap readers through FUSE"). So once an
 * open of a file the cache does not hold whole reads on past its first block
 * from the start (the stream has entered a second block; a reader of the header
 * or of one small tensor never gets there), the file's inode gets a push:
 * pusher threads take its blocks in order from where the reader is, wrapping
 * round to the blocks before it that no READ touched, fetch them through the
 * cache (a window of prefetches ahead, at the network's speed) and hand each to
 * the kernel with FUSE_NOTIFY_STORE, which copies it into the inode's page
 * cache. The reader's faults and reads then find their pages there, as on a
 * local file, and never wait for the daemon.
 *
 * One push per inode, whatever number of opens joined it; it lives while one
 * of them is open (fs_push_close() of the last waits for the pushes in
 * flight, so the inode's page cache never receives a version no open holds:
 * a new version's opens come after, on a new period or a new inode, see
 * inode_open.c). The blocks pushed stay in the RAM tier as any block read.
 *
 * What it costs: the whole file, fetched once and copied once into the page
 * cache, for a reader that reads on past its first block; nothing for one
 * that stops within it.
 */
#define _GNU_SOURCE
#include "push.h"

#include "fs_int.h"
#include "inode.h"
#include "mcfs.h"
#include "cache.h"
#include "cache_ram.h"
#include "cache_readahead.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fs_push {
	struct fs_push *next; /* s->push.list */
	fuse_ino_t ino;
	struct cache_file *f; /* a reference */
	uint64_t nblocks;
	uint64_t cursor;     /* where the next block is looked for */
	uint64_t left;	     /* blocks neither pushed nor touched by a READ */
	uint64_t ahead;	     /* first block not yet asked to be prefetched */
	unsigned char *done; /* per block: taken by a pusher or touched by a READ */
	unsigned handles;    /* opens that joined */
	unsigned busy;	     /* pushers working on one of its blocks */
	atomic_bool stopped; /* its last open closed, or the kernel forgot the inode */
	atomic_bool failed;  /* a block was not pushed (push_errors) */
	bool finished;	     /* no longer counted in push_active */
};

/* The push has nothing left to do: it leaves push_active. Lock held. */
static void note_finished(struct fs_session *s, struct fs_push *p)
{
	if (p->finished || p->busy > 0 || (p->left > 0 && !atomic_load(&p->stopped)))
		return;
	p->finished = true;
	atomic_fetch_sub_explicit(&s->push_active, 1, memory_order_relaxed);
}

/* Blocks prefetched ahead of the pushers: enough connections in flight. */
static uint64_t ahead_blocks(const struct fs_session *s)
{
	uint64_t bs = cache_block_size(s->cache), n = s->cfg.readahead_max / bs;

	return n ? n : 1;
}

/* The push of @ino, or NULL. Lock held. */
static struct fs_push *find(struct fs_pusher *pp, fuse_ino_t ino)
{
	struct fs_push *p;

	for (p = pp->list; p; p = p->next)
		if (p->ino == ino && !atomic_load(&p->stopped))
			return p;
	return NULL;
}

static void unlink_push(struct fs_pusher *pp, struct fs_push *p)
{
	struct fs_push **pp_next;

	for (pp_next = &pp->list; *pp_next; pp_next = &(*pp_next)->next)
		if (*pp_next == p) {
			*pp_next = p->next;
			return;
		}
}

/* The next block of @p to push (marked taken), or false. Lock held. */
static bool take(struct fs_push *p, uint64_t *k)
{
	uint64_t i;

	for (i = 0; p->left > 0 && i < p->nblocks; i++) {
		uint64_t b = (p->cursor + i) % p->nblocks;

		if (p->done[b])
			continue;
		p->done[b] = 1;
		p->left--;
		p->cursor = b + 1;
		*k = b;
		return true;
	}
	return false;
}

/* A push with blocks left, the longest-waiting first. Lock held. */
static struct fs_push *next_push(struct fs_pusher *pp)
{
	struct fs_push *p;

	for (p = pp->list; p; p = p->next)
		if (!atomic_load(&p->stopped) && p->left > 0)
			return p;
	return NULL;
}

/*
 * Asks the cache to fetch blocks [from, to) of @p's file (no lock held);
 * returns the first it did not ask for (the budget is spent: the next
 * pusher asks again from there).
 */
static uint64_t prefetch(struct fs_session *s, struct fs_push *p, uint64_t from, uint64_t to)
{
	for (; from < to && from < p->nblocks; from++)
		if (cache_prefetch(s->cache, p->f, from) == -EAGAIN)
			break;
	return from;
}

static void push_block(struct fs_session *s, struct fs_push *p, uint64_t k)
{
	uint64_t bs = cache_block_size(s->cache);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct cache_block *b;
	int rc;

	rc = cache_block_get(s->cache, p->f, k, &b);
	if (rc < 0) { /* logged by the cache; the reader's own READ will say it */
		atomic_fetch_add_explicit(&s->push_errors, 1, memory_order_relaxed);
		atomic_store(&p->failed, true);
		return;
	}
	bv.buf[0].mem = (void *)cache_block_data(b);
	bv.buf[0].size = cache_block_len(b);
	rc = atomic_load(&p->stopped) || !s->se
		 ? 0
		 : fuse_lowlevel_notify_store(s->se, p->ino, (off_t)(k * bs), &bv, 0);
	cache_block_put(s->cache, b);
	if (rc == 0) {
		atomic_fetch_add_explicit(&s->push_blocks, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->push_bytes, bv.buf[0].size, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&s->push_errors, 1, memory_order_relaxed);
	atomic_store(&p->failed, true);
	if (rc == -ENOENT) { /* the kernel has no such inode now: nothing to push to */
		pthread_mutex_lock(&s->push.lock);
		atomic_store(&p->stopped, true);
		pthread_mutex_unlock(&s->push.lock);
		return;
	}
	MCFS_DEBUG("push of %s block %llu to the page cache: %s", cache_file_path(p->f),
		   (unsigned long long)k, strerror(-rc));
}

static void *pusher(void *arg)
{
	struct fs_session *s = arg;
	struct fs_pusher *pp = &s->push;
	struct fs_push *p = NULL;
	uint64_t k = 0, from, to;

	pthread_setname_np(pthread_self(), "mcfs-push");
	pthread_mutex_lock(&pp->lock);
	for (;;) {
		/* Sleeps on pp->work (pp->lock) until a push has blocks left or the session stops.
		 */
		while (!pp->stopping && (p = next_push(pp)) == NULL)
			pthread_cond_wait(&pp->work, &pp->lock);
		if (pp->stopping)
			break;
		if (!take(p, &k))
			continue;
		p->busy++;
		/* The next pusher takes the next push's block: several files go together. */
		unlink_push(pp, p);
		p->next = NULL;
		{
			struct fs_push **tail = &pp->list;

			while (*tail)
				tail = &(*tail)->next;
			*tail = p;
		}
		from = MCFS_MAX(p->ahead, k);
		to = k + ahead_blocks(s);
		pthread_mutex_unlock(&pp->lock);

		if (to > from)
			from = prefetch(s, p, from, to);
		pthread_mutex_lock(&pp->lock);
		if (from > p->ahead)
			p->ahead = from;
		pthread_mutex_unlock(&pp->lock);
		push_block(s, p, k);

		pthread_mutex_lock(&pp->lock);
		if (--p->busy == 0)
			pthread_cond_broadcast(&pp->idle);
		note_finished(s, p);
	}
	pthread_mutex_unlock(&pp->lock);
	return NULL;
}

int fs_push_start(struct fs_session *s)
{
	struct fs_pusher *pp = &s->push;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned i;
	int rc;

	pthread_mutex_init(&pp->lock, NULL);
	pthread_cond_init(&pp->work, NULL);
	pthread_cond_init(&pp->idle, NULL);
	pp->on = s->cfg.cold_push;
	if (!pp->on)
		return 0;
	/* Each pusher copies a block into the page cache at a few GB/s: a
	 * quarter of the cores, 2 to 8 of them, keep ahead of one reader. */
	pp->n = s->cfg.push_threads ? s->cfg.push_threads
				    : (unsigned)MCFS_MIN(MCFS_MAX(ncpu / 4, 2), 8);
	pp->tids = calloc(pp->n, sizeof(*pp->tids));
	if (!pp->tids)
		return -ENOMEM;
	for (i = 0; i < pp->n; i++) {
		rc = -pthread_create(&pp->tids[i], NULL, pusher, s);
		if (rc < 0) {
			MCFS_ERR("cannot start the page-cache pushers: %s", strerror(-rc));
			pp->n = i;
			fs_push_stop(s);
			return rc;
		}
	}
	return 0;
}

void fs_push_stop(struct fs_session *s)
{
	struct fs_pusher *pp = &s->push;
	unsigned i;

	if (!pp->tids)
		return;
	pthread_mutex_lock(&pp->lock);
	pp->stopping = true;
	pthread_cond_broadcast(&pp->work);
	pthread_mutex_unlock(&pp->lock);
	for (i = 0; i < pp->n; i++)
		pthread_join(pp->tids[i], NULL);
	free(pp->tids);
	pp->tids = NULL;
	/* The pushes left belong to handles still open: fs_push_close() frees them. */
}

/* Another reference to @f's identity (path and version). */
static int file_ref(struct fs_session *s, struct cache_file *f, struct cache_file **out)
{
	struct cache_attr attr = {.size = cache_file_size(f)};

	snprintf(attr.version, sizeof(attr.version), "%s", cache_file_version(f));
	return cache_file_get(s->cache, cache_file_path(f), &attr, out);
}

void fs_push_read(struct fs_session *s, struct fs_handle *h, uint64_t off, size_t len)
{
	struct fs_pusher *pp = &s->push;
	uint64_t bs = cache_block_size(s->cache), first, last, i;
	struct fs_push *p;

	if (!h->push_ok || len == 0)
		return;
	first = off / bs;
	last = (off + len - 1) / bs;
	pthread_mutex_lock(&pp->lock);
	p = h->push ? h->push : find(pp, h->ino);
	if (!h->push && !p && cache_stream_window(h->stream) >= 2 && !pp->stopping) {
		/* The reader is past its first block: push the rest of the file. */
		p = calloc(1, sizeof(*p));
		if (p)
			p->nblocks = (cache_file_size(h->file) + bs - 1) / bs;
		if (p && (p->done = calloc(p->nblocks ? p->nblocks : 1, 1)) != NULL &&
		    file_ref(s, h->file, &p->f) == 0) {
			p->ino = h->ino;
			p->left = p->nblocks;
			p->cursor = last + 1 < p->nblocks ? last + 1 : 0;
			p->ahead = p->cursor;
			p->next = pp->list;
			pp->list = p;
			atomic_fetch_add_explicit(&s->push_files, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&s->push_active, 1, memory_order_relaxed);
		} else if (p) {
			free(p->done);
			free(p);
			p = NULL;
		}
	}
	if (p && !h->push) { /* this open holds it until its release */
		h->push = p;
		p->handles++;
	}
	/* Blocks a READ touched are in the page cache as far as it read them:
	 * not pushed again (the reader READs the rest of such a block itself). */
	for (i = first; p && i <= last && i < p->nblocks; i++) {
		if (!p->done[i]) {
			p->done[i] = 1;
			p->left--;
		}
	}
	if (p && p->left > 0)
		pthread_cond_broadcast(&pp->work);
	if (p)
		note_finished(s, p); /* this READ may have touched the last blocks */
	pthread_mutex_unlock(&pp->lock);
}

void fs_push_close(struct fs_session *s, struct fs_handle *h)
{
	struct fs_pusher *pp = &s->push;
	struct fs_push *p = h->push;
	bool whole;

	if (!p)
		return;
	h->push = NULL;
	pthread_mutex_lock(&pp->lock);
	if (--p->handles > 0) {
		pthread_mutex_unlock(&pp->lock);
		return;
	}
	atomic_store(&p->stopped, true);
	/* Sleeps on pp->idle (pp->lock) until no pusher is inside a block of it:
	 * after this release the inode may take another version's pages. */
	while (p->busy > 0)
		pthread_cond_wait(&pp->idle, &pp->lock);
	note_finished(s, p);
	unlink_push(pp, p);
	whole = p->left == 0 && !atomic_load(&p->failed);
	pthread_mutex_unlock(&pp->lock);
	/* Every block is in the inode's page cache, pushed or READ: its next
	 * opens keep those pages (inode.h: fs_inode_pages_whole()). */
	if (whole)
		fs_inode_pages_whole(s, p->ino, cache_file_version(p->f));
	cache_file_put(s->cache, p->f);
	free(p->done);
	free(p);
}
