/*
 * mcfs_client.h - libmcfs, the C client of the mcfs GPU fast path.
 *
 * Loads a file of an mcfs mount into a device buffer the caller owns, with
 * no tensor byte going through the kernel: the library sends the buffer's
 * CUDA IPC handle in one ioctl (include/mcfs/mcfs_ioctl.h) and the daemon
 * copies from its pinned RAM tier. It also parses safetensors headers
 * (safetensors.h, the same parser the daemon uses), so a loader can lay
 * tensors out over the buffer as views.
 *
 *   int64_t n = mcfs_load_file("/models/m/model.safetensors", dptr, cap, err, sizeof(err));
 *
 * What it allocates: nothing, except what mcfs_st_parse()/mcfs_st_read_fd()
 * return. It never allocates device memory. It needs no CUDA at build time:
 * mcfs_devbuf_from_ptr() finds the driver (libcuda.so.1) at run time.
 *
 * Errors are negative errno values (see include/mcfs/mcfs_ioctl.h for the
 * daemon's); the library never prints. Thread safe.
 */
#ifndef MCFS_CLIENT_H
#define MCFS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "mcfs/mcfs_ioctl.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCFS_API __attribute__((visibility("default")))

/* A device buffer as the daemon needs it. */
struct mcfs_devbuf {
	uint8_t handle[MCFS_IPC_HANDLE_SIZE]; /* IPC handle of the whole allocation */
	uint8_t uuid[16];		      /* its GPU */
	int32_t device;			      /* its GPU's ordinal in this process */
	uint64_t offset;		      /* the pointer's offset in the allocation */
	uint64_t size;			      /* bytes from the pointer to the allocation's end */
};

/*
 * Asks the daemon behind @fd what it offers (MCFS_IOC_INFO). Returns 0 with
 * @info filled, -ENOTTY if @fd is not on an mcfs mount, or another errno.
 * info->daemon_abi != MCFS_IOCTL_ABI means loads will fail with -EPROTO.
 */
MCFS_API int mcfs_info(int fd, struct mcfs_info *info);

/*
 * Describes the device memory at @dptr for a load. Returns 0, -ENODEV (no
 * CUDA driver, or @dptr is not device memory), or -EOPNOTSUPP when the
 * memory cannot be exported through legacy CUDA IPC (cuMemCreate/VMM
 * allocations such as PyTorch's expandable_segments, managed memory).
 */
MCFS_API int mcfs_devbuf_from_ptr(const void *dptr, struct mcfs_devbuf *out);

/*
 * Copies @n ranges of @fd into @buf (dst_off relative to the buffer), or
 * with @n == 0 the whole safetensors data section to the buffer's start.
 * @size: bytes of the buffer the load may write (0 = to the allocation's
 * end). @flags: MCFS_LOAD_F_*. @stats (may be NULL) receives the daemon's
 * answer (bytes, ns, data_offset). Returns 0 or a negative errno.
 */
MCFS_API int mcfs_load(int fd, const struct mcfs_devbuf *buf, uint64_t size,
		       const struct mcfs_range *ranges, unsigned n, unsigned flags,
		       struct mcfs_load_req *stats);

/*
 * One call: the data section of the safetensors file at @path into the
 * device memory at @dptr, which has room for @capacity bytes. Returns the
 * bytes loaded (the data section's length, >= 0) or a negative errno with a
 * one-line reason in @err (may be NULL): -ENOTTY when the file is not on an
 * mcfs mount, -ENOSPC when the buffer is too small, -EBADMSG for a bad
 * header, and the daemon's errors.
 */
MCFS_API int64_t mcfs_load_file(const char *path, void *dptr, uint64_t capacity, char *err,
				size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
