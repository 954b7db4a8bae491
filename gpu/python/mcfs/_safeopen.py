"""safetensors' safe_open, served by the mcfs daemon's DMA: what the switch returns.

FastSafeOpen stands in for `safe_open(path, framework="pt", device=<CUDA>)`
on a file of an mcfs mount whose daemon has a working GPU path. It answers
as safetensors does - keys() sorted, offset_keys(), metadata(), get_tensor(),
get_tensors(), get_slice() (get_shape, get_dtype, and indexing), the
context manager, SafetensorError for an unknown
name and "File is closed" after it - and any other attribute comes from
safetensors' own object for the same file, opened when first needed.

The first tensor read loads the whole file to the device (FileLoads: one
transfer of the file is what makes the fast path fast; callers that open a
file for the GPU read all or most of it), and each tensor is handed out once
from there; a second read of the same name loads that tensor alone. What
was not handed out is freed when the file is closed.

get_slice(name)[idx] where idx slices one dimension with step 1 and in
bounds - `[a:b]`, `[:, a:b]`, `[:, :, a:b]` - loads only that slice, one
strided range whose bytes alone cross PCIe (a tensor-parallel rank's
shard, read as safetensors documents sharded loading), and it does not load
the whole file. The result is contiguous, with safetensors' values, dtype and shape.
Any other index (ints, steps, several dimensions, Ellipsis, bounds past the
end, an empty or whole-dimension slice), a sub-byte dtype, or a tensor that
an earlier read already brought whole to the device, is answered as before:
from the whole tensor, indexed as torch indexes it, as safetensors 0.8 does
for "pt" (results are views of that tensor).

CpuSafeOpen wraps safetensors' own object for `device="cpu"` opens while a
framework hook is on (transformers 5 opens every shard on the CPU and moves
each tensor to its device afterwards, see _switch.py): everything is
safetensors' own, and its slices also carry a way to the GPU that the hook
takes.

If the fast load cannot run in this process after all (the buffer cannot be
exported with CUDA IPC, the daemon lost its GPU), the same call is answered
by safetensors' own object, with a one-line notice.
"""
import errno
import operator
import os
import sys
import threading

from . import _loader

# Errors after which safetensors' own reader can still serve the call: the
# GPU path is unusable here, the file is fine.
FALLBACK_ERRNOS = (errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO, errno.EPROTO)

_noticed = set()
_noticed_lock = threading.Lock()


def notice(path, reason):
    """One line on stderr per distinct reason and process."""
    with _noticed_lock:
        if reason in _noticed:
            return
        _noticed.add(reason)
    sys.stderr.write("mcfs: %s: %s; safetensors reads it through the mount\n" % (path, reason))


def _error(msg):
    from safetensors import SafetensorError
    return SafetensorError(msg)


class FileLoads:
    """The tensors of one open file, loaded to devices and handed out once each.

    Thread-safe: the first take() for a device loads (under the lock, so
    concurrent takers wait for it rather than load twice).
    """

    def __init__(self, torch, fd, path, header, transport=_loader.IoctlTransport):
        self.torch, self.fd, self.path, self.header = torch, fd, path, header
        self.transport = transport
        self._lock = threading.Lock()
        self._left = {}  # device -> {name: tensor not handed out yet}; guarded by _lock

    def _load(self, tensors, device):
        tr = self.transport(self.torch, self.fd, self.path)
        return _loader.load_tensors(self.torch, tr, self.header, tensors, device)

    def room(self, device, copies):
        """Whether `device` has room for `copies` times the file plus the arena:
        its free memory and what PyTorch's allocator holds unused. False when
        that cannot be asked (no CUDA)."""
        torch = self.torch
        try:
            free, _ = torch.cuda.mem_get_info(device)
            free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        except (RuntimeError, AssertionError, ValueError):
            return False
        arena = min(_loader.ARENA_BYTES, self.header.data_len)
        return free >= copies * self.header.data_len + arena

    def take(self, entry, device, whole=True):
        """The tensor of header entry `entry` on `device`, in its own allocation.

        whole: the first take for a device loads every tensor of the file;
        otherwise only this one. Raises OSError (McfsError) from the load.
        """
        with self._lock:
            if whole and device not in self._left:
                self._left[device] = self._load(self.header.tensors, device)
            t = self._left.get(device, {}).pop(entry.name, None)
        if t is None:
            t = self._load([entry], device)[entry.name]
        return t

    def holds(self, entry, device):
        """Whether the whole tensor `entry` waits on `device` (a whole-file load)."""
        with self._lock:
            return entry.name in self._left.get(device, {})

    def take_slice(self, entry, device, sl):
        """Slice `sl` = (dim, start, stop) of `entry` on `device`, loaded alone.
        Raises OSError (McfsError) from the load."""
        tr = self.transport(self.torch, self.fd, self.path)
        return _loader.load_slice(self.torch, tr, self.header, entry, sl, device)

    def drop(self):
        """Frees what was not handed out."""
        with self._lock:
            self._left.clear()


class FastSafeOpen:
    """safe_open(path, framework="pt", device=<CUDA device>) over the fast path.

    Takes ownership of `fd`. `original` opens safetensors' own object for the
    same call (attributes served by safetensors, and the fallback). whole:
    load the whole file at the first read (None: where the device has room).
    """

    def __init__(self, torch, fd, path, header, device, original, transport=None, whole=None):
        self._path, self._header, self._device = path, header, device
        self._entries = {t.name: t for t in header.tensors}
        self._loads = FileLoads(torch, fd, path, header,
                                transport or _loader.IoctlTransport)
        self._fd = fd
        self._opener = original
        self._orig = None
        self._closed = False
        self._fallback = False
        self._whole = whole  # load the whole file at the first read (None: decide then)

    def _check(self):
        if self._closed:
            raise _error("File is closed")

    def _entry(self, name):
        self._check()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise _error("File does not contain tensor %s" % name) from None

    def _original(self):
        if self._orig is None:
            self._orig = self._opener()
        return self._orig

    def _take(self, entry):
        """The whole tensor, or None when safetensors' own reader must answer."""
        if not self._fallback:
            if self._whole is None:
                # the whole file at once where it fits beside the arena (the
                # caller gets every tensor of it, so no second copy); one
                # tensor at a time on a device too full for that
                self._whole = self._loads.room(self._device, 1)
            try:
                return self._loads.take(entry, self._device, self._whole)
            except OSError as e:
                if e.errno not in FALLBACK_ERRNOS:
                    raise
                notice(self._path, str(e))
                self._fallback = True
        return None

    def keys(self):
        self._check()
        return sorted(self._entries)

    def offset_keys(self):
        self._check()
        return [t.name for t in self._header.tensors]

    def metadata(self):
        self._check()
        md = self._header.metadata
        return None if md is None else dict(md)

    def get_tensor(self, name):
        e = self._entry(name)
        t = self._take(e)
        return self._original().get_tensor(name) if t is None else t

    def get_tensors(self):
        return {n: self.get_tensor(n) for n in self.offset_keys()}

    def get_slice(self, name):
        return FastSlice(self, self._entry(name))

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._loads.drop()
        os.close(self._fd)
        if self._orig is not None:
            self._orig.__exit__(None, None, None)
            self._orig = None

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()

    def __getattr__(self, name):
        # What this class does not serve (a newer safetensors' API) comes
        # from safetensors' own object for the same file.
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        self._check()
        return getattr(self._original(), name)

    def __repr__(self):
        return "<mcfs safe_open %r on %s>" % (self._path, self._device)


class FastSlice:
    """PySafeSlice of a FastSafeOpen: get_shape(), get_dtype(), indexing."""

    def __init__(self, f, entry):
        self._f, self._e = f, entry
        self._full = None  # the whole tensor, while partial slices are cut from it

    def get_shape(self):
        return list(self._e.shape)

    def get_dtype(self):
        return self._e.dtype

    def _sliced(self, sl):
        """The slice loaded alone, or None when safetensors' own reader must answer."""
        f = self._f
        if not f._fallback:
            try:
                return f._loads.take_slice(self._e, f._device, sl)
            except OSError as e:
                if e.errno not in FALLBACK_ERRNOS:
                    raise
                notice(f._path, str(e))
                f._fallback = True
        return None

    def __getitem__(self, idx):
        self._f._check()
        t = self._full
        sl = one_dim(idx, self._e) if t is None else None
        if sl is not None and not self._f._loads.holds(self._e, self._f._device):
            r = self._sliced(sl)
            return self._f._original().get_slice(self._e.name)[idx] if r is None else r
        if t is None:
            t = self._f._take(self._e)
            if t is None:
                return self._f._original().get_slice(self._e.name)[idx]
        self._full = t  # for the next cut
        r = t[idx]
        if r.data_ptr() == t.data_ptr() and r.shape == t.shape and r.stride() == t.stride():
            # the whole tensor (x[...], x[:]): handed out as get_tensor would,
            # not kept here
            self._full = None
            return t
        return r

    def __repr__(self):
        return "<mcfs slice %r %s %s>" % (self._e.name, self._e.dtype, list(self._e.shape))


def _int(v):
    if v is None or isinstance(v, bool):
        return v if v is None else False
    try:
        return operator.index(v)
    except TypeError:
        return False


def one_dim(idx, entry):
    """(dim, start, stop) when `idx` slices one dimension of header Tensor
    `entry` with step 1, 0 <= start < stop <= its size, and not the whole of
    it, its other dimensions whole (leading `:`s, trailing ones omitted or
    `:`); else None (the whole tensor answers, see the module)."""
    from ._header import DTYPE_BITS
    if DTYPE_BITS.get(entry.dtype, 1) % 8:
        return None
    parts = idx if isinstance(idx, tuple) else (idx,)
    shape = entry.shape
    if not 0 < len(parts) <= len(shape) or not all(isinstance(p, slice) for p in parts):
        return None
    cut = None
    for d, p in enumerate(parts):
        start, stop, step = _int(p.start), _int(p.stop), _int(p.step)
        if start is False or stop is False or step is False or step not in (None, 1):
            return None
        if start is None and stop is None:
            continue
        if cut is not None:
            return None  # a second sliced dimension
        n = shape[d]
        start = 0 if start is None else start + n if start < 0 else start
        stop = n if stop is None else stop + n if stop < 0 else stop
        if not 0 <= start < stop <= n or (start, stop) == (0, n):
            return None
        cut = (d, start, stop)
    return cut


class CpuSafeOpen:
    """safetensors' own safe_open object for a CPU open of an mcfs file, whose
    slices (CpuSlice) can also be loaded to a GPU by the fast path."""

    def __init__(self, orig, loads):
        self._orig, self._loads = orig, loads
        self._entries = {t.name: t for t in loads.header.tensors}

    def get_slice(self, name):
        s = self._orig.get_slice(name)  # safetensors' errors for a bad name
        return CpuSlice(s, self._loads, self._entries[name])

    def __enter__(self):
        self._orig.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return self._orig.__exit__(exc_type, exc, tb)

    def close(self):
        loads, self._loads = self._loads, None
        if loads is not None:
            loads.drop()
            fd, loads.fd = loads.fd, None
            os.close(fd)

    def __del__(self):
        if getattr(self, "_loads", None) is not None:
            self.close()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._orig, name)

    def __repr__(self):
        return repr(self._orig)


class CpuSlice:
    """safetensors' own PySafeSlice, plus to_device() for a framework hook."""

    def __init__(self, orig, loads, entry):
        self._orig, self._loads, self._e = orig, loads, entry

    def __getitem__(self, idx):
        return self._orig[idx]

    def get_shape(self):
        return self._orig.get_shape()

    def get_dtype(self):
        return self._orig.get_dtype()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._orig, name)

    def to_device(self, device):
        """The whole tensor on CUDA `device` by the fast path, or None (then
        the caller reads it as it would have): the file is closed, or the
        load cannot run in this process (noticed once)."""
        loads = self._loads
        if loads is None or loads.fd is None:
            return None
        # Whole-file loads only where the device has room for the file twice
        # over: what the framework does not take for this device (a
        # device_map that spreads the file over devices, or the CPU) stays
        # there until the file is closed.
        whole = loads.room(device, 2)
        try:
            return loads.take(self._e, device, whole=whole)
        except OSError as e:
            if e.errno not in FALLBACK_ERRNOS:
                raise
            notice(loads.path, str(e))
            return None
