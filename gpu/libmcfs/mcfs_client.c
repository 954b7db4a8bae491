/*
 * mcfs_client.c - libmcfs: the ioctl calls of the GPU fast path, the one-call
 * loads (a whole file, or the tensors a selection names: select.c), and the
 * one step that needs CUDA (turning a device pointer into an IPC handle).
 *
 * CUDA is reached through the driver library, libcuda.so.1, opened with
 * dlopen on first use: it is present wherever a GPU is, and every CUDA
 * runtime in the process (PyTorch's included) shares its primary context, so
 * a handle taken here names the caller's allocation whichever runtime made
 * it. The driver's types are declared here (a handful of plain values)
 * rather than taken from cuda.h, so the library builds with no toolkit.
 * The primary context is pushed for the calls and popped after: the
 * caller's thread state is left as it was.
 */
#define _GNU_SOURCE
#include "mcfs_client.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Driver API values (cuda.h): stable parts of the driver ABI. */
#define CU_SUCCESS 0
#define CU_PTR_DEVICE_ORDINAL 9
#define CU_PTR_IS_LEGACY_IPC_CAPABLE 10
#define CU_PTR_RANGE_START_ADDR 11
#define CU_PTR_RANGE_SIZE 12

typedef unsigned long long cu_ptr;

static struct {
	pthread_once_t once;
	int err; /* 0 once loaded, else -ENODEV */
	int (*init)(unsigned);
	int (*ptr_attr)(void *data, int attr, cu_ptr p);
	int (*ipc_get)(void *handle, cu_ptr p);
	int (*dev_get)(int *dev, int ordinal);
	int (*uuid)(void *uuid, int dev);
	int (*retain)(void **ctx, int dev);
	int (*release)(int dev);
	int (*push)(void *ctx);
	int (*pop)(void **ctx);
	int (*htod)(cu_ptr dst, const void *src, size_t n);
} cu = {.once = PTHREAD_ONCE_INIT};

static void load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	cu.err = -ENODEV;
	if (!lib)
		return;
	*(void **)&cu.init = dlsym(lib, "cuInit");
	*(void **)&cu.ptr_attr = dlsym(lib, "cuPointerGetAttribute");
	*(void **)&cu.ipc_get = dlsym(lib, "cuIpcGetMemHandle");
	*(void **)&cu.dev_get = dlsym(lib, "cuDeviceGet");
	*(void **)&cu.uuid = dlsym(lib, "cuDeviceGetUuid_v2");
	if (!cu.uuid)
		*(void **)&cu.uuid = dlsym(lib, "cuDeviceGetUuid");
	*(void **)&cu.retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
	*(void **)&cu.release = dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
	*(void **)&cu.push = dlsym(lib, "cuCtxPushCurrent_v2");
	*(void **)&cu.pop = dlsym(lib, "cuCtxPopCurrent_v2");
	*(void **)&cu.htod = dlsym(lib, "cuMemcpyHtoD_v2");
	if (!cu.init || !cu.ptr_attr || !cu.ipc_get || !cu.dev_get || !cu.uuid || !cu.retain ||
	    !cu.release || !cu.push || !cu.pop || !cu.htod || cu.init(0) != CU_SUCCESS)
		return;
	cu.err = 0;
}

int mcfs_info(int fd, struct mcfs_info *info)
{
	memset(info, 0, sizeof(*info));
	info->abi_version = MCFS_IOCTL_ABI;
	if (ioctl(fd, MCFS_IOC_INFO, info) < 0)
		return -errno;
	return 0;
}

/* The calls that need a context, under the device's primary context. */
static int describe(cu_ptr p, int ordinal, struct mcfs_devbuf *out)
{
	cu_ptr base = 0;
	size_t size = 0;
	int capable = 0, dev;
	int rc = 0;

	if (cu.ptr_attr(&capable, CU_PTR_IS_LEGACY_IPC_CAPABLE, p) != CU_SUCCESS || !capable)
		return -EOPNOTSUPP;
	if (cu.ptr_attr(&base, CU_PTR_RANGE_START_ADDR, p) != CU_SUCCESS ||
	    cu.ptr_attr(&size, CU_PTR_RANGE_SIZE, p) != CU_SUCCESS || p < base || p - base > size)
		return -ENODEV;
	if (cu.ipc_get(out->handle, base) != CU_SUCCESS)
		rc = -EOPNOTSUPP;
	if (rc == 0 &&
	    (cu.dev_get(&dev, ordinal) != CU_SUCCESS || cu.uuid(out->uuid, dev) != CU_SUCCESS))
		rc = -ENODEV;
	out->device = ordinal;
	out->offset = p - base;
	out->size = size - (p - base);
	return rc;
}

int mcfs_devbuf_from_ptr(const void *dptr, struct mcfs_devbuf *out)
{
	cu_ptr p = (cu_ptr)(uintptr_t)dptr;
	void *ctx = NULL, *popped = NULL;
	int ordinal = -1, dev, rc;

	memset(out, 0, sizeof(*out));
	pthread_once(&cu.once, load_driver);
	if (cu.err)
		return cu.err;
	if (cu.ptr_attr(&ordinal, CU_PTR_DEVICE_ORDINAL, p) != CU_SUCCESS || ordinal < 0)
		return -ENODEV;
	if (cu.dev_get(&dev, ordinal) != CU_SUCCESS || cu.retain(&ctx, dev) != CU_SUCCESS)
		return -ENODEV;
	if (cu.push(ctx) != CU_SUCCESS) {
		cu.release(dev);
		return -ENODEV;
	}
	rc = describe(p, ordinal, out);
	cu.pop(&popped);
	cu.release(dev);
	return rc;
}

/* Writes @n bytes of @src to device memory at @p of device @ordinal. */
static int write_device(cu_ptr p, int ordinal, const void *src, size_t n)
{
	void *ctx = NULL, *popped = NULL;
	int dev, rc = 0;

	pthread_once(&cu.once, load_driver);
	if (cu.err)
		return cu.err;
	if (cu.dev_get(&dev, ordinal) != CU_SUCCESS || cu.retain(&ctx, dev) != CU_SUCCESS)
		return -ENODEV;
	if (cu.push(ctx) != CU_SUCCESS) {
		cu.release(dev);
		return -ENODEV;
	}
	if (cu.htod(p, src, n) != CU_SUCCESS)
		rc = -ENODEV;
	cu.pop(&popped);
	cu.release(dev);
	return rc;
}

int mcfs_bind(int fd, const struct mcfs_devbuf *buf, void *dptr, uint64_t size)
{
	struct mcfs_bind_req req;
	int rc;

	if (size < MCFS_BIND_NONCE_SIZE || buf->size < MCFS_BIND_NONCE_SIZE)
		return -EINVAL;
	memset(&req, 0, sizeof(req));
	req.abi_version = MCFS_IOCTL_ABI;
	memcpy(req.ipc_handle, buf->handle, sizeof(req.ipc_handle));
	memcpy(req.device_uuid, buf->uuid, sizeof(req.device_uuid));
	req.device = buf->device;
	req.offset = buf->offset;
	if (ioctl(fd, MCFS_IOC_BIND, &req) < 0)
		return -errno;
	if (req.bound)
		return 0;
	rc = write_device((cu_ptr)(uintptr_t)dptr, buf->device, req.nonce, sizeof(req.nonce));
	if (rc < 0)
		return rc;
	req.flags = MCFS_BIND_F_PROVE;
	if (ioctl(fd, MCFS_IOC_BIND, &req) < 0)
		return -errno;
	return 0;
}

int mcfs_load(int fd, const struct mcfs_devbuf *buf, uint64_t size, const struct mcfs_range *ranges,
	      unsigned n, unsigned flags, struct mcfs_load_req *stats)
{
	struct mcfs_load_req req; /* 15 KiB on the caller's stack: nothing allocated */

	if (n > MCFS_LOAD_MAX_RANGES)
		return -EINVAL;
	memset(&req, 0, sizeof(req));
	req.abi_version = MCFS_IOCTL_ABI;
	req.flags = flags;
	memcpy(req.ipc_handle, buf->handle, sizeof(req.ipc_handle));
	memcpy(req.device_uuid, buf->uuid, sizeof(req.device_uuid));
	req.device = buf->device;
	req.nranges = n;
	req.dst_offset = buf->offset;
	req.dst_size = size ? size : buf->size;
	if (n)
		memcpy(req.ranges, ranges, n * sizeof(*ranges));
	if (ioctl(fd, MCFS_IOC_LOAD, &req) < 0)
		return -errno;
	if (stats)
		memcpy(stats, &req, sizeof(req));
	return 0;
}

static int64_t failf(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int64_t failf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* What every one-call load checks first: an mcfs mount whose daemon speaks
 * our ABI and has a usable GPU. Returns 0 or a negative errno with @err set. */
static int check_daemon(int fd, const char *path, char *err, size_t errlen)
{
	struct mcfs_info info;
	int rc;

	rc = mcfs_info(fd, &info);
	if (rc < 0)
		return (int)failf(err, errlen, rc, "%s: not on an mcfs mount (%s)", path,
				  strerror(-rc));
	if (info.daemon_abi != MCFS_IOCTL_ABI)
		return (int)failf(err, errlen, -EPROTO,
				  "%s: mcfs daemon speaks ioctl ABI %u, this "
				  "library %u",
				  path, info.daemon_abi, MCFS_IOCTL_ABI);
	if (!info.gpu_ok)
		return (int)failf(err, errlen, -ENODEV, "%s: mcfs GPU path unavailable: %s", path,
				  info.reason);
	return 0;
}

static int64_t devbuf_failed(char *err, size_t errlen, int rc, const char *path)
{
	const char *why = strerror(-rc);

	if (rc == -EOPNOTSUPP)
		why = "memory cannot be exported with CUDA IPC";
	else if (rc == -EINVAL)
		why = "under 16 bytes, too small to bind to this process (MCFS_IOC_BIND)";
	else if (rc == -EPERM)
		why = "the daemon could not confirm that this process can write it";
	return failf(err, errlen, rc, "%s: device buffer cannot be used: %s", path, why);
}

static int64_t load_fd(int fd, const char *path, void *dptr, uint64_t capacity, char *err,
		       size_t errlen)
{
	struct mcfs_devbuf buf;
	unsigned char first8[8];
	uint64_t doff, len;
	struct stat st;
	ssize_t got;
	int rc;

	rc = check_daemon(fd, path, err, errlen);
	if (rc < 0)
		return rc;
	if (fstat(fd, &st) < 0)
		return failf(err, errlen, -errno, "%s: %s", path, strerror(errno));
	got = pread(fd, first8, sizeof(first8), 0);
	if (got != (ssize_t)sizeof(first8) ||
	    mcfs_st_data_offset(first8, (uint64_t)st.st_size, &doff) < 0)
		return failf(err, errlen, -EBADMSG, "%s: not a safetensors file", path);
	len = (uint64_t)st.st_size - doff;
	if (len > capacity)
		return failf(err, errlen, -ENOSPC, "%s: data section of %llu bytes, buffer of %llu",
			     path, (unsigned long long)len, (unsigned long long)capacity);
	rc = mcfs_devbuf_from_ptr(dptr, &buf);
	if (rc == 0 && len > 0)
		rc = mcfs_bind(fd, &buf, dptr, capacity);
	if (rc < 0)
		return devbuf_failed(err, errlen, rc, path);
	rc = mcfs_load(fd, &buf, capacity, NULL, 0, MCFS_LOAD_F_CLOSE, NULL);
	if (rc < 0)
		return failf(err, errlen, rc, "%s: load failed: %s", path, strerror(-rc));
	return (int64_t)len;
}

static int64_t load_tensors_fd(int fd, const char *path, const char *const *patterns,
			       size_t npatterns, const struct mcfs_slice *slices, size_t nslices,
			       void *dptr, uint64_t capacity, struct mcfs_selection **out,
			       char *err, size_t errlen)
{
	struct mcfs_selection *sel = NULL;
	struct mcfs_st_header *h = NULL;
	struct mcfs_devbuf buf;
	char why[512];
	uint64_t bytes;
	int rc;

	rc = check_daemon(fd, path, err, errlen);
	if (rc < 0)
		return rc;
	rc = mcfs_st_read_fd(fd, &h, why, sizeof(why));
	if (rc < 0)
		return failf(err, errlen, rc, "%s: %s", path, why);
	rc = mcfs_select_slices(h, patterns, npatterns, slices, nslices, &sel, why, sizeof(why));
	if (rc < 0) {
		mcfs_st_free(h);
		return failf(err, errlen, rc, "%s: %s", path, why);
	}
	sel->owns_header = 1;
	if (sel->bytes > capacity) {
		rc = (int)failf(err, errlen, -ENOSPC,
				"%s: the selection needs %llu bytes, buffer of %llu", path,
				(unsigned long long)sel->bytes, (unsigned long long)capacity);
		goto fail;
	}
	if (sel->nranges) {
		rc = mcfs_devbuf_from_ptr(dptr, &buf);
		if (rc == 0)
			rc = mcfs_bind(fd, &buf, dptr, capacity);
		if (rc < 0) {
			rc = (int)devbuf_failed(err, errlen, rc, path);
			goto fail;
		}
		rc = mcfs_load_selection(fd, &buf, capacity, sel, MCFS_LOAD_F_CLOSE, &bytes);
		if (rc < 0) {
			failf(err, errlen, rc, "%s: load failed: %s", path, strerror(-rc));
			goto fail;
		}
	}
	bytes = sel->copy_bytes;
	if (out)
		*out = sel;
	else
		mcfs_selection_free(sel);
	return (int64_t)bytes;
fail:
	mcfs_selection_free(sel);
	return rc;
}

int64_t mcfs_load_tensors(const char *path, const char *const *patterns, size_t npatterns,
			  void *dptr, uint64_t capacity, struct mcfs_selection **out, char *err,
			  size_t errlen)
{
	return mcfs_load_tensors_sliced(path, patterns, npatterns, NULL, 0, dptr, capacity, out,
					err, errlen);
}

int64_t mcfs_load_tensors_sliced(const char *path, const char *const *patterns, size_t npatterns,
				 const struct mcfs_slice *slices, size_t nslices, void *dptr,
				 uint64_t capacity, struct mcfs_selection **out, char *err,
				 size_t errlen)
{
	int64_t rc;
	int fd;

	if (out)
		*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no whole fetch at open */
	if (fd < 0)
		return failf(err, errlen, -errno, "%s: %s", path, strerror(errno));
	rc = load_tensors_fd(fd, path, patterns, npatterns, slices, nslices, dptr, capacity, out,
			     err, errlen);
	close(fd);
	return rc;
}

int64_t mcfs_load_file(const char *path, void *dptr, uint64_t capacity, char *err, size_t errlen)
{
	int64_t rc;
	int fd;

	if (err && errlen)
		err[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no whole fetch at open */
	if (fd < 0)
		return failf(err, errlen, -errno, "%s: %s", path, strerror(errno));
	rc = load_fd(fd, path, dptr, capacity, err, errlen);
	close(fd);
	return rc;
}
