/*
 * cache.c - creating and freeing the cache (it opens and closes the store
 * too: nothing outside cache/ holds one), and the table of file identities.
 *
 * A file identity is (path, version): the same pair always maps to the same
 * struct cache_file while anything refers to it, so blocks cached under one
 * open are found by the next, and a new version of a file gets a new identity
 * whose blocks start empty. An identity lives while it has a reference: open
 * files, readahead streams, GPU loads, and each RAM slot that holds one of its
 * blocks (blocks.c). The last one frees it, so a daemon that sees a million
 * names over its life keeps only those in use (file_identities). The disk
 * tier and the backing files key their blocks by path and version, not by
 * identity: a later identity of the same pair finds them again.
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache.h"
#include "cache_disk.h"
#include "cache_ram.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t pow2_at_least(size_t n)
{
	size_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static unsigned log2u(uint64_t v)
{
	unsigned s = 0;

	while ((1ull << s) < v)
		s++;
	return s;
}

static int init_tables(struct cache *c)
{
	size_t i;

	c->nbuckets = pow2_at_least(c->nslots * 2);
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	c->nfbuckets = 1024;
	c->fbuckets = calloc(c->nfbuckets, sizeof(*c->fbuckets));
	c->slots = calloc(c->nslots, sizeof(*c->slots));
	c->page_words = (size_t)((c->bs >> CACHE_PAGE_SHIFT) + 63) / 64;
	c->page_bits = calloc(c->nslots * c->page_words, sizeof(uint64_t));
	if (!c->buckets || !c->fbuckets || !c->slots || !c->page_bits)
		return -ENOMEM;
	cache_lists_init(c);
	cache_budget_init(&c->budget, c->nslots);
	for (i = 0; i < c->nslots; i++) {
		c->slots[i].data = c->region + i * c->bs;
		c->slots[i].pages = c->page_bits + i * c->page_words;
		c->slots[i].state = SLOT_FREE;
		cache_list_push_back(&c->free, &c->slots[i]);
	}
	return 0;
}

static int start_threads(struct cache *c)
{
	unsigned i;
	int rc;

	c->threads = calloc(c->cfg->connections, sizeof(*c->threads));
	if (!c->threads)
		return -ENOMEM;
	for (i = 0; i < c->cfg->connections; i++) {
		rc = pthread_create(&c->threads[i], NULL, cache_fetch_thread, c);
		if (rc)
			return -rc;
		c->nthreads++;
	}
	return 0;
}

int cache_new(const struct cfg *cfg, struct cache **out)
{
	struct remote *remote;
	struct cache *c;
	int rc;

	/* The store first: a source that does not answer fails the mount before
	 * any memory is reserved, with the store's own message. */
	rc = remote_open(cfg, &remote);
	if (rc < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c) {
		remote_close(remote);
		return -ENOMEM;
	}
	c->cfg = cfg;
	c->remote = remote;
	c->bs = cfg->block_size;
	c->bs_shift = log2u(c->bs);
	c->nslots = (size_t)(cfg->ram_cache / c->bs);
	c->prefetch_budget = cfg->prefetch_mem ? cfg->prefetch_mem : cfg->ram_cache / 2;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->loaded, NULL);
	pthread_cond_init(&c->freed, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->gpu_turn, NULL);
	c->lockfd = -1;
	rc = cache_ram_alloc(c); /* ram.c; placed and faulted in by cache_ram_place() */
	if (rc == 0)
		rc = init_tables(c);
	if (rc == 0)
		cache_tiers_open(c); /* cache_dir: disk tier and metadata, or RAM only */
	if (rc == 0) {
		/* shared_cache: refused credentials or no bucket fail the mount (logged) */
		rc = cache_tier_shared_open(c);
		if (rc < 0) {
			cache_free(c);
			return rc;
		}
	}
	if (rc == 0)
		rc = start_threads(c);
	if (rc < 0) {
		MCFS_ERR("cannot set up the block cache (%zu slots of %llu bytes): %s", c->nslots,
			 (unsigned long long)c->bs, strerror(-rc));
		cache_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void cache_stop_waits(struct cache *c)
{
	if (c)
		cache_tier_shared_stop(c);
}

void cache_free(struct cache *c)
{
	struct cache_file *f, *next;
	unsigned i;
	size_t j;

	if (!c)
		return;
	cache_ram_stop(c);	   /* the prefault threads */
	cache_whole_stop(c);	   /* the background whole fetches, which wait on fetch threads */
	cache_tier_shared_stop(c); /* a fetch thread waiting on another node's block */
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->lock);
	for (i = 0; i < c->nthreads; i++)
		pthread_join(c->threads[i], NULL);
	free(c->threads);
	cache_tiers_close(c); /* writes what is queued; drops the writer's block refs */
	pthread_mutex_lock(&c->lock);
	/* Every writer's reference goes back through cache_block_put_behind():
	 * one that did not would have held readahead back for the mount's life. */
	if (c->budget.held[CACHE_CLAIM_BEHIND])
		MCFS_ERR("RAM tier: %u write-behind claims were never given back (a writer "
			 "dropped its block without cache_block_put_behind)",
			 c->budget.held[CACHE_CLAIM_BEHIND]);
	for (j = 0; c->slots && j < c->nslots; j++) /* readahead nobody read */
		if (c->slots[j].tally)
			cache_ra_tally_unref(c, c->slots[j].tally);
	pthread_mutex_unlock(&c->lock);
	for (j = 0; c->fbuckets && j < c->nfbuckets; j++) {
		for (f = c->fbuckets[j]; f; f = next) {
			next = f->hnext;
			free(f->path);
			free(f);
		}
	}
	free(c->fbuckets);
	free(c->buckets);
	free(c->slots);
	free(c->page_bits);
	if (c->region)
		munmap(c->region, c->region_len);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->loaded);
	pthread_cond_destroy(&c->freed);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->gpu_turn);
	remote_close(c->remote); /* no fetch thread is left to use it */
	free(c);
}

static size_t fbucket(const struct cache *c, const char *path, const char *version)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	const char *s;

	for (s = path; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (s = version; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (size_t)(h & (c->nfbuckets - 1));
}

int cache_file_get(struct cache *c, const char *path, const struct cache_attr *attr,
		   struct cache_file **out)
{
	size_t i = fbucket(c, path, attr->version);
	struct cache_file *f;

	pthread_mutex_lock(&c->lock);
	for (f = c->fbuckets[i]; f; f = f->hnext)
		if (strcmp(f->path, path) == 0 && strcmp(f->version, attr->version) == 0)
			break;
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (f)
			f->path = strdup(path);
		if (!f || !f->path) {
			pthread_mutex_unlock(&c->lock);
			free(f);
			return -ENOMEM;
		}
		f->id = ++c->next_file_id;
		c->nfiles++;
		f->size = attr->size;
		f->nblocks = (attr->size + c->bs - 1) >> c->bs_shift;
		snprintf(f->version, sizeof(f->version), "%s", attr->version);
		f->hnext = c->fbuckets[i];
		c->fbuckets[i] = f;
	}
	f->refs++;
	pthread_mutex_unlock(&c->lock);
	*out = f;
	return 0;
}

void cache_file_unref(struct cache *c, struct cache_file *f)
{
	struct cache_file **pp;

	MCFS_ASSERT_HELD(&c->lock);
	if (--f->refs > 0)
		return;
	pp = &c->fbuckets[fbucket(c, f->path, f->version)];
	while (*pp != f)
		pp = &(*pp)->hnext;
	*pp = f->hnext;
	c->nfiles--;
	free(f->path);
	free(f);
}

void cache_file_put(struct cache *c, struct cache_file *f)
{
	MCFS_ASSERT_NOT_HELD(&c->lock);
	pthread_mutex_lock(&c->lock);
	cache_file_unref(c, f);
	pthread_mutex_unlock(&c->lock);
}

const char *cache_file_path(const struct cache_file *f)
{
	return f->path;
}

uint64_t cache_file_size(const struct cache_file *f)
{
	return f->size;
}

const char *cache_file_version(const struct cache_file *f)
{
	return f->version;
}
