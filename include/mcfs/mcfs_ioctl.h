/*
 * mcfs_ioctl.h - the public ioctl ABI of an mcfs mount, shared by the daemon
 * (fs/ioctl.c) and every client (gpu/libmcfs, gpu/python/mcfs, `mcfs
 * prefetch`). Plain C with fixed-width fields only, so that C, ctypes and a
 * 32-bit caller all see the same layout; the sizes are asserted below and in
 * the Python package.
 *
 * It is the one public header of the tree: installed as <mcfs/mcfs_ioctl.h>
 * (cmake --install), and included as "mcfs/mcfs_ioctl.h" with include/ on
 * the include path (the mcfs_abi target). The daemon's GPU module never sees
 * it: fs/ioctl.c translates these structs to gpu/'s own (gpu/gpu.h) and back.
 *
 * FUSE passes "restricted" ioctls only: the command must encode its size and
 * direction (_IOWR), the struct is copied in and back out whole, and it must
 * fit in 16383 bytes. So every request is one fixed-size struct, and tensor
 * bytes never travel through it: MCFS_IOC_LOAD carries a CUDA IPC handle of a
 * device buffer the caller owns, and the daemon copies the file's blocks from
 * its (pinned) RAM tier straight into that buffer.
 *
 * Versioning: every struct starts with abi_version. The daemon refuses any
 * other version than MCFS_IOCTL_ABI with EPROTO, so an old client gets a clear
 * error rather than a misread struct. A change of layout or meaning bumps the
 * version. MCFS_IOC_INFO answers whatever the version, so a client can ask
 * which one the daemon speaks.
 *
 * Errors (ioctl() returns -1 and sets errno):
 *   EPROTO     abi_version is not MCFS_IOCTL_ABI.
 *   ENOTTY     not an mcfs ioctl (or an older daemon that lacks it).
 *   EINVAL     malformed request: unknown flags, nranges too large, a range
 *              whose end overflows, a strided range (count > 1) whose
 *              src_stride is less than its len. (A safetensors file with an empty data
 *              section loads 0 bytes and succeeds.)
 *   ERANGE     a file range past the end of the file.
 *   EBADMSG    no range given and the file is not a valid safetensors file
 *              (its header length does not fit the file).
 *   ENODEV     no usable GPU in the daemon: no driver, no device, the
 *              requested device is not visible to the daemon, or its context
 *              was lost. MCFS_IOC_INFO's reason says which.
 *   ENXIO      the IPC handle could not be opened (not a live allocation of
 *              another process on that device, or already freed).
 *   EOVERFLOW  a destination past the end of the device allocation.
 *   EPERM      MCFS_IOC_LOAD: the calling process is not bound to the buffer
 *              (see MCFS_IOC_BIND); MCFS_IOC_BIND with the PROVE flag: the
 *              16 bytes at the offset are not the last nonce handed to this
 *              process for this buffer.
 *   EINTR      the caller was interrupted (Ctrl-C); the load stopped between
 *              blocks, the buffer holds a prefix of the data.
 *   EIO        the store failed for a block (the daemon logs path and block).
 *   ENOMEM     the daemon could not allocate streams or bookkeeping.
 */
#ifndef MCFS_IOCTL_H
#define MCFS_IOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>

/* 2: loads need a binding first (MCFS_IOC_BIND).
 * 3: a range may be strided (count, src_stride): tensor slices. */
#define MCFS_IOCTL_ABI 3

/* Bytes of a cudaIpcMemHandle_t / CUipcMemHandle (CUDA_IPC_HANDLE_SIZE). */
#define MCFS_IPC_HANDLE_SIZE 64

/* Ranges per load request: 384 * 40 bytes keeps the struct near 15 KiB,
 * under FUSE's 16383-byte limit. A loader with more tensors than this either
 * loads the whole data section (nranges = 0), coalesces adjacent tensors, or
 * sends several requests. */
#define MCFS_LOAD_MAX_RANGES 384

/* Flags of struct mcfs_load_req. */
#define MCFS_LOAD_F_CLOSE                                                                          \
	0x1u /* close the IPC mapping after this load: the caller                                  \
		will not send this buffer again (one-shot loads) */
#define MCFS_LOAD_F_ALL MCFS_LOAD_F_CLOSE

/*
 * One copy of `count` rows of `len` bytes each (count 0 means 1): row i is
 * the file bytes [file_off + i * src_stride, + len), and goes to buffer +
 * dst_offset + dst_off + i * len (the rows land packed, one after the
 * other). With count <= 1, src_stride is ignored and the range is the plain
 * file bytes [file_off, file_off + len). A strided range (count > 1) needs
 * src_stride >= len (EINVAL otherwise); its last byte, file_off + (count - 1)
 * * src_stride + len, must lie in the file (ERANGE). A slice of a row-major
 * tensor along a dimension d > 0 is one strided range: count = the product
 * of the dimensions before d, len = the slice's bytes per such row,
 * src_stride = the tensor's bytes per such row. Only the rows' bytes cross
 * PCIe (cudaMemcpy2DAsync from the pinned RAM tier).
 */
struct mcfs_range {
	uint64_t file_off;
	uint64_t len;
	uint64_t dst_off;
	uint64_t count;
	uint64_t src_stride;
};

struct mcfs_load_req {
	/* in */
	uint32_t abi_version;			  /* MCFS_IOCTL_ABI */
	uint32_t flags;				  /* MCFS_LOAD_F_* */
	uint8_t ipc_handle[MCFS_IPC_HANDLE_SIZE]; /* of the allocation (its base) */
	uint8_t device_uuid[16];		  /* the buffer's GPU; all zero: use device */
	int32_t device;				  /* ordinal, used only without a uuid */
	uint32_t nranges;			  /* 0: the whole safetensors data section */
	uint64_t dst_offset;			  /* buffer start within the allocation */
	uint64_t dst_size;			  /* bytes usable from dst_offset; 0 = to the
						     allocation's end */
	struct mcfs_range ranges[MCFS_LOAD_MAX_RANGES];
	/* out (valid when the ioctl returns 0) */
	uint64_t bytes;	      /* bytes copied to the device */
	uint64_t ns;	      /* time spent in the daemon, nanoseconds */
	uint64_t blocks;      /* cache blocks copied (a block shared by two ranges counts twice) */
	uint64_t data_offset; /* file offset of the safetensors data section (nranges = 0) */
	uint64_t unpinned;    /* blocks copied from memory that was not pinned (yet) */
	uint64_t reserved[3];
};

/*
 * Binding (ABI 2): the daemon writes into a device buffer only for a process
 * that showed it can write there itself, so that another process's IPC
 * handle bytes are of no use to a caller. Two calls, once per buffer (an
 * allocation and device) and process, before its first load:
 *   1. flags = 0: the daemon answers `nonce`, 16 random bytes for this
 *      process and buffer (or `bound` = 1: this process is bound already,
 *      and there is nothing more to do);
 *   2. the caller writes the nonce into its buffer at `offset` (bytes from the
 *      allocation's base; 16 bytes it is about to load into anyway), then
 *      calls again with MCFS_BIND_F_PROVE, the same offset and the nonce: the
 *      daemon reads the 16 bytes back, and binds the process to the buffer if
 *      they are the nonce it handed out (EPERM if not). Each nonce is good for
 *      one proof; threads of one process may bind at once, each with its own.
 * The binding holds for every thread of the process until it exits. The
 * process is the caller's as the daemon's pid namespace sees it: a caller in
 * a pid namespace the daemon cannot see gets EPERM.
 */
#define MCFS_BIND_F_PROVE 0x1u
#define MCFS_BIND_NONCE_SIZE 16

struct mcfs_bind_req {
	/* in */
	uint32_t abi_version;			  /* MCFS_IOCTL_ABI */
	uint32_t flags;				  /* 0 or MCFS_BIND_F_PROVE */
	uint8_t ipc_handle[MCFS_IPC_HANDLE_SIZE]; /* of the allocation (its base) */
	uint8_t device_uuid[16];		  /* the buffer's GPU; all zero: use device */
	int32_t device;				  /* ordinal, used only without a uuid */
	uint32_t bound;				  /* out (flags = 0): 1 if bound already */
	uint64_t offset;			  /* PROVE: where the nonce was written */
	uint8_t nonce[MCFS_BIND_NONCE_SIZE];	  /* out (flags = 0); in (PROVE) */
};

/* Starts fetches of the blocks of [offset, offset + length) without waiting. */
struct mcfs_prefetch_req {
	/* in */
	uint32_t abi_version; /* MCFS_IOCTL_ABI */
	uint32_t flags;	      /* 0 */
	uint64_t offset;      /* file bytes; rounded down to a block */
	uint64_t length;      /* 0 = to the end of the file */
	/* out */
	uint64_t blocks_started; /* fetches this call started */
	uint64_t blocks_cached;	 /* already cached or being fetched */
	uint64_t blocks_total;	 /* blocks in [offset, offset + length) */
	uint64_t next_offset;	 /* where to call again; == end when all were handled.
				    Less than the end when the prefetch budget is full. */
};

/* What the daemon offers; answered whatever abi_version says. */
struct mcfs_info {
	/* in */
	uint32_t abi_version; /* the client's, informative */
	uint32_t flags;	      /* 0 */
	/* out */
	uint32_t daemon_abi; /* MCFS_IOCTL_ABI of the daemon */
	uint32_t gpu_ok;     /* 1 if MCFS_IOC_LOAD can work */
	uint32_t devices;    /* CUDA devices the daemon sees */
	uint32_t pad;
	uint64_t block_size;   /* bytes */
	uint64_t ram_bytes;    /* RAM tier size */
	uint64_t pinned_bytes; /* of which registered with CUDA so far */
	char reason[256];      /* why gpu_ok is 0, or a summary; NUL-terminated */
};

#define MCFS_IOC_LOAD _IOWR('m', 0x01, struct mcfs_load_req)
#define MCFS_IOC_PREFETCH _IOWR('m', 0x02, struct mcfs_prefetch_req)
#define MCFS_IOC_INFO _IOWR('m', 0x03, struct mcfs_info)
#define MCFS_IOC_BIND _IOWR('m', 0x04, struct mcfs_bind_req)

#ifdef __cplusplus
#define MCFS_ABI_ASSERT static_assert
#else
#define MCFS_ABI_ASSERT _Static_assert
#endif

/* Layout is the ABI: these sizes are part of it (checked by the Python package too). */
MCFS_ABI_ASSERT(sizeof(struct mcfs_range) == 40, "mcfs_range layout");
MCFS_ABI_ASSERT(sizeof(struct mcfs_load_req) == 15536, "mcfs_load_req layout");
MCFS_ABI_ASSERT(sizeof(struct mcfs_load_req) <= 16383, "FUSE restricted ioctl size");
MCFS_ABI_ASSERT(sizeof(struct mcfs_prefetch_req) == 56, "mcfs_prefetch_req layout");
MCFS_ABI_ASSERT(sizeof(struct mcfs_info) == 304, "mcfs_info layout");
MCFS_ABI_ASSERT(sizeof(struct mcfs_bind_req) == 120, "mcfs_bind_req layout");

#endif
