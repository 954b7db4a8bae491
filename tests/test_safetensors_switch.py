"""The safetensors switch (mcfs.patch_safetensors, issue 13), without a GPU.

Routing, with safetensors' own object compared:
- other frameworks, CPU devices, files off mcfs, and a mount whose daemon
  has no GPU reach safetensors unchanged (same type, same bytes, same errors);
- names captured with `from safetensors import safe_open` before the switch
  are replaced, and given back by unpatch; a switch turned on before
  safetensors is imported applies at its import.

The FastSafeOpen API (needs torch): the fast path's DMA is the only part
replaced, by a transport that preads the same byte ranges into CPU memory;
keys, offset_keys, metadata, get_tensor(s), get_slice indexing and its
errors, the context manager, and the batching of loads through the arena are
compared with safetensors' own safe_open on the same file.
"""
import errno
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, mcfs_mount, need_root

PKG = os.path.join(ROOT, "gpu", "python")
sys.path.insert(0, PKG)

safetensors = pytest.importorskip("safetensors", reason="the safetensors package is not installed")


def run_py(code, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PKG]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("MCFS_SAFETENSORS", None)
    env["HF_HUB_OFFLINE"] = "1"  # local models only: never wait on a hub that cannot be reached
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def write_raw(path, entries, metadata=None):
    """A safetensors file with tensors in the given order and no alignment
    (safetensors' writer aligns): (name, dtype, shape, bytes) entries."""
    import json
    import struct
    header, at = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, data in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for e in entries:
            f.write(e[3])


def np_file(path):
    import numpy as np
    from safetensors.numpy import save_file
    rng = np.random.default_rng(5)
    save_file({"w": rng.standard_normal((64, 33)).astype(np.float32),
               "b": rng.integers(0, 255, 1000).astype(np.uint8),
               "h": rng.standard_normal((3, 4, 5)).astype(np.float16)},
              path, metadata={"format": "pt", "k": "v"})


# ---- routing (no torch needed) ---------------------------------------------

ROUTE_NP = """
    import sys, numpy as np, safetensors, safetensors.numpy as stn
    keep = [safetensors.safe_open]   # a module global would be replaced by the switch
    want = stn.load_file(sys.argv[1])
    import mcfs
    mcfs.patch_safetensors()
    own = keep[0]
    f = safetensors.safe_open(sys.argv[1], framework="np")
    assert type(f) is own, type(f)
    assert isinstance(f, safetensors.safe_open)
    got = stn.load_file(sys.argv[1])
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
    assert f.get_slice("w")[3:9, ::4].tobytes() == want["w"][3:9, ::4].tobytes()
    for bad in (dict(framework="bogus"), dict(framework="np", device="cuda:0")):
        try:
            own(sys.argv[1], **bad)
            raise SystemExit("no error from safetensors for %r" % bad)
        except Exception as e:
            want_err = (type(e), str(e))
        try:
            safetensors.safe_open(sys.argv[1], **bad)
            raise SystemExit("no error through the switch for %r" % bad)
        except Exception as e:
            assert (type(e), str(e)) == want_err, ((type(e), str(e)), want_err)
    print("ok")
"""


def test_other_frameworks_unchanged(tmp_path):
    p = str(tmp_path / "a.safetensors")
    np_file(p)
    out = run_py(ROUTE_NP, p)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
    assert "mcfs:" not in out.stderr, out.stderr


def test_other_frameworks_unchanged_on_a_mount(tmp):
    need_root()
    np_file(str(tmp / "src" / "a.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        out = run_py(ROUTE_NP, m.p("a.safetensors"))
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_captured_names_replaced_and_given_back():
    out = run_py("""
        import sys, types, safetensors
        keep = [safetensors.safe_open]
        m = types.ModuleType("framework_like")
        m.safe_open = safetensors.safe_open          # from safetensors import safe_open
        m.renamed = safetensors.safe_open
        sys.modules["framework_like"] = m
        import mcfs, mcfs._switch as sw
        mcfs.patch_safetensors()
        own = keep[0]
        assert m.safe_open is sw.safe_open and m.renamed is sw.safe_open
        assert safetensors.safe_open is sw.safe_open and sw.original_safe_open() is own
        mcfs.patch_safetensors()                      # idempotent
        assert sw.original_safe_open() is own
        mcfs.unpatch_safetensors()
        assert m.safe_open is own and m.renamed is own and safetensors.safe_open is own
        assert not sw.active()
        mcfs.patch_safetensors()                      # and on again
        assert m.safe_open is sw.safe_open and sw.original_safe_open() is keep[0]
        assert sw.safe_open.__module__ == "mcfs._switch"
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_switch_before_safetensors_is_imported():
    out = run_py("""
        import sys, mcfs, mcfs._switch as sw
        mcfs.patch_safetensors()
        assert "safetensors" not in sys.modules
        from safetensors import safe_open
        import safetensors.numpy
        assert safe_open is sw.safe_open and safetensors.numpy.safe_open is sw.safe_open
        assert sw.original_safe_open().__name__ == "safe_open"
        # the import hook stays only while diffusers' model loading is not imported
        # (by class: virtualenv's own import hook is a "_Finder" too)
        finders = sum(isinstance(f, sw._Finder) for f in sys.meta_path)
        assert finders == ("diffusers.models.modeling_utils" not in sys.modules), sys.meta_path
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


# ---- torch: routing of "pt" loads ------------------------------------------

def need_torch():
    return pytest.importorskip("torch", reason="torch is not installed (CPU torch runs these)")


ROUTE_PT = """
    import sys, torch, safetensors, safetensors.torch as stt
    keep = [safetensors.safe_open]
    own = keep[0]
    path = sys.argv[1]
    want = stt.load_file(path)
    def err(fn):
        try:
            fn()
        except Exception as e:
            return type(e).__name__, str(e)
        return None
    want_cuda = err(lambda: own(path, framework="pt", device="cuda:0").get_tensor("w"))
    import mcfs
    mcfs.patch_safetensors()
    own = keep[0]
    for dev in ("cpu", None):
        kw = {} if dev is None else {"device": dev}
        f = safetensors.safe_open(path, framework="pt", **kw)
        assert type(f) is own, type(f)
    for got in (stt.load_file(path), stt.load_file(path, device="cpu")):
        assert list(got) == list(want)
        for k in want:
            a, b = got[k], want[k]
            assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, k
            assert a.view(-1).view(torch.uint8).tolist() == b.view(-1).view(torch.uint8).tolist()
    got_cuda = err(lambda: safetensors.safe_open(path, framework="pt", device="cuda:0")
                   .get_tensor("w"))
    assert got_cuda == want_cuda, (got_cuda, want_cuda)
    print("ok")
"""


def pt_file(torch, path):
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(3)
    save_file({"w": torch.randn(64, 33, generator=g), "i": torch.arange(10, dtype=torch.int64),
               "h": torch.randn(3, 4, 5, generator=g).to(torch.bfloat16)}, path,
              metadata={"format": "pt"})


def test_pt_cpu_and_off_mcfs_unchanged(tmp_path):
    torch = need_torch()
    p = str(tmp_path / "a.safetensors")
    pt_file(torch, p)
    out = run_py(ROUTE_PT, p)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
    assert "mcfs:" not in out.stderr, out.stderr


def test_pt_on_a_mount_without_gpu_unchanged(tmp):
    need_root()
    torch = need_torch()
    pt_file(torch, str(tmp / "src" / "a.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        out = run_py(ROUTE_PT, m.p("a.safetensors"))
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


# ---- torch: the FastSafeOpen API against safetensors' own ------------------

class PreadTransport:
    """The daemon's DMA replaced by pread of the same ranges into CPU memory."""

    calls = []

    def __init__(self, torch, fd, path):
        self.torch, self.fd = torch, fd

    def fill(self, buf, ranges, last):
        PreadTransport.calls.append((buf.numel(), list(ranges), last))
        for r in ranges:
            off, n, at = r[:3]
            rows, stride = (r[3], r[4]) if len(r) > 3 else (1, 0)  # a strided range (ABI 3)
            for i in range(rows):
                data = os.pread(self.fd, n, off + i * stride)
                assert len(data) == n
                buf[at + i * n:at + (i + 1) * n].copy_(
                    self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8))

    def close(self, buf):
        PreadTransport.calls.append((buf.numel(), "close", True))


def fast_open(torch, path, transport=PreadTransport, whole=True):
    import mcfs
    from mcfs._safeopen import FastSafeOpen
    from safetensors import safe_open
    fd = os.open(path, os.O_RDONLY)
    return FastSafeOpen(torch, fd, path, mcfs.read_header(path), torch.device("cpu"),
                        lambda: safe_open(path, framework="pt", device="cpu"),
                        transport=transport, whole=whole)


def odd_file(torch, path):
    """Many dtypes and shapes, a 0-d and an empty tensor, odd offsets, metadata."""
    g = torch.Generator().manual_seed(7)

    def rb(n):
        return bytes(torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).tolist())
    entries = [("z_u8", "U8", [3], rb(3)), ("b_f32", "F32", [6, 5], rb(120)),
               ("c_empty", "BF16", [0, 4], b""), ("a_bf16", "BF16", [4, 5, 6], rb(240)),
               ("e_i64", "I64", [3], rb(24)), ("f_scalar", "F64", [], rb(8)),
               ("g_f8", "F8_E4M3", [9], rb(9)), ("h_bool", "BOOL", [2, 3],
                                                   bytes([0, 1, 1, 0, 1, 0])),
               ("i_c64", "C64", [2], rb(16)), ("j_f16", "F16", [7, 3], rb(42))]
    write_raw(path, entries, metadata={"format": "pt", "note": "odd"})


def same(torch, a, b):
    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and a.device == b.device
            and a.contiguous().view(-1).view(torch.uint8).tolist()
            == b.contiguous().view(-1).view(torch.uint8).tolist())


@pytest.mark.parametrize("whole", [True, False], ids=["whole-file", "per-tensor"])
def test_api_matches_safetensors(tmp_path, whole):
    torch = need_torch()
    from safetensors import safe_open
    p = str(tmp_path / "odd.safetensors")
    odd_file(torch, p)
    PreadTransport.calls = []
    with safe_open(p, framework="pt") as own, fast_open(torch, p, whole=whole) as f:
        assert f.keys() == own.keys()
        assert f.offset_keys() == own.offset_keys()
        assert f.metadata() == own.metadata() == {"format": "pt", "note": "odd"}
        got = f.get_tensors()
        want = own.get_tensors()
        assert list(got) == list(want)
        # one load for the file, or one per (non-empty) tensor
        assert len(PreadTransport.calls) == (1 if whole else len(want) - 1)
        for k in want:
            assert same(torch, got[k], want[k]), k
        # each tensor its own storage, exactly its bytes, as safetensors'
        ptrs = [t.untyped_storage().data_ptr() for t in got.values() if t.numel()]
        assert len(set(ptrs)) == len(ptrs), "tensors share storage"
        for k, t in got.items():
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), k
            assert t.is_contiguous() and t.storage_offset() == 0, k
        # a second read loads that tensor again
        for k in ("b_f32", "f_scalar", "c_empty"):
            again = f.get_tensor(k)
            assert same(torch, again, want[k]) and again is not got[k], k
        for k in own.keys():
            s, o = f.get_slice(k), own.get_slice(k)
            assert s.get_shape() == o.get_shape() and s.get_dtype() == o.get_dtype(), k
        for bad in ("nope", 3, None):
            with pytest.raises(safetensors.SafetensorError) as e1:
                own.get_tensor(bad) if bad == "nope" else own.get_tensor("nope")
            with pytest.raises(safetensors.SafetensorError) as e2:
                f.get_tensor(bad)
            if bad == "nope":
                assert str(e1.value) == str(e2.value)
            with pytest.raises(safetensors.SafetensorError):
                f.get_slice(bad)
    for call in (f.keys, f.metadata, lambda: f.get_tensor("b_f32"),
                 lambda: f.get_slice("b_f32")):
        with pytest.raises(safetensors.SafetensorError) as e:
            call()
        assert str(e.value) == "File is closed"


INDEXES = [Ellipsis, 0, -1, 3, slice(None), slice(1, 3), slice(None, None, 2), slice(0, 4),
           slice(1, 1), slice(0, None, 10), (0, 1), (slice(None), 0), (Ellipsis, 1),
           (1, Ellipsis), (slice(1, 3), slice(None), slice(None, None, 3)), (0, 0, 0), (),
           (0, slice(None), slice(None), Ellipsis), True, None, (None, 0),
           slice(-3, None), slice(None, -1), slice(3, 1), slice(2, 10),
           # errors
           4, -5, slice(None, None, -1), (0, 0, 0, 0), 1.0, object()]


def test_slices_match_safetensors(tmp_path):
    torch = need_torch()
    import numpy as np
    from safetensors import safe_open
    p = str(tmp_path / "odd.safetensors")
    odd_file(torch, p)
    with safe_open(p, framework="pt") as own, fast_open(torch, p) as f:
        for idx in INDEXES + [np.int64(2), (np.int32(1), slice(np.int64(1), 4))]:
            try:
                want = own.get_slice("a_bf16")[idx]
            except Exception as e:
                with pytest.raises(type(e)):
                    f.get_slice("a_bf16")[idx]
                continue
            got = f.get_slice("a_bf16")[idx]
            assert same(torch, got, want), repr(idx)
            assert (got.stride(), got.is_contiguous()) == (want.stride(), want.is_contiguous())
        # one slice object serves many cuts, and then the whole tensor
        sl = f.get_slice("b_f32")
        want_b = own.get_tensor("b_f32")
        for a in range(6):
            assert same(torch, sl[a:a + 1, 1:4], want_b[a:a + 1, 1:4])
        assert same(torch, sl[...], want_b)
        assert same(torch, f.get_slice("f_scalar")[...], own.get_tensor("f_scalar"))
        assert same(torch, f.get_slice("c_empty")[:, 1:3], own.get_slice("c_empty")[:, 1:3])


def test_one_dim_slices_load_only_their_bytes(tmp_path):
    """get_slice(name)[a:b] and [:, a:b] load that slice alone (one range,
    strided along dim 1), not the file; other indexes cut the whole tensor."""
    torch = need_torch()
    from safetensors import safe_open
    p = str(tmp_path / "odd.safetensors")
    odd_file(torch, p)
    with safe_open(p, framework="pt") as own, fast_open(torch, p) as f:
        for name, idx in (("a_bf16", (slice(None), slice(1, 4))),
                          ("a_bf16", (slice(None), slice(None), slice(2, 5))),
                          ("b_f32", slice(2, 5)), ("j_f16", (slice(None), slice(-2, None))),
                          ("h_bool", (slice(None), slice(1, 2)))):
            PreadTransport.calls = []
            got = f.get_slice(name)[idx]
            want = own.get_slice(name)[idx]
            assert same(torch, got, want), (name, idx)
            assert len(PreadTransport.calls) == 1, "one load, of the slice alone"
            (r,) = PreadTransport.calls[0][1]
            rows = r[3] if len(r) > 3 else 1
            assert rows * r[1] == want.numel() * want.element_size(), (name, idx, r)
        PreadTransport.calls = []
        got = f.get_slice("b_f32")[1:3, 1:4]  # two dimensions: the whole file, then a cut
        assert same(torch, got, own.get_slice("b_f32")[1:3, 1:4])
        assert len(PreadTransport.calls) == 1 and len(PreadTransport.calls[0][1]) == 1
        assert PreadTransport.calls[0][1][0][1] > 6 * 5 * 4


def test_loads_batch_through_the_arena(tmp_path):
    torch = need_torch()
    import mcfs
    from mcfs import _abi, _loader
    p = str(tmp_path / "many.safetensors")
    # 1100 tensors of 3..40 bytes: with every other one selected, more ranges
    # than one load may carry
    sizes = [3 + (i * 7) % 38 for i in range(1100)]
    write_raw(p, [("t%04d" % i, "U8", [n], bytes([i % 251]) * n) for i, n in enumerate(sizes)])
    h = mcfs.read_header(p)
    fd = os.open(p, os.O_RDONLY)
    try:
        tr = PreadTransport(torch, fd, p)
        PreadTransport.calls = []
        got = _loader.load_tensors(torch, tr, h, h.tensors, "cpu", arena_bytes=1000)
        assert list(got) == [t.name for t in h.tensors]
        for i, n in enumerate(sizes):
            assert got["t%04d" % i].tolist() == [i % 251] * n
        calls = PreadTransport.calls
        assert all(len(r) == 1 for _, r, _ in calls), "adjacent tensors not in one range"
        assert [last for _, _, last in calls] == [False] * (len(calls) - 1) + [True]
        assert {arena for arena, _, _ in calls} == {1000}
        batch = [r[0][1] for _, r, _ in calls]
        assert sum(batch) == sum(sizes) and max(batch) <= 1000
        # each batch is as full as the next tensor allows
        starts = [r[0][0] - h.data_offset for _, r, _ in calls]
        by_begin = {t.begin: t.end - t.begin for t in h.tensors}
        for n, nxt in zip(batch, starts[1:]):
            assert n + by_begin[nxt] > 1000, (n, by_begin[nxt])

        PreadTransport.calls = []
        pick = h.tensors[::2]
        got = _loader.load_tensors(torch, tr, h, pick, "cpu", arena_bytes=1 << 20)
        most = _abi.LOAD_MAX_RANGES  # a request's ranges: the rest go in the next
        assert [len(r) for _, r, _ in PreadTransport.calls] == [most, len(pick) - most]
        for t in pick:
            i = int(t.name[1:])
            assert got[t.name].tolist() == [i % 251] * sizes[i]

        PreadTransport.calls = []
        one = _loader.load_tensors(torch, tr, h, [h.tensors[5]], "cpu")
        assert PreadTransport.calls == [(sizes[5], [(h.data_offset + h.tensors[5].begin,
                                                      sizes[5], 0)], True)]
        assert one["t0005"].tolist() == [5] * sizes[5]

        class FailsSecond(PreadTransport):
            def fill(self, buf, ranges, last):
                if len(PreadTransport.calls) == 1:
                    raise OSError(errno.EIO, "the store failed")
                super().fill(buf, ranges, last)

        # a load that fails between batches has the daemon drop the arena's mapping
        PreadTransport.calls = []
        with pytest.raises(OSError) as e:
            _loader.load_tensors(torch, FailsSecond(torch, fd, p), h, h.tensors, "cpu",
                                 arena_bytes=1000)
        assert e.value.errno == errno.EIO
        assert [(arena, r if r == "close" else len(r), last)
                for arena, r, last in PreadTransport.calls] == [(1000, 1, False),
                                                                 (1000, "close", True)]
    finally:
        os.close(fd)


def test_fallback_when_the_gpu_path_fails_here(tmp_path, capsys):
    torch = need_torch()
    from safetensors import safe_open
    p = str(tmp_path / "odd.safetensors")
    odd_file(torch, p)

    class NoIpc(PreadTransport):
        def fill(self, buf, ranges, last):
            raise OSError(errno.EOPNOTSUPP, "device memory cannot be exported with CUDA IPC")

    with safe_open(p, framework="pt") as own, fast_open(torch, p, NoIpc) as f:
        for k in own.keys():
            assert same(torch, f.get_tensor(k), own.get_tensor(k)), k
        assert same(torch, f.get_slice("a_bf16")[1:3, 2], own.get_slice("a_bf16")[1:3, 2])
    err = capsys.readouterr().err
    assert err.count("cannot be exported with CUDA IPC") == 1, err

    class Broken(PreadTransport):
        def fill(self, buf, ranges, last):
            raise OSError(errno.EIO, "the store failed")

    with fast_open(torch, p, Broken) as f:  # a failing store is an error, as for safetensors
        with pytest.raises(OSError) as e:
            f.get_tensor("a_bf16")
        assert e.value.errno == errno.EIO


def test_transformers_hook_routes_cpu_and_missing_gpus_to_the_original(tmp_path):
    torch = need_torch()
    import mcfs
    from mcfs import _switch
    from mcfs._safeopen import CpuSlice, FileLoads
    from safetensors import safe_open
    p = str(tmp_path / "odd.safetensors")
    odd_file(torch, p)
    seen = []

    def materialize(tensor, device=None, dtype=None):  # transformers 5's, in short
        seen.append((device, dtype))
        t = tensor[...]
        return t.to(device=device, dtype=dtype) if (device or dtype) else t

    hook = _switch._materialize_hook(materialize)
    fd = os.open(p, os.O_RDONLY)
    own = safe_open(p, framework="pt")
    loads = FileLoads(torch, fd, p, mcfs.read_header(p), PreadTransport)
    s = CpuSlice(own.get_slice("b_f32"), loads, loads.header.tensors[1])
    assert s.get_shape() == [6, 5] and s.get_dtype() == "F32"
    want = own.get_tensor("b_f32")
    assert same(torch, hook(s, "cpu", torch.float64), want.to(torch.float64))
    assert same(torch, hook(s, device=None), want)
    if not torch.cuda.is_available():  # no GPU: the original runs, and says why
        with pytest.raises((RuntimeError, AssertionError)):
            hook(s, "cuda:0")
    assert seen[:2] == [("cpu", torch.float64), (None, None)]
    os.close(fd)


FAKE_GPU_TRANSFORMERS = """
    import hashlib, json, os, sys, torch
    import mcfs, mcfs._switch as sw, mcfs._safeopen as so
    sys.path.insert(0, sys.argv[3])
    from test_safetensors_switch import PreadTransport
    fills = []

    class Counting(PreadTransport):
        def fill(self, buf, ranges, last):
            fills.append(len(ranges))
            super().fill(buf, ranges, last)

    if sys.argv[2] == "fake-gpu":
        # "cpu" plays the GPU: every "pt" file qualifies, loads pread
        sw._serve = lambda fd, path, cuda: (torch, mcfs.read_header_fd(fd))
        sw._cuda_device = lambda d: torch.device("cpu") if str(d) == "cpu" else None
        so.FileLoads.room = lambda self, dev, copies: True
        init = so.FileLoads.__init__
        so.FileLoads.__init__ = lambda self, t, fd, p, h, transport=None: init(self, t, fd, p, h,
                                                                            Counting)
        mcfs.patch_safetensors()
    import transformers
    from transformers import AutoModelForCausalLM
    out = {"version": transformers.__version__}
    for dt in ("bfloat16", "float32"):
        kw = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype":
              getattr(torch, dt)}
        m = AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map="cpu", **kw)
        sd = hashlib.sha256()
        for k, v in sorted(m.state_dict().items()):
            sd.update(k.encode())
            sd.update(v.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        out[dt] = sd.hexdigest()
    out["fills"] = len(fills)
    print(json.dumps(out))
"""


def test_transformers_loads_through_the_switch(tmp_path):
    """transformers' own from_pretrained with the switch's loads in the way:
    5.x through the _materialize_copy hook (shards opened on the CPU), 4.5x
    through FastSafeOpen (shards opened on the device). The CPU plays the
    GPU, the pread transport the DMA; the weights must equal an unpatched
    load's, also when transformers casts them (bf16 file, fp32 model)."""
    need_torch()
    pytest.importorskip("transformers", reason="transformers is not installed")
    import json
    shards = str(tmp_path / "llama")
    out = run_py("""
        import sys, torch
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(sys.argv[1],
                                                                 max_shard_size="1MB")
    """, shards)
    assert out.returncode == 0, out.stderr
    nshards = len([f for f in os.listdir(shards) if f.endswith(".safetensors")])
    assert nshards > 1
    res = {}
    for mode in ("plain", "fake-gpu"):
        out = run_py(FAKE_GPU_TRANSFORMERS, shards, mode, os.path.join(ROOT, "tests"))
        assert out.returncode == 0, out.stderr
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["plain"]["fills"] == 0
    # one whole-file load per shard and dtype
    assert res["fake-gpu"]["fills"] == 2 * nshards, res
    for dt in ("bfloat16", "float32"):
        assert res["fake-gpu"][dt] == res["plain"][dt], dt


# ---- diffusers: the from_pretrained hooks ---------------------------------

FAKE_GPU_DIFFUSERS = """
    import hashlib, json, os, sys, torch
    import mcfs, mcfs._switch as sw, mcfs._safeopen as so
    src, mode = sys.argv[1], sys.argv[2]
    sys.path.insert(0, sys.argv[3])
    from test_safetensors_switch import PreadTransport
    fills, served = [], []

    class Counting(PreadTransport):
        def fill(self, buf, ranges, last):
            fills.append(len(ranges))
            super().fill(buf, ranges, last)

    if mode != "plain":
        # "cpu" in a device_map plays the GPU; every file qualifies, loads pread
        one = sw._one_cuda_device

        def cpu_is_gpu(dm):
            vals = list(dm.values()) if isinstance(dm, dict) else [dm]
            return torch.device("cpu") if dm is not None and all(
                str(v) == "cpu" for v in vals) else one(dm)

        sw._one_cuda_device = cpu_is_gpu
        sw._serve = lambda fd, path, cuda: (torch, mcfs.read_header_fd(fd))
        load = sw._cuda_state_dict
        sw._cuda_state_dict = lambda p, d: (served.append(os.path.basename(p)), load(p, d))[1]
        so.FileLoads.room = lambda self, dev, copies: True
        init = so.FileLoads.__init__
        so.FileLoads.__init__ = lambda self, t, fd, p, h, transport=None: init(self, t, fd, p, h,
                                                                            Counting)
    if mode == "before":
        mcfs.patch_safetensors()
    from diffusers import AutoencoderKL, DDPMPipeline
    if mode == "after":
        mcfs.patch_safetensors()

    def digest(model):
        sd = hashlib.sha256()
        for k, v in sorted(model.state_dict().items()):
            sd.update(k.encode() + str(v.dtype).encode())
            sd.update(v.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return sd.hexdigest()

    out = {}
    for key, sub, kw in [("one", "vae", {"device_map": "cpu"}),
                         ("one-f16", "vae", {"device_map": "cpu", "torch_dtype": torch.float16}),
                         ("one-no-map", "vae", {}),
                         ("sharded", "vae-sharded", {"device_map": {"": "cpu"}}),
                         ("sharded-no-map", "vae-sharded", {})]:
        del fills[:], served[:]
        m = AutoencoderKL.from_pretrained(os.path.join(src, sub), **kw)
        out[key] = [digest(m), len(fills), sorted(served)]
    del fills[:], served[:]
    pipe = DDPMPipeline.from_pretrained(os.path.join(src, "ddpm"), device_map="cpu")
    out["pipeline"] = [digest(pipe.unet), len(fills), sorted(served)]
    if mode != "plain":
        import diffusers.models.modeling_utils as mu
        import diffusers.models.model_loading_utils as mlu

        def hooked():
            return [f.__module__ == "mcfs._switch" for f in (
                vars(mu.ModelMixin)["from_pretrained"].__func__, mu.load_state_dict,
                mu._load_shard_file, mlu.load_state_dict, mlu._load_shard_file)]

        out["hooked"] = hooked()
        mcfs.unpatch_safetensors()
        out["unhooked"] = hooked()
    print(json.dumps(out))
"""


def diffusers_models(src):
    out = run_py("""
        import os, sys, torch
        from diffusers import AutoencoderKL, DDPMPipeline, DDPMScheduler, UNet2DModel
        torch.manual_seed(0)
        vae = AutoencoderKL(block_out_channels=(32, 64), norm_num_groups=8,
                            down_block_types=("DownEncoderBlock2D",) * 2,
                            up_block_types=("UpDecoderBlock2D",) * 2)
        vae.save_pretrained(os.path.join(sys.argv[1], "vae"))
        vae.save_pretrained(os.path.join(sys.argv[1], "vae-sharded"), max_shard_size="300KB")
        unet = UNet2DModel(sample_size=16, block_out_channels=(32, 64), norm_num_groups=8,
                           layers_per_block=1, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                           up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(
            os.path.join(sys.argv[1], "ddpm"))
    """, src)
    assert out.returncode == 0, out.stderr
    return len([f for f in os.listdir(os.path.join(src, "vae-sharded"))
                if f.endswith(".safetensors")])


@pytest.mark.parametrize("parallel", [False, True])
def test_diffusers_loads_through_the_switch(tmp_path, monkeypatch, parallel):
    """diffusers' own from_pretrained (a model of one file, a sharded one, a
    pipeline) with the switch's hooks in the way, before and after diffusers
    is imported, and with HF_ENABLE_PARALLEL_LOADING: a device_map of one
    device loads each file by the fast path, once, to that device; no
    device_map leaves diffusers' own reads. The CPU plays the GPU, the pread
    transport the DMA; the weights (also cast to float16) equal an unpatched
    load's."""
    need_torch()
    pytest.importorskip("diffusers", reason="diffusers is not installed")
    pytest.importorskip("accelerate", reason="accelerate is not installed (diffusers' device_map)")
    import json
    src = str(tmp_path / "models")
    nshards = diffusers_models(src)
    assert nshards > 1
    monkeypatch.setenv("HF_ENABLE_PARALLEL_LOADING", "yes" if parallel else "no")
    res = {}
    for mode in ("plain", "before", "after"):
        out = run_py(FAKE_GPU_DIFFUSERS, src, mode, os.path.join(ROOT, "tests"))
        assert out.returncode == 0, out.stderr
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    plain = res["plain"]
    assert all(fills == 0 and served == [] for _, fills, served in plain.values()), plain
    shards = sorted(f for f in os.listdir(os.path.join(src, "vae-sharded"))
                    if f.endswith(".safetensors"))
    one = ["diffusion_pytorch_model.safetensors"]
    for mode in ("before", "after"):
        r = res[mode]
        for key in plain:
            assert r[key][0] == plain[key][0], (mode, key)
        assert r["one"][1:] == [1, one] and r["one-f16"][1:] == [1, one], (mode, r)
        assert r["sharded"][1:] == [nshards, shards], (mode, r)
        assert r["pipeline"][1:] == [1, one], (mode, r)
        assert r["one-no-map"][1:] == [0, []] and r["sharded-no-map"][1:] == [0, []], (mode, r)
        assert r["hooked"] == [True] * 5 and r["unhooked"] == [False] * 5, (mode, r)


def test_diffusers_device_maps_and_quantizers():
    """Which device_map values name one CUDA device, and a state dict read to
    the GPU for a load that turns out to be quantized reaches diffusers on
    the CPU."""
    torch = need_torch()
    from mcfs import _switch as sw
    cuda = torch.device
    assert sw._one_cuda_device("cuda:1") == cuda("cuda", 1)
    assert sw._one_cuda_device(0) == cuda("cuda", 0)
    assert sw._one_cuda_device(cuda("cuda", 2)) == cuda("cuda", 2)
    assert sw._one_cuda_device({"": 0}) == cuda("cuda", 0)
    assert sw._one_cuda_device({"down": "cuda:0", "up": 0}) == cuda("cuda", 0)
    for dm in (None, "auto", "balanced", "cpu", "disk", {"": "cpu"}, {"a": 0, "b": 1},
               {"a": 0, "b": "cpu"}, {"a": 0, "b": "disk"}, {}, True):
        assert sw._one_cuda_device(dm) is None, dm
    want = cuda("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    assert sw._one_cuda_device("cuda") == want

    seen = []

    def load_shard_file(shard_file, model, model_state_dict, device_map=None, dtype=None,
                        hf_quantizer=None, low_cpu_mem_usage=False):
        seen.append((type(shard_file).__name__, getattr(sw._target, "device", None)))
        return shard_file

    hook = sw._shard_file_hook(load_shard_file)
    sd = sw._CudaStateDict(w=torch.ones(3))
    hook(sd, None, {}, device_map={"": 0}, hf_quantizer=object(), low_cpu_mem_usage=True)
    hook(sd, None, {}, device_map={"": 0}, low_cpu_mem_usage=True)
    hook("x.safetensors", None, {}, device_map={"": 0}, low_cpu_mem_usage=True)
    hook("x.safetensors", None, {}, device_map={"": 0, "b": "cpu"}, low_cpu_mem_usage=True)
    assert seen == [("dict", None), ("_CudaStateDict", cuda("cuda", 0)),
                    ("str", cuda("cuda", 0)), ("str", None)]
    assert getattr(sw._target, "device", None) is None
