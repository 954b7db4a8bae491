"""mcfs: load safetensors files from an mcfs mount straight into GPU memory.

    import mcfs
    tensors = mcfs.load_file("/models/llama/model-00001-of-00004.safetensors", device="cuda:0")

`load_file` returns what `safetensors.torch.load_file(path, device=...)` returns -
the same names, dtypes, shapes and bytes - but the tensors are views of one
device allocation that the mcfs daemon filled by DMA from its pinned RAM
tier: no tensor byte goes through the kernel's FUSE path or a pageable copy.

On a file outside mcfs, with no GPU (here or in the daemon), or for a
dtype the fast path does not lay out (F4, F6), it prints a one-line notice
on stderr and returns `safetensors.torch.load_file(path, device=device)`.

Pure Python over ctypes and fcntl: no build step. The ABI is mirrored in
_abi.py from include/mcfs/mcfs_ioctl.h.
"""
import errno
import os
import sys

from . import _abi
from ._header import Header, HeaderError, read as read_header, read_fd as read_header_fd
from ._header import parse as parse_header

__all__ = ["load_file", "info", "prefetch", "read_header", "parse_header", "Header",
           "HeaderError", "McfsError", "fast_path_reason"]

ABI = _abi.ABI

# safetensors dtype name -> torch dtype attribute name (None: not laid out here)
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


class McfsError(OSError):
    """A load that mcfs accepted to do and could not; errno says which case."""


def info(path_or_fd):
    """What the daemon behind a file offers, as a dict; None when not on mcfs."""
    fd = path_or_fd if isinstance(path_or_fd, int) else os.open(path_or_fd, os.O_RDONLY)
    try:
        i = _abi.info(fd)
    except OSError as e:
        if e.errno in (errno.ENOTTY, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise
    finally:
        if not isinstance(path_or_fd, int):
            os.close(fd)
    return {"daemon_abi": i.daemon_abi, "gpu_ok": bool(i.gpu_ok), "devices": i.devices,
            "block_size": i.block_size, "ram_bytes": i.ram_bytes,
            "pinned_bytes": i.pinned_bytes, "reason": i.reason.decode(errors="replace")}


def prefetch(path, offset=0, length=0):
    """Starts fetching [offset, offset+length) (0 = to EOF) into the daemon's cache.

    Returns (started, cached, total, next_offset); call again from next_offset
    while it is below the end (the daemon's prefetch budget was full).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        r = _abi.PrefetchReq(abi_version=_abi.ABI, offset=offset, length=length)
        _abi.ioctl(fd, _abi.IOC_PREFETCH, r)
        return r.blocks_started, r.blocks_cached, r.blocks_total, r.next_offset
    finally:
        os.close(fd)


def _torch_device(torch, device):
    if isinstance(device, int):
        return torch.device("cuda", device)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def fast_path_reason(fd, device, torch):
    """None if the fast path can load the file open at `fd` to `device`, else why not."""
    dev = _torch_device(torch, device)
    if dev.type != "cuda":
        return "device %s is not a CUDA device" % dev
    if not torch.cuda.is_available():
        return "no CUDA GPU in this process"
    try:
        i = _abi.info(fd)
    except OSError as e:
        return "not on an mcfs mount (%s)" % os.strerror(e.errno)
    if i.daemon_abi != _abi.ABI:
        return "the mcfs daemon speaks ioctl ABI %d, this package %d" % (i.daemon_abi, _abi.ABI)
    if not i.gpu_ok:
        return "mcfs GPU path unavailable: %s" % i.reason.decode(errors="replace")
    return None


def _notice(path, reason):
    sys.stderr.write("mcfs: %s: %s; loading with safetensors instead\n" % (path, reason))


def _fallback(path, device, reason):
    _notice(path, reason)
    import safetensors.torch as st
    if st.load_file is load_file:  # someone routed safetensors through us: no recursion
        with st.safe_open(path, framework="pt", device=device) as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    return st.load_file(path, device=device)


def _load_error(path, e):
    what = _abi.LOAD_ERRORS.get(e.errno, os.strerror(e.errno))
    return McfsError(e.errno, "mcfs: loading %s: %s" % (path, what))


def _views(torch, buf, header):
    out = {}
    for t in header.tensors:
        dt = getattr(torch, _TORCH_DTYPES[t.dtype])
        raw = buf[t.begin:t.end]
        if t.end == t.begin:
            out[t.name] = torch.empty(t.shape, dtype=dt, device=buf.device)
        elif t.begin % dt.itemsize == 0:
            out[t.name] = raw.view(dt).view(t.shape)
        else:
            # torch views need element-aligned offsets; a misaligned tensor is copied
            # on the device (safetensors files need not align their tensors).
            x = torch.empty(t.shape, dtype=dt, device=buf.device)
            x.view(-1).view(torch.uint8).copy_(raw)
            out[t.name] = x
    return {k: out[k] for k in sorted(out)}


def load_file(path, device="cuda:0"):
    """Loads a safetensors file into `device` memory; see the module docstring.

    Raises HeaderError for a malformed file, McfsError (an OSError) when the
    daemon refuses or fails the load (errno as in include/mcfs/mcfs_ioctl.h), and
    OSError(EOPNOTSUPP) when the buffer cannot be exported with CUDA IPC.
    """
    import torch

    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        reason = fast_path_reason(fd, device, torch)
        if reason is not None:
            return _fallback(path, device, reason)
        header = read_header_fd(fd)
        odd = sorted({t.dtype for t in header.tensors
                      if _TORCH_DTYPES.get(t.dtype) is None
                      or getattr(torch, _TORCH_DTYPES[t.dtype], None) is None})
        if odd:
            return _fallback(path, device, "dtype %s not laid out by mcfs" % ", ".join(odd))
        dev = _torch_device(torch, device)
        buf = torch.empty(max(header.data_len, 1), dtype=torch.uint8, device=dev)
        if header.data_len:
            _load_into(fd, path, torch, buf, header)
        return _views(torch, buf[:header.data_len], header)
    finally:
        os.close(fd)


def _load_into(fd, path, torch, buf, header):
    from ._cuda import devbuf_from_ptr

    db = devbuf_from_ptr(buf.data_ptr())
    req = _abi.LoadReq()
    req.abi_version = _abi.ABI
    req.flags = _abi.LOAD_F_CLOSE  # one-shot: the daemon keeps no mapping of this buffer
    req.ipc_handle[:] = db.handle
    req.device_uuid[:] = db.uuid
    req.device = db.device
    req.nranges = 1
    req.ranges[0].file_off = header.data_offset
    req.ranges[0].len = header.data_len
    req.ranges[0].dst_off = 0
    req.dst_offset = db.offset
    req.dst_size = header.data_len
    # The allocator may hand out memory that queued kernels still use: let them finish.
    torch.cuda.current_stream(buf.device).synchronize()
    try:
        _abi.ioctl(fd, _abi.IOC_LOAD, req)
    except OSError as e:
        raise _load_error(path, e) from None
    if req.bytes != header.data_len:
        raise McfsError(errno.EIO, "mcfs: loading %s: %d of %d bytes copied"
                        % (path, req.bytes, header.data_len))
    return req
