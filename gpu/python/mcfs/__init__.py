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

A daemon that speaks another ioctl ABI than this package is refused with
McfsError(EPROTO), whose message names both versions.

`mcfs.patch_safetensors()` (or MCFS_SAFETENSORS=1 in the environment of a
process, with the package installed by pip) routes safetensors' own
`safe_open`/`load_file` for CUDA devices through the same path, unmodified
callers included: see _switch.py.

Pure Python over ctypes and fcntl: no build step. The ABI is mirrored in
_abi.py from include/mcfs/mcfs_ioctl.h.
"""
import errno
import os
import sys

from . import _abi
from ._header import Header, HeaderError, read as read_header, read_fd as read_header_fd
from ._header import parse as parse_header
from ._loader import odd_dtypes, torch_dtype
from ._switch import patch_safetensors, unpatch_safetensors

__all__ = ["load_file", "info", "prefetch", "read_header", "parse_header", "Header",
           "HeaderError", "McfsError", "fast_path_reason", "patch_safetensors",
           "unpatch_safetensors", "__version__"]

# The release this package belongs to: the same as the daemon's MCFS_VERSION
# (common/mcfs.h); pyproject.toml reads it from here.
__version__ = "0.1.0"

ABI = _abi.ABI


class McfsError(OSError):
    """A load that mcfs accepted to do and could not; errno says which case."""


def abi_mismatch(daemon_abi):
    """Why a daemon speaking ioctl ABI `daemon_abi` is refused, and what to do."""
    return ("the mcfs daemon speaks ioctl ABI %d, this Python package (mcfs %s) speaks ABI %d: "
            "install the package from the same mcfs release as the daemon (pip install "
            "./gpu/python in its source tree), or run the daemon that goes with this package"
            % (daemon_abi, __version__, _abi.ABI))


def abi_error(path, daemon_abi):
    """The McfsError(EPROTO) for a daemon speaking ioctl ABI `daemon_abi`."""
    return McfsError(errno.EPROTO, "mcfs: %s: %s" % (path, abi_mismatch(daemon_abi)))


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
        try:
            _abi.ioctl(fd, _abi.IOC_PREFETCH, r)
        except OSError as e:
            if e.errno == errno.EPROTO:
                raise abi_error(path, _abi.info(fd).daemon_abi) from None
            raise
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


def fast_path_reason(fd, device, torch, path="?"):
    """None if the fast path can load the file open at `fd` to `device`, else why not.

    Raises McfsError(EPROTO) for a daemon that speaks another ioctl ABI.
    """
    dev = _torch_device(torch, device)
    if dev.type != "cuda":
        return "device %s is not a CUDA device" % dev
    try:
        i = _abi.info(fd)
    except OSError as e:
        return "not on an mcfs mount (%s)" % os.strerror(e.errno)
    if i.daemon_abi != _abi.ABI:
        raise abi_error(path, i.daemon_abi)
    if not torch.cuda.is_available():
        return "no CUDA GPU in this process"
    if not i.gpu_ok:
        return "mcfs GPU path unavailable: %s" % i.reason.decode(errors="replace")
    return None


def _notice(path, reason):
    sys.stderr.write("mcfs: %s: %s; loading with safetensors instead\n" % (path, reason))


def _fallback(path, device, reason):
    _notice(path, reason)
    import safetensors.torch as st
    # With the switch on, this goes through its safe_open, which hands every
    # load the fast path cannot do (the reason above) to safetensors' own.
    return st.load_file(path, device=device)


def _load_error(path, e):
    what = _abi.LOAD_ERRORS.get(e.errno, os.strerror(e.errno))
    return McfsError(e.errno, "mcfs: loading %s: %s" % (path, what))


def _views(torch, buf, header):
    out = {}
    for t in header.tensors:
        dt = torch_dtype(torch, t.dtype)
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
    daemon refuses or fails the load (errno as in include/mcfs/mcfs_ioctl.h;
    EPROTO for a daemon that speaks another ioctl ABI), and OSError(EOPNOTSUPP)
    when the buffer cannot be exported with CUDA IPC.
    """
    import torch

    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        reason = fast_path_reason(fd, device, torch, path)
        if reason is not None:
            return _fallback(path, device, reason)
        header = read_header_fd(fd)
        odd = odd_dtypes(torch, header)
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
    from ._loader import IoctlTransport

    # One-shot (MCFS_LOAD_F_CLOSE): the daemon keeps no mapping of this buffer.
    IoctlTransport(torch, fd, path).fill(buf, [(header.data_offset, header.data_len, 0)], True)
