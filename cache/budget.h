/*
 * budget.h - one budget for the RAM tier's slots, shared by everything that
 * holds them. Private to cache/ (cache_int.h includes it).
 *
 * The claimants, and what holds a slot for each (a slot with a reference
 * can't be evicted):
 *   readers      a FUSE read, a backing-file build: one block at a time,
 *                for the length of a copy;
 *   GPU loads    up to a window of blocks each, while their DMA runs;
 *   background   readahead, a GPU load's lead and warm-up (a fetch job in
 *                flight: CACHE_CLAIM_PREFETCH), and write-behind to the disk
 *                and shared tiers (CACHE_CLAIM_BEHIND, until written).
 *
 * The rules, which together mean no mix of claimants can deadlock or starve
 * a reader:
 *   1. Background claims end by themselves: a fetch job ends when the store
 *      (or a tier) answers, a write when the writer gets to it. None waits
 *      for a reader or a GPU load.
 *   2. A new prefetch is admitted only while prefetch and write-behind hold
 *      fewer than bg_cap slots (half of them), and never while a reader
 *      waits for a slot: a freed slot goes to the reader. Write-behind is
 *      never refused: the writers' own queues bound it, a quarter of the
 *      slots each (a full disk queue leaves the block owed in the RAM
 *      tier, holding nothing, tiers.c; the shared writer's pushes back on
 *      the fetch threads); it counts against prefetch.
 *   3. GPU loads hold at most gpu_cap window slots together (a quarter): a
 *      load asks for a window and waits its turn, first come first served,
 *      instead of failing, and gives the window back when it ends. A load
 *      waiting for a block holds at most its window, and every other slot
 *      is a reader's (released after a copy), background (rule 1) or free,
 *      so every load gets its blocks; loads beyond the cap wait for a
 *      window, not for slots held by other waiting loads.
 * A reader waiting for a slot thus waits only for claims that end by
 * themselves, and holds up new background claims meanwhile.
 *
 * Lock: every field and function here is guarded by cache->lock (the
 * callers hold it); nothing here sleeps. Can't fail, unless said.
 */
#ifndef MCFS_CACHE_BUDGET_H
#define MCFS_CACHE_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cache_claim {
	CACHE_CLAIM_PREFETCH, /* a background fetch job: readahead, a load's lead, warm-up */
	CACHE_CLAIM_BEHIND,   /* a reference held by a disk or shared-tier writer */
	CACHE_CLAIM_N,
};

/* A GPU load waiting for its window; lives on the waiter's stack. */
struct cache_gpu_wait {
	struct cache_gpu_wait *next; /* the queue, oldest first */
	unsigned want;		     /* window asked for, >= 1 */
	unsigned granted;	     /* 0 while waiting; then the window given */
};

struct cache_budget {
	unsigned slots;			  /* of the RAM tier */
	unsigned bg_cap;		  /* prefetch admitted while background holds fewer */
	unsigned held[CACHE_CLAIM_N];	  /* slots held per background class */
	unsigned readers_waiting;	  /* readers asleep on cache->freed */
	unsigned gpu_cap;		  /* window slots GPU loads hold together, at most */
	unsigned gpu_held;		  /* window slots granted now */
	struct cache_gpu_wait *gpu_queue; /* loads waiting for a window, oldest first */
	uint64_t refusals;		  /* prefetches refused by rule 2 */
	uint64_t gpu_waits;		  /* loads that waited for their window */
};

/* Sets the caps for a tier of @slots slots, with nothing held. */
void cache_budget_init(struct cache_budget *b, size_t slots);

/*
 * Takes a slot for class @k: CACHE_CLAIM_BEHIND always; CACHE_CLAIM_PREFETCH
 * only while no reader waits and background holds fewer than bg_cap (false,
 * counted in refusals, otherwise: the caller answers -EAGAIN).
 */
bool cache_budget_take(struct cache_budget *b, enum cache_claim k);

/* Gives back a slot taken for class @k. */
void cache_budget_put(struct cache_budget *b, enum cache_claim k);

/*
 * Queues @w (want set, next and granted are written here) and grants
 * windows from the head of the queue while they fit. Returns true when @w
 * got its window now (w->granted, <= gpu_cap); else it waits in the queue
 * until cache_budget_gpu_grant() grants it, or it is cancelled.
 */
bool cache_budget_gpu_enqueue(struct cache_budget *b, struct cache_gpu_wait *w);

/* Grants windows from the head of the queue while they fit (after a put or
 * a cancel). Returns true if it granted any: the caller wakes the waiters. */
bool cache_budget_gpu_grant(struct cache_budget *b);

/* Takes @w out of the queue (an interrupted load); a window it was granted
 * meanwhile is given back. */
void cache_budget_gpu_cancel(struct cache_budget *b, struct cache_gpu_wait *w);

/* Gives back a window of @n slots. */
void cache_budget_gpu_put(struct cache_budget *b, unsigned n);

#endif
