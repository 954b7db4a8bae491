"""The switch: safetensors' own API on the GPU fast path, for unmodified callers.

    import mcfs; mcfs.patch_safetensors()      # or MCFS_SAFETENSORS=1 in the environment

After it, `safetensors.safe_open(path, framework="pt", device=<CUDA>)` on a
file of an mcfs mount whose daemon has a working GPU path returns a
FastSafeOpen (_safeopen.py): the same API and results, the bytes moved by the
daemon's DMA. `safetensors.torch.load_file(path, device=<CUDA>)` and
`load_model` call safe_open from their module, so they take it too. Every
other call - another framework ("np", "tf", "flax", ...), a CPU device, a
file off mcfs, no GPU here or in the daemon, a daemon of another ioctl ABI,
F4/F6 tensors, PyTorch's expandable_segments allocator - gets safetensors'
own object, untouched (a file on mcfs that could not take the path says why
once on stderr).

Reaching the callers. `from safetensors import safe_open` copies the name
into the importing module at its import time (transformers.modeling_utils
and transformers.integrations.accelerate do). So the switch replaces the
object in every loaded module that holds it, and one imported later gets the
replacement from safetensors itself; if safetensors is not imported yet, an
import hook makes the swap the moment it is. Not reached: a reference kept
elsewhere before the switch (an instance attribute, a closure, a
functools.partial).

transformers 5 opens every shard with device="cpu" and moves each tensor to
its device afterwards (core_model_loading._materialize_copy: `tensor[...]`,
then `.to(device, dtype)`). Once that module is loaded, the switch wraps
_materialize_copy: a tensor of an mcfs file headed for a CUDA device is
loaded there by the fast path instead (same bytes; the dtype cast then runs
on the device). For this, CPU opens of mcfs files return CpuSafeOpen,
safetensors' own object with slices that know their file.

The environment variable MCFS_SAFETENSORS (on unless empty, 0, false, no or
off) is honoured at interpreter start by mcfs_switch.pth, which pip installs
beside the package: it imports nothing unless the variable is set, so
start-up costs one dictionary lookup.
"""
import importlib.util
import os
import sys
import threading

from . import _abi
from ._safeopen import CpuSafeOpen, CpuSlice, FastSafeOpen, FileLoads, notice

_lock = threading.RLock()
_state = {
    "on": False,       # patch_safetensors() called, unpatch not since
    "orig": None,      # safetensors' own safe_open, while replaced
    "tf": None,        # (original, hook) of transformers' _materialize_copy, while wrapped
}
_finder = None          # the import hook, while safetensors is not imported yet


def active():
    """Whether safetensors' safe_open is replaced now."""
    return _state["orig"] is not None


def original_safe_open():
    """safetensors' own safe_open (also while replaced)."""
    if _state["orig"] is not None:
        return _state["orig"]
    import safetensors
    return safetensors.safe_open


def patch_safetensors():
    """Turns the switch on (see the module docstring). Idempotent."""
    global _finder
    with _lock:
        _state["on"] = True
        if "safetensors" in sys.modules:
            _apply()
        elif _finder is None:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)


def unpatch_safetensors():
    """Turns the switch off: every name the switch replaced gets the original back."""
    global _finder
    with _lock:
        _state["on"] = False
        if _finder is not None:
            sys.meta_path.remove(_finder)
            _finder = None
        if _state["tf"] is not None:
            orig, hook = _state["tf"]
            _replace_everywhere(hook, orig)
            _state["tf"] = None
        if _state["orig"] is not None:
            _replace_everywhere(safe_open, _state["orig"])
            _state["orig"] = None


def _replace_everywhere(old, new):
    """Sets every attribute of a loaded module that is `old` to `new` (this
    module's own names excepted)."""
    me = sys.modules[__name__]
    for m in list(sys.modules.values()):
        if m is me:
            continue
        try:
            d = vars(m)
        except TypeError:
            continue
        for k, v in list(d.items()):
            if v is old:
                try:
                    setattr(m, k, new)
                except (AttributeError, TypeError):
                    pass


def _apply():
    with _lock:
        if not _state["on"] or _state["orig"] is not None:
            return
        import safetensors
        orig = safetensors.safe_open
        if orig is safe_open:
            return
        _state["orig"] = orig
        _replace_everywhere(orig, safe_open)
        _hook_frameworks()


def _hook_frameworks():
    """Wraps transformers' _materialize_copy once its module is loaded."""
    if _state["tf"] is not None:
        return
    m = sys.modules.get("transformers.core_model_loading")
    orig = getattr(m, "_materialize_copy", None) if m is not None else None
    if not callable(orig):
        return
    with _lock:
        if _state["tf"] is None and _state["on"]:
            hook = _materialize_hook(orig)
            _state["tf"] = (orig, hook)
            _replace_everywhere(orig, hook)


def _materialize_hook(orig):
    def _materialize_copy(tensor, *args, **kwargs):
        if isinstance(tensor, CpuSlice):
            device = args[0] if args else kwargs.get("device")
            dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
            dev = _cuda_device(device, current=True)
            if dev is not None:
                t = tensor.to_device(dev)
                if t is not None:
                    return t if dtype is None else t.to(dtype=dtype)
        return orig(tensor, *args, **kwargs)

    _materialize_copy.__wrapped__ = orig
    _materialize_copy.__doc__ = orig.__doc__
    return _materialize_copy


class _Finder:
    """Import hook: makes the swap right after safetensors' first import."""

    _busy = threading.local()

    def find_spec(self, name, path=None, target=None):
        if name != "safetensors" or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        global _finder
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        with _lock:
            if _finder is not None:
                sys.meta_path.remove(_finder)
                _finder = None
        _apply()

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _cuda_device(device, current=False):
    """torch.device("cuda", N) for a CUDA device, else None. An int N is
    cuda:N; "cuda" without an index is device 0 for safetensors, and torch's
    current device where torch interprets it (current=True)."""
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        index = device if device >= 0 else None
    else:
        s = str(device) if device is not None else ""
        if s != "cuda" and not s.startswith("cuda:"):
            return None
        try:
            index = int(s[5:]) if s.startswith("cuda:") else None
        except ValueError:
            return None
        if index is None and not current:
            index = 0
    import torch
    if index is None:
        if not current or not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device()
    return torch.device("cuda", index)


def _is_cpu(device):
    return device is None or str(device) == "cpu"


def _args(args, kwargs):
    filename = args[0] if args else kwargs.get("filename")
    framework = args[1] if len(args) > 1 else kwargs.get("framework")
    device = args[2] if len(args) > 2 else kwargs.get("device", "cpu")
    return filename, framework, device


def _serve(fd, path, cuda):
    """(torch, header) when the fast path can serve the file open at fd, else
    None, with a notice when an mcfs file cannot take it for a reason the
    user can act on."""
    try:
        i = _abi.info(fd)
    except OSError:
        return None  # not on mcfs
    if i.daemon_abi != _abi.ABI:
        from . import abi_mismatch
        notice(path, abi_mismatch(i.daemon_abi))
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if cuda is not None and cuda.index >= torch.cuda.device_count():
        return None  # safetensors says what is wrong with the device
    if "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").lower():
        notice(path, "PyTorch's expandable_segments allocator makes memory that CUDA IPC cannot "
               "export")
        return None
    if not i.gpu_ok:
        notice(path, "the mcfs daemon's GPU path is off (%s)" % i.reason.decode(errors="replace"))
        return None
    from ._header import HeaderError, read_fd
    from ._loader import odd_dtypes
    try:
        header = read_fd(fd)
    except (HeaderError, OSError):
        return None  # safetensors gives its own error
    odd = odd_dtypes(torch, header)
    if odd:
        notice(path, "dtype %s not laid out by mcfs" % ", ".join(odd))
        return None
    return torch, header


def _open(args, kwargs):
    orig = original_safe_open()

    def original():
        return orig(*args, **kwargs)

    _hook_frameworks()
    filename, framework, device = _args(args, kwargs)
    if not isinstance(framework, str) or framework.lower() not in ("pt", "torch", "pytorch"):
        return original()
    try:
        cuda = _cuda_device(device)
    except ImportError:
        return original()
    if cuda is None and not (_is_cpu(device) and _state["tf"] is not None):
        return original()
    try:
        path = os.fsdecode(os.fspath(filename))
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (TypeError, ValueError, OSError):
        return original()  # safetensors' own error
    try:
        got = _serve(fd, path, cuda)
    except BaseException:
        os.close(fd)
        raise
    if got is None:
        os.close(fd)
        return original()
    torch, header = got
    if cuda is not None:
        return FastSafeOpen(torch, fd, path, header, cuda, original)
    try:
        own = original()
    except BaseException:
        os.close(fd)
        raise
    return CpuSafeOpen(own, FileLoads(torch, fd, path, header))


class _SafeOpenType(type):
    def __instancecheck__(cls, obj):
        orig = _state["orig"]
        return isinstance(obj, (FastSafeOpen, CpuSafeOpen)) or (
            orig is not None and isinstance(obj, orig))


class safe_open(metaclass=_SafeOpenType):
    """safetensors.safe_open, with CUDA loads of mcfs files on the fast path
    (mcfs.patch_safetensors). Takes safetensors' arguments, unchanged."""

    def __new__(cls, *args, **kwargs):
        return _open(args, kwargs)
