/*
 * numa.c - the RAM tier's NUMA plan (a pure function of a described host)
 * and the sysfs readers that describe the real one. mcfs_numa.h says what
 * the plan is and why; cache/cache.c applies it (mbind, prefault threads).
 *
 * The plan works in three steps: which nodes have memory; which of them
 * the GPUs are near (the targets); then the region is laid out, the part
 * that fits in the targets' memory on them and the rest on the other
 * nodes, each part one range (one node) or stripes dealt round-robin.
 */
#define _GNU_SOURCE
#include "mcfs_numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the plan ---------------------------------------------------------- */

/* A set of node ids, ascending. */
struct idset {
	unsigned n;
	int id[MCFS_NUMA_MAX_NODES];
};

static bool idset_has(const struct idset *s, int id)
{
	unsigned i;

	for (i = 0; i < s->n; i++)
		if (s->id[i] == id)
			return true;
	return false;
}

static void idset_add(struct idset *s, int id)
{
	unsigned i;

	if (idset_has(s, id) || s->n == MCFS_NUMA_MAX_NODES)
		return;
	for (i = s->n; i > 0 && s->id[i - 1] > id; i--)
		s->id[i] = s->id[i - 1];
	s->id[i] = id;
	s->n++;
}

static const struct mcfs_numa_node *node_of(const struct mcfs_numa_topo *t, int id)
{
	unsigned i;

	for (i = 0; i < t->nnodes; i++)
		if (t->node[i].id == id)
			return &t->node[i];
	return NULL;
}

/* The node with memory nearest to @n (a memoryless node), or -1 when its
 * distances are unknown. Ties go to the lowest id. */
static int nearest_memory(const struct mcfs_numa_topo *t, const struct mcfs_numa_node *n)
{
	unsigned i, best_d = UINT_MAX;
	int best = -1;

	for (i = 0; i < t->nnodes; i++) {
		const struct mcfs_numa_node *m = &t->node[i];
		unsigned d = n->dist[m->id];

		if (m->mem == 0 || d == 0)
			continue;
		if (d < best_d || (d == best_d && m->id < best)) {
			best_d = d;
			best = m->id;
		}
	}
	return best;
}

/* The memory node GPU @g counts for, or -1 (unknown). */
static int gpu_memory_node(const struct mcfs_numa_topo *t, unsigned g)
{
	const struct mcfs_numa_node *n = t->gpu_node[g] < 0 ? NULL : node_of(t, t->gpu_node[g]);

	if (!n)
		return -1;
	return n->mem ? n->id : nearest_memory(t, n);
}

static int check_topo(const struct mcfs_numa_topo *t, uint64_t len, uint64_t align)
{
	struct idset seen = {0};
	unsigned i;

	if (len == 0 || align == 0 || (align & (align - 1)) || t->nnodes > MCFS_NUMA_MAX_NODES ||
	    t->ngpus > MCFS_NUMA_MAX_GPUS)
		return -EINVAL;
	for (i = 0; i < t->nnodes; i++) {
		if (t->node[i].id < 0 || t->node[i].id >= MCFS_NUMA_MAX_NODES ||
		    idset_has(&seen, t->node[i].id))
			return -EINVAL;
		idset_add(&seen, t->node[i].id);
	}
	return 0;
}

static int add_range(struct mcfs_numa_plan *p, unsigned *cap, uint64_t off, uint64_t len, int node)
{
	struct mcfs_numa_range *r;

	if (len == 0)
		return 0;
	if (p->nranges && p->ranges[p->nranges - 1].node == node) {
		p->ranges[p->nranges - 1].len += len; /* the same node as before: one range */
		return 0;
	}
	if (p->nranges == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		r = realloc(p->ranges, *cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		p->ranges = r;
	}
	p->ranges[p->nranges++] = (struct mcfs_numa_range){.off = off, .len = len, .node = node};
	return 0;
}

/* Lays [off, off + len) over @s: one range, or stripes dealt round-robin. */
static int lay_out(struct mcfs_numa_plan *p, unsigned *cap, uint64_t off, uint64_t len,
		   const struct idset *s)
{
	uint64_t end = off + len, n;
	unsigned k = 0;
	int rc = 0;

	if (s->n == 1)
		return add_range(p, cap, off, len, s->id[0]);
	for (; rc == 0 && off < end; off += n, k++) {
		n = MCFS_MIN(p->stripe, end - off);
		rc = add_range(p, cap, off, n, s->id[k % s->n]);
	}
	return rc;
}

/* Stripe size: about STRIPES_PER_NODE stripes per memory node, a multiple
 * of @align, at most STRIPE_MAX (unless align is bigger). */
static uint64_t stripe_for(uint64_t len, uint64_t align, unsigned nodes)
{
	uint64_t s = len / ((uint64_t)nodes * MCFS_NUMA_STRIPES_PER_NODE);

	s = (s + align - 1) & ~(align - 1);
	s = MCFS_MIN(s, MCFS_NUMA_STRIPE_MAX & ~(align - 1));
	return MCFS_MAX(s, align);
}

/* One worker per node that holds a range, with that node's CPUs; @one: the
 * node of a one-node host (or -1), which holds the region without placement. */
static int add_workers(const struct mcfs_numa_topo *t, struct mcfs_numa_plan *p, int one)
{
	const struct mcfs_numa_node *n;
	struct idset held = {0};
	unsigned i, j;

	for (i = 0; i < p->nranges; i++)
		if (p->ranges[i].node >= 0)
			idset_add(&held, p->ranges[i].node);
	if (one >= 0)
		idset_add(&held, one);
	p->nnodes = held.n;
	memcpy(p->nodes, held.id, sizeof(held.id));
	p->workers = calloc(p->nnodes ? p->nnodes : 1, sizeof(*p->workers));
	if (!p->workers)
		return -ENOMEM;
	if (p->nnodes == 0 || p->mode == MCFS_NUMA_NONE) {
		p->workers[0].node = -1;
		p->workers[0].bytes = p->ranges[0].len;
		p->nworkers = 1;
		return 0;
	}
	for (i = 0; i < p->nnodes; i++) {
		struct mcfs_numa_worker *w = &p->workers[i];

		w->node = p->nodes[i];
		n = node_of(t, w->node);
		snprintf(w->cpus, sizeof(w->cpus), "%s", n ? n->cpus : "");
		for (j = 0; j < p->nranges; j++)
			if (p->ranges[j].node == w->node)
				w->bytes += p->ranges[j].len;
	}
	p->nworkers = p->nnodes;
	return 0;
}

/* Which nodes the GPUs count for (plan fields), and so the targets. */
static void pick_targets(const struct mcfs_numa_topo *t, const struct idset *mem,
			 struct mcfs_numa_plan *p, struct idset *targets)
{
	struct idset g = {0};
	unsigned i;
	int n;

	for (i = 0; i < t->ngpus; i++) {
		n = gpu_memory_node(t, i);
		if (n < 0)
			p->gpu_unknown = true;
		else
			idset_add(&g, n);
	}
	p->ngpu_nodes = g.n;
	memcpy(p->gpu_nodes, g.id, sizeof(g.id));
	/* A GPU of unknown node may sit on any node: then, as with no GPU, the
	 * readers are anywhere and every node shares the tier. */
	*targets = t->ngpus == 0 || p->gpu_unknown ? *mem : g;
}

int mcfs_numa_plan(const struct mcfs_numa_topo *t, uint64_t len, uint64_t align,
		   struct mcfs_numa_plan *out)
{
	struct idset mem = {0}, targets, others = {0};
	uint64_t fit = 0, near;
	unsigned i, cap = 0;
	int rc, one = -1;

	memset(out, 0, sizeof(*out));
	rc = check_topo(t, len, align);
	if (rc < 0)
		return rc;
	for (i = 0; i < t->nnodes; i++)
		if (t->node[i].mem)
			idset_add(&mem, t->node[i].id);
	pick_targets(t, &mem, out, &targets);
	if (mem.n <= 1) {
		/* One node: nothing to place. Counted as that node, if known. */
		rc = add_range(out, &cap, 0, len, -1);
		one = mem.n == 1 ? mem.id[0] : -1;
		out->mode = MCFS_NUMA_NONE;
		goto workers;
	}
	for (i = 0; i < mem.n; i++)
		if (idset_has(&targets, mem.id[i]))
			fit += node_of(t, mem.id[i])->mem / 8 * 7; /* the rest: the node's own */
		else
			idset_add(&others, mem.id[i]);
	if (others.n == 0)
		others = targets;
	near = len <= fit ? len : fit & ~(align - 1);
	out->mode = targets.n == 1 ? MCFS_NUMA_LOCAL : MCFS_NUMA_STRIPED;
	out->stripe = stripe_for(len, align, mem.n);
	rc = lay_out(out, &cap, 0, near, &targets);
	if (rc == 0)
		rc = lay_out(out, &cap, near, len - near, &others);
workers:
	if (rc == 0)
		rc = add_workers(t, out, one);
	if (rc < 0)
		mcfs_numa_plan_free(out);
	return rc;
}

void mcfs_numa_plan_free(struct mcfs_numa_plan *p)
{
	free(p->ranges);
	free(p->workers);
	memset(p, 0, sizeof(*p));
}

static void ids_text(const int *ids, unsigned n, char *buf, size_t size)
{
	size_t used = 0;
	unsigned i;

	buf[0] = '\0';
	for (i = 0; i < n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? "," : "", ids[i]);
}

void mcfs_numa_plan_text(const struct mcfs_numa_plan *p, char *buf, size_t size)
{
	char nodes[256], gpus[256], stripe[32];

	ids_text(p->nodes, p->nnodes, nodes, sizeof(nodes));
	ids_text(p->gpu_nodes, p->ngpu_nodes, gpus, sizeof(gpus));
	snprintf(stripe, sizeof(stripe), "%llu MiB", (unsigned long long)(p->stripe >> 20));
	if (p->mode == MCFS_NUMA_NONE)
		snprintf(buf, size, "no placement (%s)",
			 p->nnodes ? "one node with memory" : "no NUMA nodes known");
	else if (p->mode == MCFS_NUMA_LOCAL && p->nnodes == 1)
		snprintf(buf, size, "on node %s (every GPU is on node %s)", nodes, gpus);
	else
		snprintf(buf, size, "%s nodes %s in %s stripes (%s%s)",
			 p->mode == MCFS_NUMA_LOCAL ? "on the GPUs' node, the overflow striped over"
						    : "striped over",
			 nodes, stripe,
			 p->gpu_unknown	 ? "a GPU's node is unknown"
			 : p->ngpu_nodes ? "GPUs on nodes "
					 : "no GPU",
			 p->gpu_unknown || !p->ngpu_nodes ? "" : gpus);
}

/* ---- sysfs ------------------------------------------------------------- */

/* ROOT/nodeID/NAME into @path; false if it does not fit. */
static bool node_file(char *path, size_t size, const char *root, int id, const char *name)
{
	int n = snprintf(path, size, "%s/node%d/%s", root, id, name);

	return n > 0 && (size_t)n < size;
}

static uint64_t node_mem(const char *root, int id)
{
	char path[PATH_MAX], line[256];
	unsigned long long kb;
	uint64_t mem = 0;
	FILE *fp;

	if (!node_file(path, sizeof(path), root, id, "meminfo"))
		return 0;
	fp = fopen(path, "re");
	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "Node %*d MemTotal: %llu kB", &kb) == 1)
			mem = (uint64_t)kb * 1024;
	fclose(fp);
	return mem;
}

static int cmp_node(const void *a, const void *b)
{
	const struct mcfs_numa_node *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

/* Distances are listed in the order of the node ids, ascending. */
static void read_distances(const char *root, struct mcfs_numa_topo *t)
{
	char path[PATH_MAX], line[1024], *s, *end;
	unsigned i, k;
	long d;

	for (i = 0; i < t->nnodes; i++) {
		if (!node_file(path, sizeof(path), root, t->node[i].id, "distance") ||
		    mcfs_read_line(path, line, sizeof(line)) < 0)
			continue;
		for (s = line, k = 0; k < t->nnodes; k++, s = end) {
			d = strtol(s, &end, 10);
			if (end == s || d <= 0 || d > 255)
				break;
			t->node[i].dist[t->node[k].id] = (unsigned char)d;
		}
	}
}

int mcfs_numa_read_topo(const char *sysfs, struct mcfs_numa_topo *out)
{
	char root[PATH_MAX], path[PATH_MAX];
	struct mcfs_numa_node *n;
	struct dirent *de;
	DIR *d;
	int id;
	char c;

	memset(out, 0, sizeof(*out));
	id = snprintf(root, sizeof(root), "%s/devices/system/node", sysfs);
	d = id > 0 && (size_t)id < sizeof(root) ? opendir(root) : NULL;
	if (!d)
		return -ENOENT;
	while ((de = readdir(d)) && out->nnodes < MCFS_NUMA_MAX_NODES) {
		if (sscanf(de->d_name, "node%d%c", &id, &c) != 1 || id < 0 ||
		    id >= MCFS_NUMA_MAX_NODES)
			continue;
		n = &out->node[out->nnodes++];
		n->id = id;
		n->mem = node_mem(root, id);
		if (!node_file(path, sizeof(path), root, id, "cpulist") ||
		    mcfs_read_line(path, n->cpus, sizeof(n->cpus)) < 0)
			n->cpus[0] = '\0';
	}
	closedir(d);
	if (out->nnodes == 0)
		return -ENOENT;
	qsort(out->node, out->nnodes, sizeof(out->node[0]), cmp_node);
	read_distances(root, out);
	return 0;
}

int mcfs_numa_pci_node(const char *sysfs, const char *busid)
{
	char path[PATH_MAX], id[64], line[32], *end;
	size_t i;
	long n;

	for (i = 0; busid[i] && i + 1 < sizeof(id); i++)
		id[i] = (char)tolower((unsigned char)busid[i]);
	id[i] = '\0';
	n = snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs, id);
	if (n <= 0 || (size_t)n >= sizeof(path) || mcfs_read_line(path, line, sizeof(line)) < 0)
		return -1;
	n = strtol(line, &end, 10);
	if (end == line || n < 0 || n >= MCFS_NUMA_MAX_NODES)
		return -1;
	return (int)n;
}

int mcfs_numa_cpus_parse(const char *list, void *set)
{
	cpu_set_t *cs = set;
	const char *s = list;
	char *end;
	long lo, hi, i;
	int n = 0;

	CPU_ZERO(cs);
	while (*s) {
		lo = strtol(s, &end, 10);
		if (end == s || lo < 0)
			return -EINVAL;
		hi = lo;
		if (*end == '-') {
			s = end + 1;
			hi = strtol(s, &end, 10);
			if (end == s || hi < lo)
				return -EINVAL;
		}
		if (hi >= CPU_SETSIZE)
			return -EINVAL;
		for (i = lo; i <= hi; i++)
			CPU_SET((int)i, cs);
		n += (int)(hi - lo + 1);
		if (*end == ',')
			end++;
		else if (*end != '\0')
			return -EINVAL;
		s = end;
	}
	return n;
}
