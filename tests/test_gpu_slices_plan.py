"""Tensor slices without a GPU: the Python package's slice and plan arithmetic
(gpu/python/mcfs/_slices.py). The ranges it would send are replayed over the
file's bytes into a bytearray standing for the device buffer, and each
result must be bitwise safetensors' own `safe_open(f, "np").get_slice(name)
[...]`, with the same shape; the ranges must read only the slices' bytes.
Also the shard bounds of a plan (ceil-divided, the last shorter), and the
errors of bad slices. The copies themselves run in tests/gpu.
"""
import os
import random
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import mcfs  # noqa: E402
from mcfs import _abi, _slices  # noqa: E402
from gpuutil import write_raw  # noqa: E402

np = pytest.importorskip("numpy", reason="numpy is not installed")
safetensors = pytest.importorskip("safetensors", reason="safetensors is not installed")

SIZE = {"U8": 1, "I8": 1, "I16": 2, "F16": 2, "I32": 4, "F32": 4, "I64": 8, "F64": 8}


def make(path, specs, pad=3):
    """specs: (name, dtype, shape); a `pad`-byte tensor before each one puts
    them at odd offsets. Returns the names."""
    rnd = random.Random(7)
    entries = []
    for name, dt, shape in specs:
        entries.append(("pad." + name, "U8", [pad], bytes(rnd.randrange(256) for _ in range(pad))))
        n = SIZE[dt]
        for d in shape:
            n *= d
        entries.append((name, dt, shape, bytes(rnd.randrange(256) for _ in range(n))))
    write_raw(path, entries)


def replay(path, ranges, size):
    """The device buffer after the ioctl copies `ranges` (data-section offsets)."""
    h = mcfs.read_header(path)
    with open(path, "rb") as f:
        data = f.read()
    buf = bytearray(size)
    read = 0
    for r in ranges:
        off, n, at = r[:3]
        rows, stride = (r[3], r[4]) if len(r) > 3 else (1, 0)
        assert rows == 1 or stride >= n
        for i in range(rows):
            src = h.data_offset + off + i * stride
            buf[at + i * n:at + (i + 1) * n] = data[src:src + n]
            read += n
    return buf, read


def check(path, **kw):
    """Plans a load of `path` with load_file's slicing arguments `kw`, replays
    it, and compares each tensor with safetensors' get_slice. Returns cuts."""
    h = mcfs.read_header(path)
    cuts = _slices.resolve_slices(path, h.tensors, kw.get("slices"), kw.get("rank"),
                                  kw.get("world"), kw.get("split"))
    ranges, dst, size, views = _slices.plan(h.tensors, cuts)
    assert len(ranges) <= _abi.LOAD_MAX_RANGES
    _abi.LoadReq().ranges[0].count = 1  # the ABI has the field the ranges fill
    buf, read = replay(path, ranges, size)
    assert read == sum(v.end - v.begin for v in views), "ranges read more than the slices"
    with safetensors.safe_open(path, framework="np") as f:
        for v in views:
            if v.name in cuts and cuts[v.name][1] == cuts[v.name][2]:
                # safetensors refuses an empty slice at the end ([4:4] of 4)
                want = np.empty(v.shape, dtype=f.get_slice(v.name)[:0].dtype)
            elif v.name in cuts:
                want = f.get_slice(v.name)[_slices.index(*cuts[v.name])]
            else:
                want = f.get_tensor(v.name)
            want = np.ascontiguousarray(want)
            assert list(want.shape) == list(v.shape), v.name
            got = bytes(buf[dst[v.name]:dst[v.name] + v.end - v.begin])
            assert got == want.tobytes(), "bytes of %s differ" % v.name
    return cuts


SPECS = [("a", "F32", [6, 10]), ("b", "U8", [5, 7, 3]), ("c", "F16", [9, 4]),
         ("d", "I64", [3, 5]), ("e", "F64", [2, 3, 4, 5]), ("s", "I16", [7])]


def test_shard_bounds():
    assert [_slices.shard_bounds(8, r, 2) for r in range(2)] == [(0, 4), (4, 8)]
    # ceil-divided, the last shorter; empty when earlier shards cover it all
    assert [_slices.shard_bounds(10, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [_slices.shard_bounds(2, r, 4) for r in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]
    for n in range(0, 40):
        for w in range(1, 9):
            b = [_slices.shard_bounds(n, r, w) for r in range(w)]
            assert b[0][0] == 0 and b[-1][1] == n
            assert all(b[i][1] == b[i + 1][0] for i in range(w - 1))
            assert all(0 <= hi - lo <= -(-n // w) for lo, hi in b)
    for bad in ((4, 1, 0), (4, 2, 2), (4, -1, 2), (4, 0, 1.5)):
        with pytest.raises(ValueError):
            _slices.shard_bounds(*bad)


def test_slices_along_each_dim(tmp_path):
    p = str(tmp_path / "m.safetensors")
    make(p, SPECS)
    check(p, slices={"a": (0, 2, 5)})            # dim 0: one contiguous range
    check(p, slices={"a": (1, 3, 8)})            # dim 1: 6 rows of 5 floats
    check(p, slices={"b": (1, 2, 6)})            # 3-D, middle dim
    check(p, slices={"b": (2, 1, 2), "c": (-1, 1, None), "d": (1, -2, None)})
    check(p, slices={"e": (2, 1, 3), "a": (1, 0, 10)})  # a: whole, left whole
    check(p, slices={"[abcde]": (0, 1, 2)})
    check(p, slices={"a": (1, 4, 4)})            # empty
    check(p, slices={"a": (1, 8, 100)})          # clamped as Python slices are


def test_plan_of_two_ranks(tmp_path):
    p = str(tmp_path / "m.safetensors")
    make(p, SPECS)
    split = {"a": 0, "b": 1, "c": 1, "e": -1, "nothing.*": 0}  # a glob may match nothing
    for world in (2, 3):
        got = [check(p, rank=r, world=world, split=split) for r in range(world)]
        # the shards of each tensor tile its dimension
        for name, dim in (("a", 0), ("b", 1), ("c", 1), ("e", 3)):
            n = {t.name: t for t in mcfs.read_header(p).tensors}[name].shape[dim]
            bounds = [g[name][1:] if name in g else (0, n) for g in got]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(bounds[i][1] == bounds[i + 1][0] for i in range(world - 1))
    # slices win over the plan for the tensors they name
    cuts = check(p, rank=1, world=2, split={"*": 0}, slices={"a": (1, 0, 3)})
    assert cuts["a"] == (1, 0, 3) and cuts["c"] == (0, 5, 9)


def test_bad_slices(tmp_path):
    p = str(tmp_path / "m.safetensors")
    make(p, SPECS)
    h = mcfs.read_header(p).tensors
    with pytest.raises(mcfs.UnknownTensorError):
        _slices.resolve_slices(p, h, {"zz*": (0, 0, 1)})
    with pytest.raises(ValueError, match="dimensions"):
        _slices.resolve_slices(p, h, {"a": (2, 0, 1)})
    with pytest.raises(ValueError, match="different slices"):
        _slices.resolve_slices(p, h, {"a": (0, 0, 1), "[a]": (0, 0, 2)})
    with pytest.raises(ValueError, match="together"):
        _slices.resolve_slices(p, h, None, rank=0, world=None, split={"a": 0})
    with pytest.raises(ValueError, match="rank"):
        _slices.resolve_slices(p, h, None, rank=2, world=2, split={"a": 0})


def test_switch_serves_one_dim_slices():
    """Which get_slice indexes the switch loads as a slice alone."""
    from mcfs._header import Tensor
    from mcfs._safeopen import one_dim
    e = Tensor("w", "F32", [4, 6, 8], 0, 4 * 6 * 8 * 4)
    assert one_dim(slice(1, 3), e) == (0, 1, 3)
    assert one_dim((slice(None), slice(2, 4)), e) == (1, 2, 4)
    assert one_dim((slice(None), slice(None), slice(-3, None)), e) == (2, 5, 8)
    assert one_dim((slice(None), slice(1, 2), slice(None)), e) == (1, 1, 2)
    assert one_dim((slice(None, 3, 1),), e) == (0, 0, 3)
    np_int = np.int64(2)
    assert one_dim((slice(None), slice(np_int, 5)), e) == (1, 2, 5)
    # the whole tensor answers these
    for idx in (slice(0, 4), (slice(None),), slice(0, 4, 2), (slice(1, 2), slice(1, 2)), 1,
                slice(3, 3), slice(2, 9), slice(-9, 2), (Ellipsis, slice(1, 2)), Ellipsis, (),
                None, (None, slice(1, 2)), slice(True, 2), slice(1.0, 2),
                (slice(None),) * 4):
        assert one_dim(idx, e) is None, idx
    assert one_dim(slice(1, 2), Tensor("f4", "F4", [4, 6], 0, 12)) is None
