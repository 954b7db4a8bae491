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
 * A rank that owns part of a file loads only that part: mcfs_load_tensors()
 * takes tensor names or globs, and the daemon fetches and copies only the
 * blocks and bytes of those tensors.
 *
 * What it allocates: nothing, except what mcfs_st_parse()/mcfs_st_read_fd()
 * and mcfs_select()/mcfs_load_tensors() return. It never allocates device
 * memory. It needs no CUDA at build time: mcfs_devbuf_from_ptr() finds the
 * driver (libcuda.so.1) at run time.
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
 * Binds the calling process to the buffer @buf, made from @dptr by
 * mcfs_devbuf_from_ptr(), so that the daemon behind @fd loads into it
 * (MCFS_IOC_BIND: the daemon's nonce is written at @dptr and read back).
 * Overwrites the first 16 bytes at @dptr, which a load then fills; @size
 * (bytes usable at @dptr) must be at least 16. Once per buffer and process,
 * before its first mcfs_load(). Returns 0, -EINVAL (@size under 16),
 * -ENODEV (no driver), -EPERM (the daemon read back other bytes), or the
 * daemon's errors.
 */
MCFS_API int mcfs_bind(int fd, const struct mcfs_devbuf *buf, void *dptr, uint64_t size);

/*
 * Copies @n ranges of @fd into @buf (dst_off relative to the buffer), or
 * with @n == 0 the whole safetensors data section to the buffer's start.
 * A range with count > 1 is strided: count rows of len bytes, src_stride
 * apart in the file, packed in the buffer (<mcfs/mcfs_ioctl.h>); zero the
 * ranges before filling them, so that count and src_stride are 0 otherwise.
 * @size: bytes of the buffer the load may write (0 = to the allocation's
 * end). @flags: MCFS_LOAD_F_*. @stats (may be NULL) receives the daemon's
 * answer (bytes, ns, data_offset). Returns 0 or a negative errno: -EPERM
 * if this process is not bound to @buf (mcfs_bind() first).
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

/*
 * A selection: the tensors of a safetensors header that a list of names or
 * glob patterns selects, where each lands in a device buffer, and the copies
 * that put them there.
 *
 * Matching: a pattern equal to a tensor's name selects it; any other is an
 * fnmatch(3) glob (`*`, `?`, `[seq]`, `[!seq]`; case-sensitive, no escapes),
 * as Python's fnmatch.fnmatchcase, so that libmcfs and the Python package
 * select the same tensors. Every pattern must select at least one tensor.
 *
 * Layout: the selected tensors in file order. Tensors adjacent in the file
 * form one run, copied as one range; each run starts at the first buffer
 * offset congruent to its data-section offset modulo MCFS_SELECT_ALIGN, so a
 * tensor keeps the alignment it has in a whole-file load (at most
 * MCFS_SELECT_ALIGN - 1 bytes of padding per run). Selecting every tensor
 * gives one run at offset 0: the whole-file load's layout.
 */
#define MCFS_SELECT_ALIGN 256

/*
 * Slices (mcfs_select_slices, mcfs_load_tensors_sliced): of each selected
 * tensor that `pattern` names or matches (the matching rules above), only
 * the elements [start, stop) along dimension `dim` - what safetensors'
 * get_slice(name)[:, ..., start:stop] gives, bitwise, in row-major order.
 *   world == 0: an explicit slice. stop is clamped to the dimension's size
 *     and start to stop (UINT64_MAX: to the end). The pattern must select
 *     some tensor of the selection (-ENOENT otherwise).
 *   world > 0: a tensor-parallel plan entry. The slice is rank's shard of
 *     world (mcfs_shard_bounds); the pattern need not match anything, so
 *     that one plan serves every file of a model.
 * dim < 0 counts from the end. An explicit slice wins over a plan entry for
 * a tensor both select; two explicit ones (or two plan entries) that
 * select a tensor with different slices, a dim the tensor lacks, rank >= world, or a slice of a
 * dtype of less than a byte (F4, F6) are -EINVAL. Tensors that no entry
 * selects are loaded whole.
 *
 * Layout: a sliced tensor is a range of its own at the next offset aligned to
 * MCFS_SELECT_ALIGN, after the tensors before it in the file; whole tensors
 * keep the runs described above. A slice along dim 0 is one contiguous range;
 * along dim d > 0 it is one strided range (count, src_stride: see
 * <mcfs/mcfs_ioctl.h>), so that only the slice's bytes are copied.
 */
struct mcfs_slice {
	const char *pattern; /* a tensor's name or a glob */
	int32_t dim;	     /* the dimension; negative: from the end */
	uint32_t world;	     /* 0: [start, stop) below; else a plan entry */
	uint64_t start;	     /* world == 0: first element along dim */
	uint64_t stop;	     /* world == 0: one past the last (clamped) */
	uint32_t rank;	     /* world > 0: this process's shard, 0 .. world - 1 */
	uint32_t pad;
};

/* What a selection took of one tensor. */
struct mcfs_cut {
	int32_t dim;	      /* -1: the whole tensor; else the dimension sliced */
	uint64_t start, stop; /* along dim: the result's shape is the tensor's with
				 shape[dim] = stop - start */
	uint64_t bytes;	      /* of the result, at the tensor's dst offset */
};

/*
 * [*start, *stop) of rank's shard of n elements split world ways: ceil(n /
 * world) elements each, the last ranks' shorter or empty when world does not
 * divide n (as torch.chunk splits). vLLM's linear layers require n to
 * divide; then every shard is n / world. (vLLM's VocabParallelEmbedding cuts
 * a vocabulary padded to a multiple of 64: use explicit slices there.) Can't
 * fail: rank >= world gives an empty shard at n, world 0 the whole.
 */
MCFS_API void mcfs_shard_bounds(uint64_t n, uint32_t rank, uint32_t world, uint64_t *start,
				uint64_t *stop);

struct mcfs_selection {
	const struct mcfs_st_header *header;   /* borrowed, or owned (mcfs_load_tensors) */
	size_t n;			       /* tensors selected */
	const struct mcfs_st_tensor **tensors; /* n, in file order; point into header */
	uint64_t *dst;			       /* n: buffer offset of each tensor */
	uint64_t bytes;			       /* buffer bytes the layout needs */
	uint64_t copy_bytes;		       /* bytes the ranges copy (bytes less padding) */
	size_t nranges;
	struct mcfs_range *ranges; /* nranges runs: file_off absolute, dst_off in the buffer */
	int owns_header;	   /* private: mcfs_selection_free frees header too */
	struct mcfs_cut *cuts;	   /* n: what was taken of each tensor (dim -1: all of it) */
};

/*
 * Selects the tensors of @h that the @npatterns names or globs in @patterns
 * select; @patterns == NULL selects every tensor. @h is borrowed and must
 * outlive the selection. Returns 0 with *out set (caller frees with
 * mcfs_selection_free), -ENOENT when some patterns select nothing (@err
 * names them all), -EINVAL for a NULL pattern, or -ENOMEM.
 */
MCFS_API int mcfs_select(const struct mcfs_st_header *h, const char *const *patterns,
			 size_t npatterns, struct mcfs_selection **out, char *err, size_t errlen);

/*
 * mcfs_select, with the @nslices slices of @slices (NULL: none) applied to
 * the selected tensors (see struct mcfs_slice). Returns 0 with *out set,
 * -ENOENT (@err names the patterns, of @patterns or of explicit slices,
 * that select nothing), -EINVAL (@err says which slice and why), -ENOMEM.
 */
MCFS_API int mcfs_select_slices(const struct mcfs_st_header *h, const char *const *patterns,
				size_t npatterns, const struct mcfs_slice *slices, size_t nslices,
				struct mcfs_selection **out, char *err, size_t errlen);

/* Frees a selection (and its header if it owns it). Accepts NULL. */
MCFS_API void mcfs_selection_free(struct mcfs_selection *s);

/*
 * Copies the selection @s of the file open at @fd into @buf (from its start;
 * @size bytes usable, 0 = to the allocation's end). One ioctl carries at most
 * MCFS_LOAD_MAX_RANGES ranges, so a selection of more runs is sent in several
 * requests, in file order; the daemon keeps the buffer's IPC mapping open
 * between them and closes it after the last when @flags has
 * MCFS_LOAD_F_CLOSE (after a failure too). *bytes (may be NULL) receives the
 * bytes copied. Returns 0 or a negative errno (the daemon's).
 */
MCFS_API int mcfs_load_selection(int fd, const struct mcfs_devbuf *buf, uint64_t size,
				 const struct mcfs_selection *s, unsigned flags, uint64_t *bytes);

/*
 * One call: the tensors of the safetensors file at @path that @patterns
 * select (@npatterns names or globs; NULL: all) into the device memory at
 * @dptr, which has room for @capacity bytes. On success returns the bytes
 * copied and, if @out is not NULL, the selection in *out (with the header it
 * owns: names, dtypes, shapes and each tensor's offset in the buffer; caller
 * frees with mcfs_selection_free). On failure returns a negative errno with
 * a one-line reason in @err (may be NULL): -ENOENT naming the patterns that
 * select nothing, -ENOSPC when the buffer is too small for the selection,
 * and mcfs_load_file()'s errors.
 */
MCFS_API int64_t mcfs_load_tensors(const char *path, const char *const *patterns, size_t npatterns,
				   void *dptr, uint64_t capacity, struct mcfs_selection **out,
				   char *err, size_t errlen);

/*
 * mcfs_load_tensors with slices (struct mcfs_slice; @slices NULL: none):
 * each sliced tensor's result lies at its dst offset, (*out)->cuts says its
 * dimension and bounds. Returns the bytes copied (only the slices' bytes for
 * sliced tensors), or mcfs_load_tensors' errors and -EINVAL for a bad slice.
 * A tensor-parallel rank of a Llama model, say, passes
 *   {"*.q_proj.weight", 0, 2, 0, 0, rank}, ... {"*.o_proj.weight", 1, 2, 0, 0, rank}
 * (column-parallel weights on dim 0, row-parallel ones on dim 1, world 2).
 */
MCFS_API int64_t mcfs_load_tensors_sliced(const char *path, const char *const *patterns,
					  size_t npatterns, const struct mcfs_slice *slices,
					  size_t nslices, void *dptr, uint64_t capacity,
					  struct mcfs_selection **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
