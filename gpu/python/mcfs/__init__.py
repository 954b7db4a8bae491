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

A tensor-parallel rank loads slices: `slices={name_or_glob: (dim, start,
stop)}` takes `t[..., start:stop, ...]` along `dim` of the tensors a key
selects, and a plan `rank=r, world=w, split={glob: dim}` takes rank r's
shard of w along `dim` of each tensor a glob matches (ceil-divided, the
last shard shorter: see _slices.py). Only the slices' bytes are copied to
the GPU; each result is bitwise `safe_open(...).get_slice(name)[...]`.

On a file outside mcfs, with no GPU (here or in the daemon), or for a
dtype the fast path does not lay out (F4, F6), it prints a one-line notice
on stderr and returns `safetensors.torch.load_file(path, device=device)`
(with `tensors`, the selected tensors through `safetensors.safe_open`).

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
from ._loader import IoctlTransport, odd_dtypes, torch_dtype
from ._select import UnknownTensorError
from . import _select
from . import _slices
from ._slices import shard_bounds
from ._switch import patch_safetensors, unpatch_safetensors

__all__ = ["load_file", "info", "prefetch", "read_header", "parse_header", "Header",
           "HeaderError", "McfsError", "UnknownTensorError", "fast_path_reason",
           "patch_safetensors", "unpatch_safetensors", "shard_bounds", "__version__"]

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
    # O_NONBLOCK: the daemon's open does not fetch the file whole first (cold_whole)
    fd = (path_or_fd if isinstance(path_or_fd, int)
          else os.open(path_or_fd, os.O_RDONLY | os.O_NONBLOCK))
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
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no whole fetch at open
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


def _fallback(path, device, reason, tensors=None, cut=None):
    """safetensors' own load; `cut(names)` gives the slices of those names."""
    _notice(path, reason)
    import safetensors.torch as st
    if tensors is not None or cut is not None:
        with st.safe_open(path, framework="pt", device=device) as f:
            names = _select.resolve(path, f.keys(), tensors) if tensors is not None \
                else set(f.keys())
            cuts = cut(names) if cut is not None else {}
            return {k: f.get_slice(k)[_slices.index(*cuts[k])] if k in cuts else f.get_tensor(k)
                    for k in sorted(names)}
    # With the switch on, this goes through its safe_open, which hands every
    # load the fast path cannot do (the reason above) to safetensors' own.
    return st.load_file(path, device=device)


def _load_error(path, e):
    what = _abi.LOAD_ERRORS.get(e.errno, os.strerror(e.errno))
    return McfsError(e.errno, "mcfs: loading %s: %s" % (path, what))


def _views(torch, buf, tensors, dst):
    out = {}
    for t in tensors:
        dt = torch_dtype(torch, t.dtype)
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


def load_file(path, device="cuda:0", tensors=None, slices=None, rank=None, world=None,
              split=None):
    """Loads a safetensors file into `device` memory; see the module docstring.

    `tensors`: None for all, else names or glob patterns (fnmatch) of the
    tensors to load; only those are fetched, copied and returned.
    `slices`: {name or glob: (dim, start, stop)}, a slice of each tensor a
    key selects (of those `tensors` selects), with Python's slicing rules.
    `rank`, `world`, `split`: a tensor-parallel plan, {glob: dim}: of each
    tensor a glob matches, rank's shard of world along dim (shard_bounds).
    `slices` wins over `split` for a tensor both select; tensors neither
    selects load whole. See _slices.py for the rules.

    Raises HeaderError for a malformed file, UnknownTensorError (a KeyError)
    for names or globs (of `tensors` or `slices`) that select no tensor,
    ValueError for a bad slice or plan (a dim the tensor lacks, two keys
    with different slices of one tensor, rank outside [0, world)), McfsError (an OSError) when the
    daemon refuses or fails the load (errno as in include/mcfs/mcfs_ioctl.h;
    EPROTO for a daemon that speaks another ioctl ABI), and OSError(EOPNOTSUPP)
    when the buffer cannot be exported with CUDA IPC.
    """
    import torch

    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no whole fetch at open
    slicing = slices is not None or split is not None or rank is not None or world is not None
    header = None
    try:
        if slicing:
            header = read_header_fd(fd)

            def cut(names):
                return _slices.resolve_slices(
                    path, [t for t in header.tensors if t.name in names], slices, rank, world,
                    split)
            cut(set(t.name for t in header.tensors))  # bad slices raise before any load
        else:
            cut = None
        reason = fast_path_reason(fd, device, torch, path)
        if reason is not None:
            return _fallback(path, device, reason, tensors, cut)
        if header is None:
            header = read_header_fd(fd)
        chosen = header.tensors
        if tensors is not None:
            names = _select.resolve(path, (t.name for t in header.tensors), tensors)
            chosen = [t for t in header.tensors if t.name in names]
            if not chosen:
                return {}
        odd = odd_dtypes(torch, chosen)
        if odd:
            return _fallback(path, device, "dtype %s not laid out by mcfs" % ", ".join(odd),
                             tensors, cut)
        cuts = cut(set(t.name for t in chosen)) if cut is not None else {}
        ranges, dst, size, views = _slices.plan(chosen, cuts)
        dev = _torch_device(torch, device)
        buf = torch.empty(max(size, 1), dtype=torch.uint8, device=dev)
        if ranges:
            _load_into(fd, path, torch, buf, header, ranges)
        return _views(torch, buf[:size], views, dst)
    finally:
        os.close(fd)


def _load_into(fd, path, torch, buf, header, ranges):
    """Copies `ranges` (data-section offset, length, buffer offset[, count,
    src_stride]) into buf.

    More ranges than one request holds go in several requests; the daemon
    keeps the buffer's IPC mapping open between them and closes it with the
    last (or, after a failure, with an empty request that only closes)."""
    base = header.data_offset
    transport = IoctlTransport(torch, fd, path)
    todo = _select.batches([(base + r[0],) + tuple(r[1:]) for r in ranges],
                           _abi.LOAD_MAX_RANGES)
    try:
        for i, batch in enumerate(todo):
            # one-shot: after the last request the daemon keeps no mapping of this buffer
            transport.fill(buf, batch, i == len(todo) - 1)
    except BaseException:
        if len(todo) > 1:
            transport.close(buf)
        raise
