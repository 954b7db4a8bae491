"""Device pointer -> CUDA IPC handle, through the driver library (ctypes).

Every CUDA runtime in the process (PyTorch's too) shares the driver's primary
context, so a handle taken here names the caller's allocation. The primary
context is pushed for the calls and popped after. PyTorch's own
`_share_cuda_()` is not used: it also registers the block for cross-process
reference counting, which would keep the buffer alive after it is freed.
"""
import ctypes
import errno
import threading

_PTR_DEVICE_ORDINAL = 9
_PTR_IS_LEGACY_IPC_CAPABLE = 10
_PTR_RANGE_START_ADDR = 11
_PTR_RANGE_SIZE = 12

_lock = threading.Lock()
_lib = None


class DevBuf:
    """What the daemon needs to reach a device buffer."""

    def __init__(self, handle, uuid, device, offset, size):
        self.handle, self.uuid, self.device, self.offset, self.size = (handle, uuid, device,
                                                                        offset, size)


def _driver():
    global _lib
    with _lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise OSError(errno.ENODEV, "no CUDA driver (libcuda.so.1): %s" % e) from None
            if lib.cuInit(0) != 0:
                raise OSError(errno.ENODEV, "cuInit failed")
            _lib = lib
        return _lib


def _attr(lib, ctype, attr, ptr):
    v = ctype(0)
    rc = lib.cuPointerGetAttribute(ctypes.byref(v), attr, ctypes.c_uint64(ptr))
    if rc != 0:
        raise OSError(errno.ENODEV, "cuPointerGetAttribute(%d) failed with CUDA error %d"
                      % (attr, rc))
    return v.value


def devbuf_from_ptr(ptr):
    """Describes the device memory at integer address `ptr`.

    Raises OSError(ENODEV) without a driver or for non-device memory, and
    OSError(EOPNOTSUPP) for memory that legacy CUDA IPC cannot export
    (cuMemCreate/VMM allocations such as PyTorch's expandable_segments).
    """
    lib = _driver()
    ordinal = _attr(lib, ctypes.c_int, _PTR_DEVICE_ORDINAL, ptr)
    dev = ctypes.c_int(0)
    ctx = ctypes.c_void_p(0)
    if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        raise OSError(errno.ENODEV, "cuDeviceGet(%d) failed" % ordinal)
    if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
        raise OSError(errno.ENODEV, "cannot retain the primary context of device %d" % ordinal)
    try:
        if lib.cuCtxPushCurrent_v2(ctx) != 0:
            raise OSError(errno.ENODEV, "cannot make device %d current" % ordinal)
        try:
            if not _attr(lib, ctypes.c_int, _PTR_IS_LEGACY_IPC_CAPABLE, ptr):
                raise OSError(errno.EOPNOTSUPP,
                              "device memory at %#x cannot be exported with CUDA IPC (a "
                              "cuMemCreate/VMM allocation, e.g. PYTORCH_CUDA_ALLOC_CONF="
                              "expandable_segments:True; use the default allocator)" % ptr)
            base = _attr(lib, ctypes.c_uint64, _PTR_RANGE_START_ADDR, ptr)
            size = _attr(lib, ctypes.c_size_t, _PTR_RANGE_SIZE, ptr)
            handle = (ctypes.c_uint8 * 64)()
            rc = lib.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base))
            if rc != 0:
                raise OSError(errno.EOPNOTSUPP, "cuIpcGetMemHandle failed with CUDA error %d"
                              % rc)
            uuid = (ctypes.c_uint8 * 16)()
            get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
            if get_uuid(ctypes.byref(uuid), dev) != 0:
                raise OSError(errno.ENODEV, "cannot read the uuid of device %d" % ordinal)
        finally:
            popped = ctypes.c_void_p(0)
            lib.cuCtxPopCurrent_v2(ctypes.byref(popped))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(dev)
    return DevBuf(bytes(handle), bytes(uuid), ordinal, ptr - base, size - (ptr - base))
