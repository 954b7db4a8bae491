/*
 * mcfs_numa.h - where the RAM tier's memory goes on a host of several NUMA
 * nodes: the host's topology as sysfs describes it, and the placement plan,
 * worked out by a pure function of that topology so that a unit test can
 * describe any host (common/numa_test.c).
 *
 * Why: a GPU copies from pinned host memory by DMA, and memory of another
 * node crosses the socket link (UPI, xGMI) on its way, at a fraction of
 * PCIe's speed on a busy host. The RAM tier is one region (cache/cache.c);
 * the plan says which byte ranges of it are placed on which node (an mbind()
 * preference, applied before any page is touched) and which threads fault
 * which ranges in, each on the CPUs of the node that gets the memory.
 *
 * The plan, for a region of `len` bytes (mcfs_numa_plan()):
 *   - one node with memory (or none known): no placement, one prefault
 *     thread on any CPU, as on any single-socket host;
 *   - every GPU's node known, all on one node: the region on that node, up
 *     to 7/8 of its memory; what does not fit is striped over the others;
 *   - GPUs of several nodes share the tier: striped over those nodes, in
 *     stripes of at least one block (no block straddles two nodes), so that
 *     each GPU reads its share from its own socket and no node's memory or
 *     link carries it all. Blocks are shared by every GPU that loads the
 *     same file, so no node can hold "its" GPUs' blocks alone;
 *   - no GPU, or a GPU whose node is unknown (numa_node -1): striped over
 *     every node with memory (a reader may run anywhere).
 * A GPU attached to a node without memory counts as the nearest node with
 * memory (the distance table), or as unknown without one.
 *
 * Nothing here allocates or binds memory; the cache applies the plan. No
 * state: every function is safe from any thread.
 */
#ifndef MCFS_NUMA_H
#define MCFS_NUMA_H

#include <stdbool.h>
#include <stdint.h>

#include "mcfs.h"

/* Nodes and GPUs a topology describes: node ids are below this (a nodemask
 * of one 64-bit word; Linux hosts have at most 16 nodes in practice, 8 per
 * socket with sub-NUMA clustering). */
#define MCFS_NUMA_MAX_NODES 64
#define MCFS_NUMA_MAX_GPUS 64
/* A node's cpulist text ("0-31,64-95"), as sysfs writes it. */
#define MCFS_NUMA_CPULIST_MAX 512
/* Stripes per node aimed at: enough that every node gets a fair share of a
 * tier of any size, few enough that the region stays a few hundred
 * mappings (each stripe boundary splits the mapping; vm.max_map_count is
 * 65530 by default). */
#define MCFS_NUMA_STRIPES_PER_NODE 64
/* No stripe is bigger: the pin thread registers 1 GiB at a time. */
#define MCFS_NUMA_STRIPE_MAX (1ull << 30)

struct mcfs_numa_node {
	int id;				  /* the node's number (nodeN), 0 <= id < MAX_NODES */
	uint64_t mem;			  /* bytes of memory (MemTotal); 0: memoryless */
	char cpus[MCFS_NUMA_CPULIST_MAX]; /* its CPUs, cpulist text; "": none */
	unsigned char dist[MCFS_NUMA_MAX_NODES]; /* distance to node id i; 0: unknown */
};

/* A host: its nodes (in any order, ids unique) and the node of each GPU. */
struct mcfs_numa_topo {
	unsigned nnodes;
	struct mcfs_numa_node node[MCFS_NUMA_MAX_NODES];
	unsigned ngpus;
	int gpu_node[MCFS_NUMA_MAX_GPUS]; /* numa_node of the GPU's PCI device; -1: unknown */
};

/* A byte range of the region and the node it is placed on. */
struct mcfs_numa_range {
	uint64_t off, len;
	int node; /* node id; -1: no placement (the whole region, one-node hosts) */
};

/* A prefault thread: the node whose ranges it faults in, from that node's CPUs. */
struct mcfs_numa_worker {
	int node;			  /* node id; -1: every range, any CPU */
	char cpus[MCFS_NUMA_CPULIST_MAX]; /* where it runs; "": anywhere (the node has no CPU) */
	uint64_t bytes;			  /* bytes of its ranges */
};

enum mcfs_numa_mode {
	MCFS_NUMA_NONE = 0,    /* no placement */
	MCFS_NUMA_LOCAL = 1,   /* the GPUs' one node (and the overflow striped) */
	MCFS_NUMA_STRIPED = 2, /* striped over several nodes */
};

struct mcfs_numa_plan {
	enum mcfs_numa_mode mode;
	uint64_t stripe;		    /* bytes per stripe (0 with NONE) */
	unsigned nranges;		    /* ranges cover [0, len) in order, no gap */
	struct mcfs_numa_range *ranges;	    /* caller frees with mcfs_numa_plan_free() */
	unsigned nworkers;		    /* one per node holding a range */
	struct mcfs_numa_worker *workers;   /* same */
	unsigned nnodes;		    /* nodes holding a part of the region */
	int nodes[MCFS_NUMA_MAX_NODES];	    /* their ids, ascending */
	unsigned ngpu_nodes;		    /* nodes of the GPUs, as counted (memory nodes) */
	int gpu_nodes[MCFS_NUMA_MAX_NODES]; /* their ids, ascending */
	bool gpu_unknown;		    /* some GPU's node is unknown */
};

/*
 * Works out the plan for a region of @len bytes (> 0) on @t. Range bounds
 * are multiples of @align (a power of two: the block size, or the huge page
 * size if bigger), except the region's end. Returns 0 with *@out filled
 * (free with mcfs_numa_plan_free(), also after a later failure of the
 * caller), -EINVAL for a topology it cannot read (an id out of range or
 * twice, too many GPUs, @align not a power of two, @len 0) or -ENOMEM;
 * *@out is then empty and needs no free.
 */
MCFS_MUST_CHECK int mcfs_numa_plan(const struct mcfs_numa_topo *t, uint64_t len, uint64_t align,
				   struct mcfs_numa_plan *out);

/* Frees what mcfs_numa_plan() allocated; the plan is empty afterwards. */
void mcfs_numa_plan_free(struct mcfs_numa_plan *p);

/*
 * Writes the plan in words into @buf ("striped over nodes 0,1 in 256 MiB
 * stripes (GPUs on nodes 0,1)"), for the log line at start. Can't fail.
 */
void mcfs_numa_plan_text(const struct mcfs_numa_plan *p, char *buf, size_t size);

/*
 * Reads the host's nodes from @sysfs (normally "/sys"; a test passes a tree
 * of its own): each SYSFS/devices/system/node/nodeN with its cpulist,
 * meminfo (MemTotal) and distance. ngpus is left 0. Returns 0, or -ENOENT
 * when the kernel has no NUMA (no node directory): one node is then all a
 * caller can assume.
 */
MCFS_MUST_CHECK int mcfs_numa_read_topo(const char *sysfs, struct mcfs_numa_topo *out);

/*
 * The NUMA node of the PCI device @busid ("0000:3b:00.0", any case) as
 * SYSFS/bus/pci/devices/BUSID/numa_node says, or -1 when it is unknown
 * (no such file, or the firmware gives none). Can't fail.
 */
int mcfs_numa_pci_node(const char *sysfs, const char *busid);

/*
 * Parses cpulist text ("0-3,8,10-11") into @set, a cpu_set_t the caller
 * passes as void * so that this header needs no <sched.h>. Returns the
 * number of CPUs, or -EINVAL for text that is not a cpulist or names a CPU
 * past CPU_SETSIZE.
 */
MCFS_MUST_CHECK int mcfs_numa_cpus_parse(const char *list, void *set);

#endif
