"""mcfs: load safetensors files from an mcfs mount straight into GPU memory.

    import mcfs
    tensors = mcfs.load_file("/models/llama/model-00001-of-00004.safetensors", device="cuda:0")

`load_file` returns what `safetensors.torch.load_file(path, device=...)` returns -
the same names, dtypes, shapes and bytes - but the tensors are views of one
device allocation that the mcfs daemon filled by DMA from its pinned RAM
tier: no tensor byte goes through the kernel's FUSE path or a pageable copy.

A rank that owns part of a shard loads only that part:
`load_file(path, device, tensors=["model.layers.3.*", "lm_head.weight"])`
(names or globs) fetches and copies only the blocks and bytes of those
tensors, and returns only them. A name or glob that selects nothing raises
UnknownTensorError (a KeyError) naming it.

On a file outside mcfs, with no GPU (here or in the daemon), or for a
dtype the fast path does not lay out (F4, F6), it prints a one-line notice
on stderr and returns `safetensors.torch.load_file(path, device=device)`
(with `tensors`, the selected tensors through `safetensors.safe_open`).

Pure Python over ctypes and fcntl: no build step. The ABI is mirrored in
_abi.py from include/mcfs/mcfs_ioctl.h.
"""
import errno
import os
import sys

from . import _abi
from ._header import Header, HeaderError, read as read_header, read_fd as read_header_fd
from ._header import parse as parse_header
from ._select import UnknownTensorError
from . import _select

__all__ = ["load_file", "info", "prefetch", "read_header", "parse_header", "Header",
           "HeaderError", "McfsError", "UnknownTensorError", "fast_path_reason"]

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


def _fallback(path, device, reason, tensors=None):
    _notice(path, reason)
    import safetensors.torch as st
    if tensors is not None:
        with st.safe_open(path, framework="pt", device=device) as f:
            names = _select.resolve(path, f.keys(), tensors)
            return {k: f.get_tensor(k) for k in sorted(names)}
    if st.load_file is load_file:  # someone routed safetensors through us: no recursion
        with st.safe_open(path, framework="pt", device=device) as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    return st.load_file(path, device=device)


def _load_error(path, e):
    what = _abi.LOAD_ERRORS.get(e.errno, os.strerror(e.errno))
    return McfsError(e.errno, "mcfs: loading %s: %s" % (path, what))


def _views(torch, buf, tensors, dst):
    out = {}
    for t in tensors:
        dt = getattr(torch, _TORCH_DTYPES[t.dtype])
        at = dst[t.name]
        raw = buf[at:at + t.end - t.begin]
        if t.end == t.begin:
            out[t.name] = torch.empty(t.shape, dtype=dt, device=buf.device)
        elif at % dt.itemsize == 0:
            out[t.name] = raw.view(dt).view(t.shape)
        else:
            # torch views need element-aligned offsets; a misaligned tensor is copied
            # on the device (safetensors files need not align their tensors).
            x = torch.empty(t.shape, dtype=dt, device=buf.device)
            x.view(-1).view(torch.uint8).copy_(raw)
            out[t.name] = x
    return {k: out[k] for k in sorted(out)}


def load_file(path, device="cuda:0", tensors=None):
    """Loads a safetensors file into `device` memory; see the module docstring.

    `tensors`: None for all, else names or glob patterns (fnmatch) of the
    tensors to load; only those are fetched, copied and returned.

    Raises HeaderError for a malformed file, UnknownTensorError (a KeyError)
    for names or globs that select no tensor, McfsError (an OSError) when the
    daemon refuses or fails the load (errno as in include/mcfs/mcfs_ioctl.h),
    and OSError(EOPNOTSUPP) when the buffer cannot be exported with CUDA IPC.
    """
    import torch

    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        reason = fast_path_reason(fd, device, torch)
        if reason is not None:
            return _fallback(path, device, reason, tensors)
        header = read_header_fd(fd)
        chosen = header.tensors
        if tensors is not None:
            names = _select.resolve(path, (t.name for t in header.tensors), tensors)
            chosen = [t for t in header.tensors if t.name in names]
            if not chosen:
                return {}
        odd = sorted({t.dtype for t in chosen
                      if _TORCH_DTYPES.get(t.dtype) is None
                      or getattr(torch, _TORCH_DTYPES[t.dtype], None) is None})
        if odd:
            return _fallback(path, device, "dtype %s not laid out by mcfs" % ", ".join(odd),
                             tensors)
        ranges, dst, size = _select.plan(chosen)
        dev = _torch_device(torch, device)
        buf = torch.empty(max(size, 1), dtype=torch.uint8, device=dev)
        if ranges:
            _load_into(fd, path, torch, buf, header, ranges)
        return _views(torch, buf[:size], chosen, dst)
    finally:
        os.close(fd)


def _send(fd, path, db, base, batch, flags):
    req = _abi.LoadReq()
    req.abi_version = _abi.ABI
    req.flags = flags
    req.ipc_handle[:] = db.handle
    req.device_uuid[:] = db.uuid
    req.device = db.device
    req.nranges = len(batch)
    for r, (off, n, at) in zip(req.ranges, batch):
        r.file_off = base + off
        r.len = n
        r.dst_off = at
    req.dst_offset = db.offset
    req.dst_size = db.size
    try:
        _abi.ioctl(fd, _abi.IOC_LOAD, req)
    except OSError as e:
        raise _load_error(path, e) from None
    return req.bytes


def _load_into(fd, path, torch, buf, header, ranges):
    """Copies `ranges` (data-section offset, length, buffer offset) into buf.

    More ranges than one request holds go in several requests; the daemon
    keeps the buffer's IPC mapping open between them and closes it with the
    last (or, after a failure, with an empty request that only closes)."""
    from ._cuda import devbuf_from_ptr

    db = devbuf_from_ptr(buf.data_ptr())
    db.size = min(db.size, buf.numel())
    # The allocator may hand out memory that queued kernels still use: let them finish.
    torch.cuda.current_stream(buf.device).synchronize()
    todo = _select.batches(ranges, _abi.LOAD_MAX_RANGES)
    copied = 0
    try:
        for i, batch in enumerate(todo):
            last = i == len(todo) - 1
            # one-shot: after the last request the daemon keeps no mapping of this buffer
            copied += _send(fd, path, db, header.data_offset, batch,
                            _abi.LOAD_F_CLOSE if last else 0)
    except BaseException:
        if len(todo) > 1:
            try:
                _send(fd, path, db, header.data_offset, [(0, 0, 0)], _abi.LOAD_F_CLOSE)
            except OSError:
                pass  # the daemon also closes it once this process is gone
        raise
    want = sum(n for _, n, _ in ranges)
    if copied != want:
        raise McfsError(errno.EIO, "mcfs: loading %s: %d of %d bytes copied"
                        % (path, copied, want))
