"""The ioctl ABI of an mcfs mount, mirrored from include/mcfs/mcfs_ioctl.h with ctypes.

The sizes are part of the ABI and are asserted at import, so a drift between
this file and the C header fails loudly instead of sending a misread struct.
"""
import ctypes
import errno
import os

ABI = 3
IPC_HANDLE_SIZE = 64
LOAD_MAX_RANGES = 384
LOAD_F_CLOSE = 0x1
BIND_F_PROVE = 0x1
BIND_NONCE_SIZE = 16


class Range(ctypes.Structure):
    _fields_ = [("file_off", ctypes.c_uint64), ("len", ctypes.c_uint64),
                ("dst_off", ctypes.c_uint64), ("count", ctypes.c_uint64),
                ("src_stride", ctypes.c_uint64)]


class LoadReq(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ipc_handle", ctypes.c_uint8 * IPC_HANDLE_SIZE),
        ("device_uuid", ctypes.c_uint8 * 16),
        ("device", ctypes.c_int32),
        ("nranges", ctypes.c_uint32),
        ("dst_offset", ctypes.c_uint64),
        ("dst_size", ctypes.c_uint64),
        ("ranges", Range * LOAD_MAX_RANGES),
        ("bytes", ctypes.c_uint64),
        ("ns", ctypes.c_uint64),
        ("blocks", ctypes.c_uint64),
        ("data_offset", ctypes.c_uint64),
        ("unpinned", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 3),
    ]


class PrefetchReq(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("blocks_started", ctypes.c_uint64),
        ("blocks_cached", ctypes.c_uint64),
        ("blocks_total", ctypes.c_uint64),
        ("next_offset", ctypes.c_uint64),
    ]


class Info(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("daemon_abi", ctypes.c_uint32),
        ("gpu_ok", ctypes.c_uint32),
        ("devices", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("block_size", ctypes.c_uint64),
        ("ram_bytes", ctypes.c_uint64),
        ("pinned_bytes", ctypes.c_uint64),
        ("reason", ctypes.c_char * 256),
    ]


class BindReq(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ipc_handle", ctypes.c_uint8 * IPC_HANDLE_SIZE),
        ("device_uuid", ctypes.c_uint8 * 16),
        ("device", ctypes.c_int32),
        ("bound", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("nonce", ctypes.c_uint8 * BIND_NONCE_SIZE),
    ]


assert ctypes.sizeof(Range) == 40
assert ctypes.sizeof(LoadReq) == 15536
assert ctypes.sizeof(PrefetchReq) == 56
assert ctypes.sizeof(Info) == 304
assert ctypes.sizeof(BindReq) == 120


def _iowr(typ, nr, size):
    # asm-generic/ioctl.h: dir (2 bits, read|write = 3) << 30 | size << 16 | type << 8 | nr
    return (3 << 30) | (size << 16) | (ord(typ) << 8) | nr


IOC_LOAD = _iowr("m", 0x01, ctypes.sizeof(LoadReq))
IOC_PREFETCH = _iowr("m", 0x02, ctypes.sizeof(PrefetchReq))
IOC_INFO = _iowr("m", 0x03, ctypes.sizeof(Info))
IOC_BIND = _iowr("m", 0x04, ctypes.sizeof(BindReq))

# What each errno means for a load (include/mcfs/mcfs_ioctl.h).
LOAD_ERRORS = {
    errno.EPROTO: "the mcfs daemon speaks another ioctl ABI version",
    errno.ENOTTY: "not an mcfs file (or an mcfs too old for the GPU path)",
    errno.EINVAL: "malformed load request",
    errno.ERANGE: "a byte range past the end of the file",
    errno.EBADMSG: "not a valid safetensors file",
    errno.ENODEV: "the mcfs daemon has no usable GPU for this device",
    errno.ENXIO: "the daemon could not open the buffer's CUDA IPC handle",
    errno.EOVERFLOW: "a destination past the end of the device buffer",
    errno.EPERM: "the daemon could not confirm that this process can write the device buffer",
    errno.EINTR: "interrupted",
    errno.EIO: "the store failed while reading the file",
    errno.ENOMEM: "the daemon is out of memory",
}


_libc = ctypes.CDLL(None, use_errno=True)
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_libc.ioctl.restype = ctypes.c_int


def ioctl(fd, cmd, struct):
    """Sends `struct` (read and written in place). Raises OSError.

    Through libc with ctypes, not fcntl.ioctl. With fcntl.ioctl and a load
    request (15 KiB) the caller's other threads stood still for the whole
    load on CPython 3.12 (a server thread of the same process that the daemon
    was reading from never ran: a deadlock); CPython copies buffers of up to
    1 KiB and releases the GIL around those only, in the versions seen. Newer
    CPythons also retry an ioctl that a signal interrupted, which would
    restart a load that Ctrl-C stopped. ctypes releases the GIL and retries
    nothing: EINTR is raised, as the caller's signal handler expects."""
    if _libc.ioctl(fd, cmd, ctypes.byref(struct)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return struct


def load_request(db, ranges, flags, dst_size):
    """A LoadReq for the device buffer `db` (a _cuda.DevBuf) of `dst_size` bytes
    and the `ranges` (at most LOAD_MAX_RANGES): (file_off, len, dst_off), or
    (file_off, len, dst_off, count, src_stride) for `count` rows of `len` bytes
    `src_stride` apart in the file, packed in the buffer (a tensor slice)."""
    if not 0 < len(ranges) <= LOAD_MAX_RANGES:
        raise ValueError("%d ranges in one load (1 to %d)" % (len(ranges), LOAD_MAX_RANGES))
    req = LoadReq()
    req.abi_version = ABI
    req.flags = flags
    req.ipc_handle[:] = db.handle
    req.device_uuid[:] = db.uuid
    req.device = db.device
    req.nranges = len(ranges)
    for i, r in enumerate(ranges):
        req.ranges[i].file_off = r[0]
        req.ranges[i].len = r[1]
        req.ranges[i].dst_off = r[2]
        if len(r) > 3:
            req.ranges[i].count = r[3]
            req.ranges[i].src_stride = r[4]
    req.dst_offset = db.offset
    req.dst_size = dst_size
    return req


def info(fd):
    """MCFS_IOC_INFO on an open fd; raises OSError (ENOTTY when not mcfs)."""
    i = Info()
    i.abi_version = ABI
    return ioctl(fd, IOC_INFO, i)


def bind(fd, db, write):
    """Binds this process to the device buffer `db` (a _cuda.DevBuf) through
    MCFS_IOC_BIND: `write(nonce)` must put the daemon's 16 bytes at the start
    of the buffer (which a load then overwrites). Raises OSError: EPERM when
    the daemon read back other bytes."""
    if db.size < BIND_NONCE_SIZE:
        raise OSError(errno.EINVAL, "a device buffer of %d bytes is too small to bind (16 at "
                      "least)" % db.size)
    req = BindReq()
    req.abi_version = ABI
    req.ipc_handle[:] = db.handle
    req.device_uuid[:] = db.uuid
    req.device = db.device
    req.offset = db.offset
    ioctl(fd, IOC_BIND, req)
    if req.bound:
        return
    write(bytes(req.nonce))
    req.flags = BIND_F_PROVE
    ioctl(fd, IOC_BIND, req)
