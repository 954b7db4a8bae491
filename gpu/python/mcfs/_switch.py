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

diffusers 0.42 reads each model file with load_state_dict ->
safetensors.torch.load_file(device="cpu") and has accelerate move the tensors
to the device_map's device afterwards. Once diffusers.models.modeling_utils is
loaded (an import hook waits for it), the switch wraps ModelMixin.from_pretrained
and _load_shard_file, which note on the thread the one CUDA device that the
device_map puts every tensor on (none for a quantizer, "auto" before it is
resolved, several devices, the CPU), and load_state_dict, which loads a
.safetensors file of an mcfs mount to that device by the fast path. The
tensors then reach accelerate already on their device.

The environment variable MCFS_SAFETENSORS (on unless empty, 0, false, no or
off) is honoured at interpreter start by mcfs_switch.pth, which pip installs
beside the package: it imports nothing unless the variable is set, so
start-up costs one dictionary lookup.
"""
import importlib.util
import inspect
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
    "df": None,        # (ModelMixin, its from_pretrained, {original: hook}), while wrapped
}
_finder = None          # the import hook, while a module of _WATCHED is not imported yet

# Modules whose import the switch waits for: safetensors (to swap safe_open)
# and diffusers' model loading (to wrap it before its first from_pretrained).
_WATCHED = ("safetensors", "diffusers.models.modeling_utils")

# .device: the CUDA device that the diffusers load running on this thread
# puts every tensor on (None: not one CUDA device, or no such load).
_target = threading.local()


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
        if _finder is None and not all(m in sys.modules for m in _WATCHED):
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
        if _state["df"] is not None:
            mixin, from_pretrained, hooks = _state["df"]
            mixin.from_pretrained = from_pretrained
            for orig, hook in hooks.items():
                _replace_everywhere(hook, orig)
            _state["df"] = None
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
    """Wraps transformers' _materialize_copy and diffusers' model loading once
    their modules are loaded."""
    _hook_diffusers()
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


def _hook_diffusers():
    """Wraps diffusers' model loading (see the module docstring) once
    diffusers.models.modeling_utils is loaded; a diffusers of another layout
    is left alone."""
    if _state["df"] is not None:
        return
    mu = sys.modules.get("diffusers.models.modeling_utils")
    mlu = sys.modules.get("diffusers.models.model_loading_utils")
    if mu is None or mlu is None:
        return
    mixin = getattr(mu, "ModelMixin", None)
    from_pretrained = vars(mixin).get("from_pretrained") if isinstance(mixin, type) else None
    load_state_dict = getattr(mlu, "load_state_dict", None)
    load_shard_file = getattr(mlu, "_load_shard_file", None)
    if not (isinstance(from_pretrained, classmethod) and callable(load_state_dict)
            and callable(load_shard_file)):
        return
    with _lock:
        if _state["df"] is not None or not _state["on"]:
            return
        hooks = {load_state_dict: _state_dict_hook(load_state_dict),
                 load_shard_file: _shard_file_hook(load_shard_file)}
        _state["df"] = (mixin, from_pretrained, hooks)
        mixin.from_pretrained = classmethod(_from_pretrained_hook(from_pretrained.__func__))
        for orig, hook in hooks.items():
            _replace_everywhere(orig, hook)


def _wraps(hook, orig):
    hook.__wrapped__ = orig
    hook.__doc__ = orig.__doc__
    hook.__name__ = orig.__name__
    hook.__qualname__ = orig.__qualname__
    return hook


def _one_cuda_device(device_map):
    """The CUDA device on which diffusers' `device_map` (from_pretrained's
    argument, or the map it resolved) puts every tensor, else None ("auto"
    before it is resolved, the CPU, "disk", several devices)."""
    if device_map is None:
        return None
    values = list(device_map.values()) if isinstance(device_map, dict) else [device_map]
    try:
        devices = {_cuda_device(v, current=True) for v in values}
    except ImportError:
        return None
    return devices.pop() if len(devices) == 1 and None not in devices else None


class _CudaStateDict(dict):
    """A diffusers state dict that the fast path loaded to a GPU."""


def _with_target(device, call):
    prev = getattr(_target, "device", None)
    _target.device = device
    try:
        return call()
    finally:
        _target.device = prev


def _from_pretrained_hook(func):
    # A file that is not sharded is read here, before diffusers resolves its
    # device_map: the one CUDA device of the caller's device_map is the target.
    def from_pretrained(cls, *args, **kwargs):
        device = None
        if not any(kwargs.get(k) for k in ("quantization_config", "parallel_config",
                                           "use_flashpack")):
            device = _one_cuda_device(kwargs.get("device_map"))
        return _with_target(device, lambda: func(cls, *args, **kwargs))

    return _wraps(from_pretrained, func)


def _bind(sig, args, kwargs):
    """`sig` bound to the call, defaults applied; None where it does not bind
    (the original then raises its own error)."""
    try:
        ba = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    ba.apply_defaults()
    return ba


def _shard_file_hook(orig):
    sig = inspect.signature(orig)
    first = next(iter(sig.parameters))

    # Each shard is read here (on a worker thread with parallel loading),
    # with the device_map resolved and the quantizer known.
    def _load_shard_file(*args, **kwargs):
        ba = _bind(sig, args, kwargs)
        if ba is None:
            return orig(*args, **kwargs)
        a = ba.arguments
        device = None
        if a.get("hf_quantizer") is None and a.get("low_cpu_mem_usage"):
            device = _one_cuda_device(a.get("device_map"))
        if isinstance(a[first], _CudaStateDict) and device is None:
            # read to the GPU before diffusers knew that it quantizes: the
            # quantizer gets the CPU tensors it would have got
            a[first] = {k: v.cpu() for k, v in a[first].items()}
        return _with_target(device, lambda: orig(*ba.args, **ba.kwargs))

    return _wraps(_load_shard_file, orig)


def _state_dict_hook(orig):
    sig = inspect.signature(orig)
    first = next(iter(sig.parameters))

    def load_state_dict(*args, **kwargs):
        device = getattr(_target, "device", None)
        ba = _bind(sig, args, kwargs) if device is not None else None
        if ba is not None:
            a = ba.arguments
            path = a[first]
            if (isinstance(path, (str, os.PathLike)) and not a.get("disable_mmap")
                    and str(a.get("map_location")) == "cpu"
                    and os.fsdecode(os.fspath(path)).endswith(".safetensors")):
                got = _cuda_state_dict(os.fsdecode(os.fspath(path)), device)
                if got is not None:
                    return got
        return orig(*args, **kwargs)

    return _wraps(load_state_dict, orig)


def _cuda_state_dict(path, cuda):
    """The tensors of safetensors file `path` on CUDA device `cuda` by the
    fast path (each in its own allocation, as safetensors' load_file gives
    them), or None where the fast path cannot serve it."""
    try:
        got = _open_served(path, cuda)
    except OSError:
        return None  # diffusers gives its own error
    if got is None:
        return None
    fd, torch, header = got
    orig = original_safe_open()
    with FastSafeOpen(torch, fd, path, header, cuda,
                      lambda: orig(path, framework="pt", device=str(cuda))) as f:
        return _CudaStateDict(f.get_tensors())


class _Finder:
    """Import hook: makes the swap right after safetensors' first import, and
    wraps diffusers' model loading right after its first import."""

    _busy = threading.local()

    def find_spec(self, name, path=None, target=None):
        if name not in _WATCHED or getattr(self._busy, "on", False):
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
            if _finder is not None and all(m in sys.modules for m in _WATCHED):
                sys.meta_path.remove(_finder)
                _finder = None
        _apply()
        _hook_diffusers()

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


def _open_served(path, cuda):
    """Opens `path` for the fast path: (fd, torch, header), or None when
    _serve() says it cannot serve it (the fd closed then). OSError from the
    open itself goes to the caller."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        got = _serve(fd, path, cuda)
    except BaseException:
        os.close(fd)
        raise
    if got is None:
        os.close(fd)
        return None
    return (fd,) + tuple(got)


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
    odd = odd_dtypes(torch, header.tensors)
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
        got = _open_served(path, cuda)
    except (TypeError, ValueError, OSError):
        return original()  # safetensors' own error
    if got is None:
        return original()
    fd, torch, header = got
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
