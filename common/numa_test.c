/*
 * numa_test.c - unit test of the RAM tier's NUMA plan (mcfs_numa.h) over
 * described hosts: one node; two nodes with 4 + 4 GPUs; two nodes with the
 * GPUs on one (and a tier bigger than that node's memory); four nodes; a
 * node without memory (and one without CPUs); GPUs whose node is unknown;
 * no GPU. Every plan is also checked for what any plan must be: ranges that
 * cover the region in order, on aligned bounds, and one prefault worker per
 * node holding a range, on that node's CPUs. Then the sysfs readers over a
 * tree of the test's own, and the cpulist parser.
 */
#define _GNU_SOURCE
#include "mcfs_numa.h"
#include "mcfs_test.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define ALIGN (8 * MiB) /* the default block size */

static struct mcfs_numa_topo topo;

/* A host of @n nodes: node i has @mem_gib GiB and 32 CPUs, distance 10 to
 * itself and 21 to the others; no GPU yet. */
static void host(unsigned n, uint64_t mem_gib)
{
	unsigned i, j;

	memset(&topo, 0, sizeof(topo));
	topo.nnodes = n;
	for (i = 0; i < n; i++) {
		topo.node[i].id = (int)i;
		topo.node[i].mem = mem_gib * GiB;
		snprintf(topo.node[i].cpus, sizeof(topo.node[i].cpus), "%u-%u", i * 32,
			 i * 32 + 31);
		for (j = 0; j < n; j++)
			topo.node[i].dist[j] = i == j ? 10 : 21;
	}
}

static void gpus(unsigned n, const int *nodes)
{
	if (n)
		memcpy(topo.gpu_node, nodes, n * sizeof(*nodes));
	topo.ngpus = n;
}

static uint64_t bytes_on(const struct mcfs_numa_plan *p, int node)
{
	uint64_t b = 0;
	unsigned i;

	for (i = 0; i < p->nranges; i++)
		if (p->ranges[i].node == node)
			b += p->ranges[i].len;
	return b;
}

static const struct mcfs_numa_worker *worker_of(const struct mcfs_numa_plan *p, int node)
{
	unsigned i;

	for (i = 0; i < p->nworkers; i++)
		if (p->workers[i].node == node)
			return &p->workers[i];
	return NULL;
}

/* What every plan must be. */
static void check_sane(const struct mcfs_numa_plan *p, uint64_t len)
{
	const struct mcfs_numa_worker *w;
	uint64_t off = 0, sum = 0;
	unsigned i, j;

	CHECK(p->nranges > 0);
	for (i = 0; i < p->nranges; i++) {
		CHECK(p->ranges[i].off == off, "range %u at %llu, expected %llu", i,
		      (unsigned long long)p->ranges[i].off, (unsigned long long)off);
		CHECK(p->ranges[i].off % ALIGN == 0, "range %u not aligned", i);
		CHECK(p->ranges[i].len > 0);
		CHECK((p->ranges[i].node < 0) == (p->mode == MCFS_NUMA_NONE));
		CHECK(i == 0 || p->ranges[i].node != p->ranges[i - 1].node,
		      "ranges %u and %u on one node are not one range", i - 1, i);
		off += p->ranges[i].len;
	}
	CHECK(off == len, "ranges end at %llu of %llu", (unsigned long long)off,
	      (unsigned long long)len);
	for (i = 0; i < p->nworkers; i++) {
		w = &p->workers[i];
		sum += w->bytes;
		CHECK(w->bytes == bytes_on(p, w->node), "worker of node %d", w->node);
		for (j = 0; w->node >= 0 && j < topo.nnodes; j++)
			if (topo.node[j].id == w->node)
				CHECK_STR(w->cpus, topo.node[j].cpus);
	}
	CHECK(sum == len, "workers fault %llu of %llu bytes", (unsigned long long)sum,
	      (unsigned long long)len);
	if (p->mode != MCFS_NUMA_NONE) {
		CHECK(p->nworkers == p->nnodes);
		for (i = 0; i < p->nnodes; i++)
			CHECK(worker_of(p, p->nodes[i]) != NULL, "no worker on node %d",
			      p->nodes[i]);
	}
}

static int plan(uint64_t len, struct mcfs_numa_plan *p)
{
	int rc = mcfs_numa_plan(&topo, len, ALIGN, p);

	CHECK(rc == 0, "plan: %d", rc);
	if (rc == 0)
		check_sane(p, len);
	return rc;
}

static void test_one_node(void)
{
	static const int g[2] = {0, -1};
	struct mcfs_numa_plan p;
	char text[256];

	host(1, 512);
	gpus(2, g);
	if (plan(48 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_NONE);
		CHECK(p.nranges == 1 && p.ranges[0].node == -1);
		CHECK(p.nworkers == 1 && p.workers[0].node == -1 && p.workers[0].cpus[0] == '\0');
		CHECK(p.nnodes == 1 && p.nodes[0] == 0, "counted as node 0");
		mcfs_numa_plan_text(&p, text, sizeof(text));
		CHECK(strstr(text, "no placement") != NULL, "%s", text);
		mcfs_numa_plan_free(&p);
	}
	memset(&topo, 0, sizeof(topo)); /* a kernel without NUMA: no node known */
	if (plan(4 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_NONE && p.nnodes == 0 && p.nworkers == 1);
		mcfs_numa_plan_free(&p);
	}
}

static void test_two_nodes_four_gpus_each(void)
{
	static const int g[8] = {0, 0, 0, 0, 1, 1, 1, 1};
	struct mcfs_numa_plan p;
	char text[256];
	unsigned i;

	host(2, 512);
	gpus(8, g);
	if (plan(48 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED);
		CHECK(p.stripe == 384 * MiB, "stripe %llu", (unsigned long long)p.stripe);
		CHECK(bytes_on(&p, 0) == 24 * GiB && bytes_on(&p, 1) == 24 * GiB);
		for (i = 0; i < p.nranges; i++)
			CHECK(p.ranges[i].node == (int)(i % 2) && p.ranges[i].len == p.stripe);
		CHECK(p.nworkers == 2 && p.nnodes == 2);
		CHECK(worker_of(&p, 1) && strcmp(worker_of(&p, 1)->cpus, "32-63") == 0);
		mcfs_numa_plan_text(&p, text, sizeof(text));
		CHECK_STR(text, "striped over nodes 0,1 in 384 MiB stripes (GPUs on nodes 0,1)");
		mcfs_numa_plan_free(&p);
	}
	/* A tier of 3 blocks: stripes of one block, dealt 0, 1, 0. */
	if (plan(3 * ALIGN, &p) == 0) {
		CHECK(p.stripe == ALIGN && p.nranges == 3);
		CHECK(bytes_on(&p, 0) == 2 * ALIGN && bytes_on(&p, 1) == ALIGN);
		mcfs_numa_plan_free(&p);
	}
	/* A huge tier: no stripe over 1 GiB, so every node still gets its share. */
	if (plan(1024 * GiB + 8 * MiB, &p) == 0) {
		CHECK(p.stripe == GiB, "stripe %llu", (unsigned long long)p.stripe);
		CHECK(bytes_on(&p, 0) == 512 * GiB + 8 * MiB && bytes_on(&p, 1) == 512 * GiB);
		mcfs_numa_plan_free(&p);
	}
}

static void test_gpus_on_one_node(void)
{
	static const int g[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	struct mcfs_numa_plan p;
	char text[256];

	host(2, 256);
	gpus(8, g);
	if (plan(48 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_LOCAL);
		CHECK(p.nranges == 1 && p.ranges[0].node == 1);
		CHECK(p.nworkers == 1 && p.workers[0].node == 1);
		CHECK_STR(p.workers[0].cpus, "32-63");
		mcfs_numa_plan_text(&p, text, sizeof(text));
		CHECK_STR(text, "on node 1 (every GPU is on node 1)");
		mcfs_numa_plan_free(&p);
	}
	/* Bigger than 7/8 of node 1 (224 GiB): the rest goes to node 0. */
	if (plan(240 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_LOCAL && p.nranges == 2);
		CHECK(p.ranges[0].node == 1 && p.ranges[0].len == 224 * GiB);
		CHECK(p.ranges[1].node == 0 && p.ranges[1].len == 16 * GiB);
		CHECK(p.nworkers == 2 && p.nnodes == 2);
		mcfs_numa_plan_free(&p);
	}
}

static void test_four_nodes(void)
{
	static const int all[8] = {0, 0, 1, 1, 2, 2, 3, 3}, two[4] = {3, 1, 3, 1};
	struct mcfs_numa_plan p;
	int n;

	host(4, 128);
	gpus(8, all);
	if (plan(64 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.nnodes == 4 && p.nworkers == 4);
		for (n = 0; n < 4; n++)
			CHECK(bytes_on(&p, n) == 16 * GiB, "node %d", n);
		mcfs_numa_plan_free(&p);
	}
	gpus(4, two); /* GPUs on nodes 1 and 3 only: the tier is theirs */
	if (plan(64 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.nnodes == 2);
		CHECK(p.nodes[0] == 1 && p.nodes[1] == 3);
		CHECK(bytes_on(&p, 1) == 32 * GiB && bytes_on(&p, 3) == 32 * GiB);
		CHECK(bytes_on(&p, 0) == 0 && bytes_on(&p, 2) == 0);
		CHECK(p.ngpu_nodes == 2 && !p.gpu_unknown);
		mcfs_numa_plan_free(&p);
	}
	/* More than nodes 1 and 3 hold (2 x 112 GiB): the rest striped over 0 and 2. */
	if (plan(256 * GiB, &p) == 0) {
		CHECK(bytes_on(&p, 1) + bytes_on(&p, 3) == 224 * GiB);
		CHECK(bytes_on(&p, 0) + bytes_on(&p, 2) == 32 * GiB);
		CHECK(bytes_on(&p, 0) > 0 && bytes_on(&p, 2) > 0);
		CHECK(p.nnodes == 4);
		mcfs_numa_plan_free(&p);
	}
}

static void test_node_without_memory(void)
{
	static const int g2[2] = {2, 2}, g3[1] = {3};
	struct mcfs_numa_plan p;

	/* Node 2 has CPUs and GPUs but no memory; it is nearer node 1 (12) than 0 (20). */
	host(3, 128);
	topo.node[2].mem = 0;
	topo.node[2].dist[0] = 20;
	topo.node[2].dist[1] = 12;
	gpus(2, g2);
	if (plan(32 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_LOCAL && p.nranges == 1 && p.ranges[0].node == 1);
		CHECK(p.ngpu_nodes == 1 && p.gpu_nodes[0] == 1 && !p.gpu_unknown);
		CHECK(worker_of(&p, 2) == NULL, "no prefault where there is no memory");
		mcfs_numa_plan_free(&p);
	}
	/* Without distances, the GPUs' node is as good as unknown: every node. */
	memset(topo.node[2].dist, 0, sizeof(topo.node[2].dist));
	if (plan(32 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.gpu_unknown);
		CHECK(p.nnodes == 2 && bytes_on(&p, 0) == 16 * GiB && bytes_on(&p, 1) == 16 * GiB);
		mcfs_numa_plan_free(&p);
	}
	/* A node with memory and no CPU (CXL, HBM): its worker runs anywhere. */
	host(4, 128);
	topo.node[3].cpus[0] = '\0';
	gpus(1, g3);
	if (plan(32 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_LOCAL && p.nworkers == 1 && p.workers[0].node == 3);
		CHECK_STR(p.workers[0].cpus, "");
		mcfs_numa_plan_free(&p);
	}
}

static void test_unknown_and_no_gpu(void)
{
	static const int unknown[2] = {-1, -1}, mixed[3] = {0, 0, -1}, stray[1] = {9};
	struct mcfs_numa_plan p;
	char text[256];

	host(2, 256);
	gpus(2, unknown);
	if (plan(16 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.gpu_unknown && p.ngpu_nodes == 0);
		CHECK(bytes_on(&p, 0) == 8 * GiB && bytes_on(&p, 1) == 8 * GiB);
		mcfs_numa_plan_text(&p, text, sizeof(text));
		CHECK(strstr(text, "unknown") != NULL, "%s", text);
		mcfs_numa_plan_free(&p);
	}
	gpus(3, mixed); /* the unknown one may be on node 1: both share */
	if (plan(16 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.gpu_unknown && p.nnodes == 2);
		mcfs_numa_plan_free(&p);
	}
	gpus(1, stray); /* a node sysfs does not list */
	if (plan(16 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && p.gpu_unknown);
		mcfs_numa_plan_free(&p);
	}
	gpus(0, NULL);
	if (plan(16 * GiB, &p) == 0) {
		CHECK(p.mode == MCFS_NUMA_STRIPED && !p.gpu_unknown && p.nnodes == 2);
		mcfs_numa_plan_text(&p, text, sizeof(text));
		CHECK(strstr(text, "no GPU") != NULL, "%s", text);
		mcfs_numa_plan_free(&p);
	}
}

static void test_refusals(void)
{
	struct mcfs_numa_plan p;

	host(2, 64);
	CHECK(mcfs_numa_plan(&topo, 0, ALIGN, &p) == -EINVAL);
	CHECK(mcfs_numa_plan(&topo, GiB, 3 * MiB, &p) == -EINVAL);
	topo.node[1].id = 0;
	CHECK(mcfs_numa_plan(&topo, GiB, ALIGN, &p) == -EINVAL, "a node listed twice");
	topo.node[1].id = MCFS_NUMA_MAX_NODES;
	CHECK(mcfs_numa_plan(&topo, GiB, ALIGN, &p) == -EINVAL, "a node id out of range");
	CHECK(p.ranges == NULL && p.workers == NULL, "a refused plan holds nothing");
}

static void test_cpulist(void)
{
	cpu_set_t s;

	CHECK(mcfs_numa_cpus_parse("0-3,8,10-11", &s) == 7);
	CHECK(CPU_ISSET(3, &s) && CPU_ISSET(8, &s) && CPU_ISSET(11, &s) && !CPU_ISSET(9, &s));
	CHECK(mcfs_numa_cpus_parse("", &s) == 0);
	CHECK(mcfs_numa_cpus_parse("a", &s) == -EINVAL);
	CHECK(mcfs_numa_cpus_parse("3-1", &s) == -EINVAL);
	CHECK(mcfs_numa_cpus_parse("0-3;", &s) == -EINVAL);
	CHECK(mcfs_numa_cpus_parse("99999", &s) == -EINVAL);
}

static void put(const char *root, const char *rel, const char *text)
{
	char path[4096], *slash;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0755);
		*slash = '/';
	}
	fp = fopen(path, "w");
	CHECK(fp != NULL, "%s", path);
	if (fp) {
		fputs(text, fp);
		fclose(fp);
	}
}

static void test_sysfs(void)
{
	char root[] = "/tmp/mcfs-numa-XXXXXX", cmd[128];
	struct mcfs_numa_topo t;

	if (!mkdtemp(root)) {
		CHECK(0, "mkdtemp");
		return;
	}
	CHECK(mcfs_numa_read_topo(root, &t) == -ENOENT, "no node directory: no NUMA");
	put(root, "devices/system/node/node1/cpulist", "32-63\n");
	put(root, "devices/system/node/node1/meminfo",
	    "Node 1 MemTotal:       2097152 kB\nNode 1 MemFree:        1024 kB\n");
	put(root, "devices/system/node/node1/distance", "21 10\n");
	put(root, "devices/system/node/node0/cpulist", "0-31\n");
	put(root, "devices/system/node/node0/meminfo", "Node 0 MemTotal:       1048576 kB\n");
	put(root, "devices/system/node/node0/distance", "10 21\n");
	put(root, "devices/system/node/possible", "0-1\n"); /* not a node */
	put(root, "bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
	put(root, "bus/pci/devices/0000:5e:00.0/numa_node", "-1\n");
	if (mcfs_numa_read_topo(root, &t) == 0) {
		CHECK(t.nnodes == 2 && t.node[0].id == 0 && t.node[1].id == 1, "sorted by id");
		CHECK(t.node[0].mem == GiB && t.node[1].mem == 2 * GiB);
		CHECK_STR(t.node[1].cpus, "32-63");
		CHECK(t.node[1].dist[0] == 21 && t.node[1].dist[1] == 10);
		CHECK(t.ngpus == 0);
	} else {
		CHECK(0, "reading the described tree");
	}
	CHECK(mcfs_numa_pci_node(root, "0000:3B:00.0") == 1, "cudaDeviceGetPCIBusId's upper case");
	CHECK(mcfs_numa_pci_node(root, "0000:5e:00.0") == -1, "the firmware gives none");
	CHECK(mcfs_numa_pci_node(root, "0000:af:00.0") == -1, "no such device");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
}

int main(void)
{
	test_one_node();
	test_two_nodes_four_gpus_each();
	test_gpus_on_one_node();
	test_four_nodes();
	test_node_without_memory();
	test_unknown_and_no_gpu();
	test_refusals();
	test_cpulist();
	test_sysfs();
	if (failures)
		fprintf(stderr, "numa_test: %d check(s) failed\n", failures);
	return failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
