/*
 * bind.c - which process may load into which device buffer.
 *
 * The threat: a CUDA IPC handle is 64 bytes that name an allocation, and the
 * daemon (root, with every GPU) opens whatever handle it is sent. A process
 * that learnt another's handle bytes (a shared file, a log, /proc of a
 * process it may trace) could have the daemon write model bytes into that
 * other process's GPU memory. The handle's bytes say nothing the daemon can
 * check about who exported it.
 *
 * The binding: a process proves that it can write to the buffer before the
 * daemon writes to it for that process. MCFS_IOC_BIND without the PROVE flag
 * hands the caller a fresh random nonce for (its process, the handle, the
 * device), or says it is bound already; the caller writes the nonce into its
 * buffer at an offset of its choosing (cuMemcpyHtoD: only a process that owns
 * the memory can) and asks again with PROVE, that offset and the nonce; the
 * daemon checks that it handed out that nonce, opens the handle, reads those
 * 16 bytes back and, if they are the nonce, binds (process, handle, device).
 * Several threads may bind buffers of one allocation at once: a binding keeps
 * up to GPU_BIND_PENDING nonces open, and each is good for one proof.
 * A load is done only for a bound triple (-EPERM otherwise). A forger gets
 * nonces for its own process only, and cannot write them into memory it does
 * not own: it passes only if the victim's bytes happen to equal a random
 * 128-bit value. The process is the caller's thread group as the daemon's
 * pid namespace sees it (fs/ioctl.c), so every thread of a loader shares one
 * binding; a binding is dropped once its process is gone (the janitor), and
 * beyond GPU_BIND_MAX the least recently used go first.
 *
 * Lock: the bind list is guarded by g->lock, a leaf lock, never held across
 * the CUDA call that reads the proof back.
 */
#define _GNU_SOURCE
#include "gpu_int.h"
#include "mcfs_lock.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* Bindings kept: a loader binds one arena or a few buffers per device, so
 * this is room for hundreds of loaders at once; the cost is 120 bytes each. */
#define GPU_BIND_MAX 1024

/* Challenges a binding keeps open at once: the threads of one loader may bind
 * buffers of one allocation (a caching allocator's segment) concurrently,
 * each with its own nonce; beyond this many the oldest is forgotten (its
 * proof then fails with -EPERM). */
#define GPU_BIND_PENDING 32

struct gpu_bind {
	struct gpu_bind *next;					      /* guarded by g->lock */
	pid_t tgid;						      /* the process */
	int dev;						      /* index into g->devs */
	unsigned char handle[GPU_IPC_HANDLE_SIZE];		      /* the allocation */
	unsigned char pending[GPU_BIND_PENDING][GPU_BIND_NONCE_SIZE]; /* all zero: free */
	unsigned next_pending; /* slot of the next challenge */
	bool proven;	       /* loads are allowed */
	uint64_t used_ns;      /* mcfs_now_ns() of the last use */
};

static bool process_gone(pid_t pid)
{
	return kill(pid, 0) < 0 && errno == ESRCH;
}

/* The binding of (tgid, handle, dev), or NULL. Under g->lock. */
static struct gpu_bind *find(struct gpu *g, pid_t tgid, const unsigned char *handle, int dev)
{
	struct gpu_bind *b;

	MCFS_ASSERT_HELD(&g->lock);
	for (b = g->binds; b; b = b->next)
		if (b->tgid == tgid && b->dev == dev &&
		    !memcmp(b->handle, handle, sizeof(b->handle)))
			return b;
	return NULL;
}

/* Drops the least recently used binding. Under g->lock, with a non-empty list. */
static void drop_lru(struct gpu *g)
{
	struct gpu_bind **pp, **lru = &g->binds, *b;

	for (pp = &g->binds; *pp; pp = &(*pp)->next)
		if ((*pp)->used_ns < (*lru)->used_ns)
			lru = pp;
	b = *lru;
	*lru = b->next;
	free(b);
	g->nbinds--;
}

void gpu_bind_sweep(struct gpu *g)
{
	struct gpu_bind **pp, *b;

	pthread_mutex_lock(&g->lock);
	for (pp = &g->binds; (b = *pp);) {
		if (process_gone(b->tgid)) {
			*pp = b->next;
			free(b);
			g->nbinds--;
		} else {
			pp = &b->next;
		}
	}
	pthread_mutex_unlock(&g->lock);
}

void gpu_bind_free_all(struct gpu *g)
{
	struct gpu_bind *b;

	pthread_mutex_lock(&g->lock);
	while ((b = g->binds)) {
		g->binds = b->next;
		free(b);
	}
	g->nbinds = 0;
	pthread_mutex_unlock(&g->lock);
}

bool gpu_bound(struct gpu *g, pid_t tgid, const unsigned char *handle, int dev)
{
	struct gpu_bind *b;
	bool ok;

	pthread_mutex_lock(&g->lock);
	b = find(g, tgid, handle, dev);
	ok = b && b->proven;
	if (ok)
		b->used_ns = mcfs_now_ns();
	pthread_mutex_unlock(&g->lock);
	return ok;
}

/* A fresh nonce for (tgid, handle, dev) in @nonce, or *@bound when the
 * process is bound already (no nonce then). 0, or -ENOMEM / -EIO. */
static int challenge(struct gpu *g, pid_t tgid, const unsigned char *handle, int dev,
		     unsigned char *nonce, bool *bound)
{
	static const unsigned char zero[GPU_BIND_NONCE_SIZE];
	struct gpu_bind *b, *fresh = NULL;

	do {
		if (getrandom(nonce, GPU_BIND_NONCE_SIZE, 0) != GPU_BIND_NONCE_SIZE)
			return -EIO;
	} while (!memcmp(nonce, zero, sizeof(zero))); /* all zero means "free" */
	fresh = calloc(1, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	pthread_mutex_lock(&g->lock);
	b = find(g, tgid, handle, dev);
	if (!b) {
		if (g->nbinds >= GPU_BIND_MAX)
			drop_lru(g);
		b = fresh;
		fresh = NULL;
		b->tgid = tgid;
		b->dev = dev;
		memcpy(b->handle, handle, sizeof(b->handle));
		b->next = g->binds;
		g->binds = b;
		g->nbinds++;
	}
	*bound = b->proven;
	if (!b->proven) {
		memcpy(b->pending[b->next_pending], nonce, GPU_BIND_NONCE_SIZE);
		b->next_pending = (b->next_pending + 1) % GPU_BIND_PENDING;
	}
	b->used_ns = mcfs_now_ns();
	pthread_mutex_unlock(&g->lock);
	free(fresh);
	if (*bound)
		memset(nonce, 0, GPU_BIND_NONCE_SIZE);
	return 0;
}

/* The pending slot of (tgid, handle, dev) that holds @nonce, or -1. Under g->lock. */
static int pending_slot(struct gpu *g, const struct gpu_load_req *req, int dev,
			const unsigned char *nonce, struct gpu_bind **out)
{
	struct gpu_bind *b = find(g, req->owner, req->ipc_handle, dev);
	unsigned i;

	*out = b;
	for (i = 0; b && i < GPU_BIND_PENDING; i++)
		if (!memcmp(b->pending[i], nonce, GPU_BIND_NONCE_SIZE))
			return (int)i;
	return -1;
}

/* Reads GPU_BIND_NONCE_SIZE bytes at @off of the allocation of @handle on
 * @dev into @out. 0, -EOVERFLOW past the allocation, or the IPC/CUDA error. */
static int read_proof(struct gpu *g, const struct gpu_load_req *req, int dev, unsigned char *out)
{
	struct gpu_ipc *e;
	cudaError_t err;
	int rc;

	rc = gpu_ipc_acquire(g, req->ipc_handle, dev, req->owner, &e);
	if (rc < 0)
		return rc;
	if (req->dst_offset > e->size || e->size - req->dst_offset < GPU_BIND_NONCE_SIZE) {
		gpu_ipc_release(g, e, false);
		return -EOVERFLOW;
	}
	err = cudaMemcpy(out, (char *)e->base + req->dst_offset, GPU_BIND_NONCE_SIZE,
			 cudaMemcpyDeviceToHost);
	gpu_ipc_release(g, e, false);
	if (err != cudaSuccess) {
		MCFS_WARN("gpu: reading a bind proof on device %d: %s", g->devs[dev].ordinal,
			  cudaGetErrorString(err));
		return gpu_errno(err);
	}
	return 0;
}

/* Checks that @nonce is a pending challenge of the caller's binding and that
 * the buffer holds it at req->dst_offset. 0 (bound) or -EPERM. */
static int prove(struct gpu *g, const struct gpu_load_req *req, int dev, const unsigned char *nonce)
{
	static const unsigned char zero[GPU_BIND_NONCE_SIZE];
	unsigned char got[GPU_BIND_NONCE_SIZE];
	struct gpu_bind *b;
	int rc, slot;

	if (!memcmp(nonce, zero, sizeof(zero)))
		return -EPERM;
	pthread_mutex_lock(&g->lock);
	slot = pending_slot(g, req, dev, nonce, &b);
	pthread_mutex_unlock(&g->lock);
	if (slot < 0) {
		MCFS_WARN("gpu: process %d sent a bind proof for a nonce it was not given (or "
			  "one of over %d challenges at once)",
			  req->owner, GPU_BIND_PENDING);
		return -EPERM;
	}
	rc = read_proof(g, req, dev, got);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&g->lock);
	slot = pending_slot(g, req, dev, nonce, &b);
	if (slot >= 0)
		memset(b->pending[slot], 0, GPU_BIND_NONCE_SIZE); /* one proof per nonce */
	rc = slot >= 0 && !memcmp(got, nonce, GPU_BIND_NONCE_SIZE) ? 0 : -EPERM;
	if (rc == 0)
		b->proven = true;
	pthread_mutex_unlock(&g->lock);
	if (rc < 0)
		MCFS_WARN("gpu: process %d could not show that it can write the device buffer it "
			  "named (device %d, offset %llu): it is not bound, and loads into that "
			  "buffer are refused for it",
			  req->owner, g->devs[dev].ordinal, (unsigned long long)req->dst_offset);
	return rc;
}

int gpu_bind(struct gpu *g, const struct gpu_load_req *req, bool proof, unsigned char *nonce,
	     bool *bound)
{
	cudaError_t err;
	int dev;

	if (!g || !g->ok)
		return -ENODEV;
	if (req->owner <= 0)
		return -EPERM;
	dev = gpu_find_dev(g, req);
	if (dev < 0)
		return dev;
	*bound = false;
	if (!proof)
		return challenge(g, req->owner, req->ipc_handle, dev, nonce, bound);
	if (atomic_load(&g->devs[dev].broken))
		return -ENODEV;
	err = cudaSetDevice(g->devs[dev].ordinal); /* FUSE worker threads start with none */
	if (err != cudaSuccess)
		return gpu_errno(err);
	return prove(g, req, dev, nonce);
}
