/*
 * open_whole.c - opens that wait (no O_NONBLOCK): under cold_whole, a file
 * the disk tier does not hold whole is fetched whole before the open counts
 * on its inode (cache/whole.c), so that the open can switch to passthrough
 * (the kernel lets only an inode's only open switch); with cold_whole=model
 * its directory's other files of its kind follow in the background.
 *
 * Why a thread per waiting open: the fetch takes the file's size over the
 * network's speed, seconds for a shard of tens of GB. Run in the FUSE worker,
 * it held that worker all the while, and a loader opening max_threads shards
 * at once (vLLM's eight threads beside its eight prefetch threads) held them
 * all: every other request of the mount, a stat or a read of a warm file,
 * waited for a fetch. So an open that has to wait hands its request to a
 * thread of its own, which answers it once the file is whole; the worker goes
 * back to the queue. A file whole already, or cold_whole=off, is answered in
 * the worker as before.
 *
 * Either way the open then takes its inode's turn (fs_inode_open_begin(), so
 * that two opens of one file waiting together both switch) and is answered
 * by fs_open_reply() (ops.c). Anything that fails leaves the open as it was:
 * no whole fetch (the open reads through the cache), or no thread (the worker
 * waits, as it did).
 *
 * Stop: fs_open_drain() ends the whole fetches (the opens waiting for them
 * fall back and are answered) and waits for every opener thread before the
 * session goes. Lock: s->opens_lock (leaf) guards opens_waiting.
 */
#define _GNU_SOURCE
#include "fs_int.h"
#include "inode.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_ram.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct opener {
	struct fs_session *s;
	fuse_req_t req;
	fuse_ino_t ino;
	struct fuse_file_info fi; /* a copy: libfuse's is the worker's */
	struct fs_handle *h;
};

/* True if an open of @ino would wait for a whole fetch: cold_whole is on,
 * passthrough too, no open of the inode reads through the page cache (the
 * kernel would not switch this one: it would wait for nothing), and the cache
 * does not hold the file whole (as recorded: no request to the store). */
static bool wants_whole(struct fs_session *s, fuse_ino_t ino)
{
	struct cache_file *f;
	bool complete;

	if (strcmp(s->cfg.cold_whole, "off") == 0 || !atomic_load(&s->conn.pt_on) ||
	    fs_inode_cached_open(s, ino) || fs_inode_file(s, ino, &f) < 0)
		return false;
	complete = cache_file_complete(s->cache, f);
	cache_file_put(s->cache, f);
	return !complete;
}

/* Fetches @ino's file whole (cache_whole_fetch(): or its copy in memory) in
 * the version the open will confirm, which a listing's may not be (an http
 * listing's mtime against the HEAD's ETag); first its siblings are queued
 * (model). Returns the file, or NULL; put it with fetched(). */
static struct cache_file *fetch_whole(struct fs_session *s, fuse_ino_t ino)
{
	struct cache_file *f;

	if (fs_inode_file_now(s, ino, &f) < 0)
		return NULL;
	if (!cache_file_complete(s->cache, f)) {
		cache_whole_siblings(s->cache, f);
		if (cache_whole_fetch(s->cache, f) < 0)
			MCFS_DEBUG("%s: not fetched whole at its open: read through the cache",
				   cache_file_path(f));
	}
	return f;
}

/* After the open's answer: a copy in memory the open did not take goes. */
static void fetched(struct fs_session *s, struct cache_file *f)
{
	if (!f)
		return;
	cache_backing_mem_unused(s->cache, f);
	cache_file_put(s->cache, f);
}

/* The open's mode and answer, in its inode's turn. */
static void answer(struct fs_session *s, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		   struct fs_handle *h)
{
	fs_inode_open_begin(s, ino);
	fs_open_reply(s, req, ino, fi, h);
	fs_inode_open_end(s, ino);
}

static void *opener_thread(void *arg)
{
	struct opener *o = arg;
	struct fs_session *s = o->s;
	struct cache_file *f;

	pthread_setname_np(pthread_self(), "mcfs-open");
	f = fetch_whole(s, o->ino);
	answer(s, o->req, o->ino, &o->fi, o->h);
	fetched(s, f);
	free(o);
	pthread_mutex_lock(&s->opens_lock);
	if (--s->opens_waiting == 0)
		pthread_cond_broadcast(&s->opens_idle);
	pthread_mutex_unlock(&s->opens_lock);
	return NULL;
}

void fs_open_waiting(struct fs_session *s, fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi, struct fs_handle *h)
{
	struct opener *o = NULL;
	struct cache_file *f;
	pthread_attr_t at;
	pthread_t tid;
	bool started = false;

	if (!wants_whole(s, ino)) {
		answer(s, req, ino, fi, h);
		return;
	}
	pthread_mutex_lock(&s->opens_lock);
	if (!s->opens_closed && (o = calloc(1, sizeof(*o)))) {
		*o = (struct opener){s, req, ino, *fi, h};
		s->opens_waiting++;
	}
	pthread_mutex_unlock(&s->opens_lock);
	if (o && pthread_attr_init(&at) == 0) {
		(void)pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		started = pthread_create(&tid, &at, opener_thread, o) == 0;
		pthread_attr_destroy(&at);
	}
	if (started)
		return; /* answered by the opener */
	if (o) {
		free(o);
		pthread_mutex_lock(&s->opens_lock);
		if (--s->opens_waiting == 0)
			pthread_cond_broadcast(&s->opens_idle);
		pthread_mutex_unlock(&s->opens_lock);
	}
	f = fetch_whole(s, ino); /* no thread: this worker waits, as it did */
	answer(s, req, ino, fi, h);
	fetched(s, f);
}

void fs_open_drain(struct fs_session *s)
{
	bool waiting;

	pthread_mutex_lock(&s->opens_lock);
	s->opens_closed = true;
	waiting = s->opens_waiting > 0;
	pthread_mutex_unlock(&s->opens_lock);
	if (waiting && s->cache)
		cache_whole_stop(s->cache); /* their fetches end; they fall back and answer */
	pthread_mutex_lock(&s->opens_lock);
	/* Sleeps on s->opens_idle (s->opens_lock) until the last opener ends. */
	while (s->opens_waiting > 0)
		pthread_cond_wait(&s->opens_idle, &s->opens_lock);
	pthread_mutex_unlock(&s->opens_lock);
}
