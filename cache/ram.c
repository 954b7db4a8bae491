/*
 * ram.c - the RAM tier's memory: the region its slots live in, where that
 * memory is placed on a host of several NUMA nodes, and ram_prefault.
 *
 * The region is one anonymous mapping (blocks.c cuts it into slots), on a
 * 2 MiB boundary so that huge pages fill it whole. Nothing touches it until
 * cache_ram_place(), which gpu_new() calls once it knows the NUMA node of
 * each GPU and before it pins the region (pinning faults pages in): the plan
 * (common/mcfs_numa.h) gives each range of the region a preferred node
 * (mbind MPOL_PREFERRED: a full node spills to another instead of failing),
 * and one prefault thread per node ("mcfs-prefaultN") faults that node's
 * ranges in from that node's CPUs, so the kernel zeroes local memory, all
 * nodes at once. On a one-node host there is no placement and one thread
 * ("mcfs-prefault") does it all, as before.
 *
 * mbind() through the raw system call: libnuma is not a dependency of mcfs,
 * and the one call needs none of it. A kernel without NUMA answers ENOSYS,
 * a seccomp profile EPERM: the tier then runs unplaced (logged once).
 */
#define _GNU_SOURCE
#include "cache_int.h"
#include "cache_ram.h"
#include "cache_stats.h"
#include "mcfs_numa.h"

#include <errno.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HUGE_PAGE (2ull << 20)

int cache_ram_alloc(struct cache *c)
{
	size_t len = c->nslots * c->bs;
	uintptr_t start, aligned;
	char *p;

	/* NORESERVE: pages are touched on first use (or by the prefault), so a
	 * large ram_cache costs nothing until then. One huge page more than
	 * needed, trimmed, puts the region on a huge-page boundary: every NUMA
	 * range bound then falls between huge pages. */
	p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	start = (uintptr_t)p;
	aligned = (start + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	if (aligned > start)
		munmap(p, aligned - start);
	munmap((char *)aligned + len, start + HUGE_PAGE - aligned);
	c->region = (char *)aligned;
	c->region_len = len;
	/* Huge pages: fewer TLB misses and page faults when filling 8 MiB slots. */
	madvise(c->region, c->region_len, MADV_HUGEPAGE);
	return 0;
}

/* ---- ram_prefault --------------------------------------------------------- */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif
#define PREFAULT_CHUNK (2ull << 20)	   /* one huge page per madvise() */
#define PREFAULT_CHECK_EVERY (64ull << 20) /* bytes between looks at MemAvailable */
#define PREFAULT_KEEP_FREE (512ull << 20)  /* stop before MemAvailable drops below this */

/* The placement and its prefault threads; freed by cache_ram_stop(). */
struct cache_ram_numa {
	struct mcfs_numa_plan plan;
	unsigned nthreads; /* started: written by cache_ram_place()'s thread only */
	pthread_t *threads;
	atomic_uint live;	 /* threads still faulting */
	unsigned long long t0;	 /* mcfs_now_ns() at start */
	atomic_bool low, unsupp; /* a thread stopped on low memory / on EINVAL */
};

struct worker_arg {
	struct cache *c;
	const struct mcfs_numa_worker *w;
};

/* MemAvailable in bytes, or UINT64_MAX when /proc/meminfo can't say. */
static uint64_t mem_available(void)
{
	unsigned long long kb = 0;
	char line[128];
	FILE *fp = fopen("/proc/meminfo", "re");
	bool found = false;

	if (!fp)
		return UINT64_MAX;
	while (!found && fgets(line, sizeof(line), fp))
		found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
	fclose(fp);
	return found ? (uint64_t)kb * 1024 : UINT64_MAX;
}

/* Runs the calling thread on the CPUs of @cpus that it may use; else where it is. */
static void run_on(const char *cpus)
{
	cpu_set_t want, allowed;
	int i;

	if (!cpus[0] || mcfs_numa_cpus_parse(cpus, &want) <= 0 ||
	    sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return;
	CPU_AND(&want, &want, &allowed); /* a cpuset cgroup may allow fewer */
	for (i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &want))
			break;
	if (i < CPU_SETSIZE)
		(void)pthread_setaffinity_np(pthread_self(), sizeof(want), &want);
}

/*
 * Faults [off, off + len) of the region in. 0, or 1 when it stopped early
 * (cache_free(), low memory, or MADV_POPULATE_WRITE unsupported: logged once
 * across the threads).
 */
static int fault_range(struct cache *c, uint64_t off, uint64_t len, uint64_t *done)
{
	struct cache_ram_numa *n = c->numa;
	uint64_t end = off + len, step;
	char b[32];

	for (; off < end && !atomic_load(&c->prefault_stop); off += step) {
		step = MCFS_MIN(PREFAULT_CHUNK, end - off);
		if (*done % PREFAULT_CHECK_EVERY == 0 &&
		    mem_available() < PREFAULT_KEEP_FREE + PREFAULT_CHECK_EVERY) {
			if (!atomic_exchange(&n->low, true))
				MCFS_INFO(
				    "RAM tier: stopped faulting memory in after %s: the node "
				    "has little memory left; the rest faults in on first use",
				    mcfs_fmt_bytes(atomic_load(&c->prefault_bytes), b, sizeof(b)));
			return 1;
		}
		if (madvise(c->region + off, step, MADV_POPULATE_WRITE) < 0) {
			if (!atomic_exchange(&n->unsupp, true))
				MCFS_INFO("RAM tier: memory faults in on first use "
					  "(MADV_POPULATE_WRITE: %s)",
					  strerror(errno));
			return 1;
		}
		*done += step;
		atomic_fetch_add_explicit(&c->prefault_bytes, step, memory_order_relaxed);
	}
	return off < end;
}

/* The last thread to end says how it went. */
static void prefault_end(struct cache *c)
{
	struct cache_ram_numa *n = c->numa;
	uint64_t bytes;
	char b[32];

	if (atomic_fetch_sub(&n->live, 1) != 1)
		return;
	/* after every other thread's last add: they came before their own sub */
	bytes = atomic_load(&c->prefault_bytes);
	atomic_store(&c->prefault_state, atomic_load(&n->unsupp)  ? CACHE_PREFAULT_OFF
					 : bytes >= c->region_len ? CACHE_PREFAULT_DONE
								  : CACHE_PREFAULT_STOPPED);
	if (bytes >= c->region_len) /* nworkers: fixed before the threads start */
		MCFS_INFO("RAM tier: %s faulted in in %.2f s by %u thread(s)",
			  mcfs_fmt_bytes(c->region_len, b, sizeof(b)),
			  (mcfs_now_ns() - n->t0) / 1e9, n->plan.nworkers);
}

/*
 * Faults the RAM tier's memory in: this worker's node's ranges. The kernel
 * zeroes every page on first touch (and may compact memory for a huge
 * page); inside a cold read that costs up to a third of the daemon's CPU
 * time on a small node, and makes its speed depend on how fragmented memory
 * happens to be. Done here, it is the same work, earlier, and on the CPUs
 * next to the memory. MADV_POPULATE_WRITE leaves contents alone, so slots
 * already in use are safe.
 *
 * One huge page per call, at normal priority: the call holds mmap_lock for
 * reading, and any mmap() in another thread (malloc) waits for it - and every
 * page fault queues behind that waiting writer. With 64 MiB calls, or at
 * nice 19 (preempted while holding the lock), the whole mount stalled for
 * seconds. Stops early at cache_free(), and before the node runs short of
 * memory.
 */
static void *prefault_thread(void *arg)
{
	struct worker_arg *a = arg;
	struct cache *c = a->c;
	const struct mcfs_numa_worker *w = a->w;
	const struct mcfs_numa_plan *p = &c->numa->plan;
	uint64_t done = 0;
	char name[32]; /* 16 with the NUL at most: node ids are below 64 */
	unsigned i;

	free(a);
	if (w->node >= 0)
		snprintf(name, sizeof(name), "mcfs-prefault%d", w->node);
	else
		snprintf(name, sizeof(name), "mcfs-prefault");
	pthread_setname_np(pthread_self(), name);
	run_on(w->cpus);
	for (i = 0; i < p->nranges; i++)
		if (p->ranges[i].node == w->node &&
		    fault_range(c, p->ranges[i].off, p->ranges[i].len, &done))
			break;
	prefault_end(c);
	return NULL;
}

/* ram_prefault: one thread per worker of the plan. */
static void start_prefault(struct cache *c)
{
	struct cache_ram_numa *n = c->numa;
	struct worker_arg *a;
	uint64_t avail = mem_available();
	char b[32], b2[32];
	unsigned i;
	int rc = 0;

	if (avail != UINT64_MAX && c->region_len > avail)
		MCFS_WARN("ram_cache %s is more than the memory available now (%s): the node "
			  "may run out of memory as the tier fills",
			  mcfs_fmt_bytes(c->region_len, b, sizeof(b)),
			  mcfs_fmt_bytes(avail, b2, sizeof(b2)));
	if (!c->cfg->ram_prefault)
		return;
	n->threads = calloc(n->plan.nworkers, sizeof(*n->threads));
	if (!n->threads)
		rc = ENOMEM;
	n->t0 = mcfs_now_ns();
	atomic_store(&n->live, n->plan.nworkers);
	atomic_store(&c->prefault_state, CACHE_PREFAULT_RUNNING);
	for (i = 0; rc == 0 && i < n->plan.nworkers; i++) {
		a = malloc(sizeof(*a));
		if (!a) {
			rc = ENOMEM;
			break;
		}
		*a = (struct worker_arg){.c = c, .w = &n->plan.workers[i]};
		rc = pthread_create(&n->threads[i], NULL, prefault_thread, a);
		if (rc)
			free(a);
		else
			n->nthreads++;
	}
	if (rc) {
		MCFS_WARN("RAM tier: cannot start faulting memory in: %s", strerror(rc));
		atomic_store(&c->prefault_stop, true); /* those started stop at once */
		/* the workers never started count as ended */
		for (; i < n->plan.nworkers; i++)
			if (atomic_fetch_sub(&n->live, 1) == 1)
				atomic_store(&c->prefault_state, CACHE_PREFAULT_OFF);
	}
}

/* ---- NUMA placement ------------------------------------------------------ */

/* Prefers @node for [p, p + len). 0 or -errno. */
static int prefer(void *p, uint64_t len, int node)
{
	unsigned long mask[MCFS_NUMA_MAX_NODES / (8 * sizeof(unsigned long))] = {0};

	mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
	/* maxnode: the kernel reads maxnode - 1 bits */
	if (syscall(SYS_mbind, p, len, MPOL_PREFERRED, mask, MCFS_NUMA_MAX_NODES + 1, 0) < 0)
		return -errno;
	return 0;
}

/* Applies the plan's ranges; on a refusal, none (logged). */
static void apply(struct cache *c, struct mcfs_numa_plan *p)
{
	unsigned i;
	int rc = 0;

	for (i = 0; rc == 0 && i < p->nranges; i++)
		if (p->ranges[i].node >= 0)
			rc = prefer(c->region + p->ranges[i].off, p->ranges[i].len,
				    p->ranges[i].node);
	if (rc == 0)
		return;
	MCFS_WARN("RAM tier: cannot place its memory on NUMA nodes (mbind: %s); it goes where "
		  "it is first touched",
		  strerror(-rc));
	(void)syscall(SYS_mbind, c->region, c->region_len, MPOL_DEFAULT, NULL, 0, 0);
	free(p->ranges);
	free(p->workers);
	p->nranges = p->nworkers = 1;
	p->ranges = calloc(1, sizeof(*p->ranges));
	p->workers = calloc(1, sizeof(*p->workers));
	p->mode = MCFS_NUMA_NONE;
	p->nnodes = 0;
	if (p->ranges && p->workers) {
		p->ranges[0] = (struct mcfs_numa_range){.off = 0, .len = c->region_len, .node = -1};
		p->workers[0] = (struct mcfs_numa_worker){.node = -1, .bytes = c->region_len};
	} else {
		p->nranges = p->nworkers = 0; /* no prefault either */
	}
}

void cache_ram_place(struct cache *c, const int *gpu_nodes, unsigned ngpus)
{
	struct mcfs_numa_topo *t;
	struct cache_ram_numa *n;
	char text[512];
	unsigned i;
	int rc;

	if (c->numa)
		return; /* placed once */
	t = calloc(1, sizeof(*t));
	n = calloc(1, sizeof(*n));
	if (!t || !n) {
		free(t);
		free(n);
		MCFS_WARN("RAM tier: no memory to plan its NUMA placement; it goes where it is "
			  "first touched, and is not faulted in ahead");
		return;
	}
	if (mcfs_numa_read_topo("/sys", t) < 0)
		t->nnodes = 0; /* no NUMA: one node */
	t->ngpus = MCFS_MIN(ngpus, (unsigned)MCFS_NUMA_MAX_GPUS);
	for (i = 0; i < t->ngpus; i++)
		t->gpu_node[i] = gpu_nodes[i];
	rc = mcfs_numa_plan(t, c->region_len, MCFS_MAX(c->bs, HUGE_PAGE), &n->plan);
	free(t);
	if (rc < 0) {
		MCFS_WARN("RAM tier: cannot plan its NUMA placement: %s", strerror(-rc));
		free(n);
		return;
	}
	c->numa = n;
	apply(c, &n->plan);
	atomic_store(&c->numa_nodes, n->plan.nnodes);
	mcfs_numa_plan_text(&n->plan, text, sizeof(text));
	MCFS_INFO("RAM tier: NUMA placement: %s", text);
	if (n->plan.nworkers)
		start_prefault(c);
}

void cache_ram_stop(struct cache *c)
{
	struct cache_ram_numa *n = c->numa;
	unsigned i;

	atomic_store(&c->prefault_stop, true);
	if (n) {
		for (i = 0; i < n->nthreads; i++)
			pthread_join(n->threads[i], NULL);
		free(n->threads);
		mcfs_numa_plan_free(&n->plan);
		free(n);
		c->numa = NULL;
	}
}
