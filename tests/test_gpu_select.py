"""Loading only what a rank owns, without a GPU: which tensors names and globs
select, the error that names every pattern selecting nothing, the layout
(runs of adjacent tensors, the alignment each keeps), that libmcfs (C) and
the Python package lay out every selection the same way, the fallback with
a selection on a mount whose daemon has no GPU, and the daemon's checks of
a request with many ranges. The loads themselves run in tests/gpu.
"""
import ctypes
import errno
import json
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, mcfs_mount, need_root

sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
import mcfs  # noqa: E402
from mcfs import _abi, _select  # noqa: E402
from libmcfs_ctypes import Selection, Slice, StHeader, libmcfs  # noqa: E402

BITS = {"U8": 8, "F16": 16, "BF16": 16, "F32": 32, "I64": 64, "F64": 64, "I16": 16, "I32": 32, "BOOL": 8}


def header_bytes(entries):
    """entries: (name, dtype, nelem) in file order -> (header json bytes, data_len)."""
    h, at = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, n in entries:
        size = n * BITS[dt] // 8
        h[name] = {"dtype": dt, "shape": [n], "data_offsets": [at, at + size]}
        at += size
    raw = json.dumps(h).encode()
    return raw + b" " * (-len(raw) % 8), at


def write_file(path, entries, seed=0):
    raw, n = header_bytes(entries)
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + rnd.randbytes(n))


SMALL = [("a", "U8", 10), ("b", "F16", 4), ("c.0", "F32", 8), ("c.1", "F32", 8),
         ("e", "F32", 0), ("c.2", "I16", 9), ("d[0]", "I32", 1)]


def small_header():
    raw, n = header_bytes(SMALL)
    return mcfs.parse_header(raw, n)


def test_names_and_globs_select():
    h = small_header()
    names = [t.name for t in h.tensors]
    assert _select.resolve("f", names, ["c.*"]) == {"c.0", "c.1", "c.2"}
    assert _select.resolve("f", names, "a") == {"a"}
    # a pattern that is a tensor's name selects it, glob characters or not
    assert _select.resolve("f", names, ["d[0]"]) == {"d[0]"}
    assert _select.resolve("f", names, ["?", "c.[!1]"]) == {"a", "b", "e", "c.0", "c.2"}
    assert _select.resolve("f", names, []) == set()
    with pytest.raises(TypeError):
        _select.resolve("f", names, [b"a"])


def test_unknown_names_are_a_key_error_naming_them():
    names = [t.name for t in small_header().tensors]
    with pytest.raises(KeyError) as e:
        _select.resolve("/m/x.safetensors", names, ["nope", "c.*", "x*", "d[0-9]", "a"])
    assert isinstance(e.value, mcfs.UnknownTensorError)
    assert e.value.patterns == ["nope", "x*", "d[0-9]"]
    msg = str(e.value)
    assert msg == ("mcfs: /m/x.safetensors has no tensor named or matching "
                   "'nope', 'x*', 'd[0-9]'"), msg


def test_layout_runs_and_alignment():
    h = small_header()
    by = {t.name: t for t in h.tensors}

    def plan(names):
        return _select.plan([t for t in h.tensors if t.name in names])

    # everything: one run at 0, each tensor at its data-section offset
    ranges, dst, size = plan(set(by))
    assert ranges == [(0, h.data_len, 0)] and size == h.data_len
    assert all(dst[n] == by[n].begin for n in by)
    # adjacent tensors (an unselected empty one between them cuts nothing): one run
    ranges, dst, size = plan({"b", "c.0", "c.1", "c.2"})
    assert ranges == [(10, 90, 10)] and size == 100
    # a gap: two runs, the second at the first offset >= 10 that is 50 mod 256
    ranges, dst, size = plan({"a", "c.1"})
    assert ranges == [(0, 10, 0), (50, 32, 50)] and dst == {"a": 0, "c.1": 50} and size == 82
    assert plan(set()) == ([], {}, 0)


def test_batches_of_the_ioctl_limit():
    rs = [(i * 10, 5, i * 5) for i in range(1100)]
    b = _select.batches(rs, _abi.LOAD_MAX_RANGES)
    assert [len(x) for x in b] == [384, 384, 332] and sum(b, []) == rs


def c_select(lib, raw, data_len, patterns):
    hp = ctypes.POINTER(StHeader)()
    err = ctypes.create_string_buffer(4096)
    assert lib.mcfs_st_parse(raw, len(raw), data_len, ctypes.byref(hp), err, len(err)) == 0
    try:
        pats = (ctypes.c_char_p * max(1, len(patterns)))(*[p.encode() for p in patterns])
        sp = ctypes.POINTER(Selection)()
        rc = lib.mcfs_select(hp, pats, len(patterns), ctypes.byref(sp), err, len(err))
        if rc < 0:
            return rc, err.value.decode()
        s = sp.contents
        doff = hp.contents.data_offset
        ranges = [(s.ranges[i].file_off - doff, s.ranges[i].len, s.ranges[i].dst_off)
                  for i in range(s.nranges)]
        dst = {s.tensors[i].contents.name.decode(): s.dst[i] for i in range(s.n)}
        out = (ranges, dst, s.bytes)
        lib.mcfs_selection_free(sp)
        return 0, out
    finally:
        lib.mcfs_st_free(hp)


def test_c_and_python_lay_out_the_same():
    lib = libmcfs()
    rnd = random.Random(13)
    for trial in range(40):
        entries = [("layer.%d.%s" % (i // 4, "wqkv"[i % 4]), rnd.choice(list(BITS)),
                    rnd.choice([0, 1, 3, 7, 64, 1000, 4099])) for i in range(rnd.randint(1, 120))]
        raw, n = header_bytes(entries)
        h = mcfs.parse_header(raw, n)
        names = [t.name for t in h.tensors]
        pats = rnd.sample(names, rnd.randint(0, len(names)))
        if trial % 3 == 0:
            pats.append("layer.%d.*" % rnd.randint(0, 30))
        if trial % 5 == 0:
            pats.append("layer.?.[wq]")
        try:
            chosen = _select.resolve("f", names, pats)
            want = _select.plan([t for t in h.tensors if t.name in chosen])
        except mcfs.UnknownTensorError as e:
            rc, msg = c_select(lib, raw, n, pats)
            assert rc == -errno.ENOENT and all("'%s'" % p in msg for p in e.patterns), msg
            continue
        rc, got = c_select(lib, raw, n, pats)
        assert rc == 0, got
        assert got == want, (pats, got, want)


def c_slices(lib, raw, data_len, patterns, slices):
    """mcfs_select_slices: (rc, (ranges, dst, bytes, cuts)) or (rc, message)."""
    hp = ctypes.POINTER(StHeader)()
    err = ctypes.create_string_buffer(4096)
    assert lib.mcfs_st_parse(raw, len(raw), data_len, ctypes.byref(hp), err, len(err)) == 0
    try:
        pats = None
        if patterns is not None:
            pats = (ctypes.c_char_p * max(1, len(patterns)))(*[p.encode() for p in patterns])
        sl = (Slice * max(1, len(slices)))(*slices)
        sp = ctypes.POINTER(Selection)()
        rc = lib.mcfs_select_slices(hp, pats, 0 if patterns is None else len(patterns), sl,
                                    len(slices), ctypes.byref(sp), err, len(err))
        if rc < 0:
            return rc, err.value.decode()
        s = sp.contents
        doff = hp.contents.data_offset
        ranges = []
        for i in range(s.nranges):
            r = s.ranges[i]
            ranges.append((r.file_off - doff, r.len, r.dst_off)
                          + ((r.count, r.src_stride) if r.count > 1 else ()))
        dst = {s.tensors[i].contents.name.decode(): s.dst[i] for i in range(s.n)}
        cuts = {s.tensors[i].contents.name.decode(): (s.cuts[i].dim, s.cuts[i].start,
                                                      s.cuts[i].stop)
                for i in range(s.n) if s.cuts[i].dim >= 0}
        out = (ranges, dst, s.bytes, cuts)
        lib.mcfs_selection_free(sp)
        return 0, out
    finally:
        lib.mcfs_st_free(hp)


def test_c_and_python_slice_the_same():
    """Random multi-dimensional headers, slices and plans: libmcfs and the
    Python package take the same cuts, ranges and layout, and refuse the
    same bad slices."""
    import json
    from mcfs import _slices
    lib = libmcfs()
    rnd = random.Random(24)
    u64 = 2 ** 64 - 1
    lo = hi = 0
    for trial in range(600):
        h, at = {}, 0
        for i in range(rnd.randint(1, 12)):
            dt = rnd.choice(list(BITS))
            shape = [rnd.choice([1, 2, 3, 5, 8, 13]) for _ in range(rnd.randint(0, 4))]
            n = BITS[dt] // 8
            for d in shape:
                n *= d
            h["t%d.%s" % (i, "qkvo"[i % 4])] = {"dtype": dt, "shape": shape,
                                                "data_offsets": [at, at + n]}
            at += n  # (the parser refuses gaps; unselected tensors cut runs)
        raw = json.dumps(h).encode()
        raw += b" " * (-len(raw) % 8)
        try:
            hd = mcfs.parse_header(raw, at)
        except mcfs.HeaderError:
            continue  # gaps at the end are refused; not this test's business
        names = [t.name for t in hd.tensors]
        pats = None if trial % 2 else rnd.sample(names, rnd.randint(1, len(names)))
        rank, world = rnd.randint(0, 2), rnd.randint(1, 3)
        split, slices, cs = {}, {}, []
        if trial % 3:
            for g in rnd.sample(["*.q", "*.k", "*.v", "*.o", "t1*", "none*"], 2):
                split[g] = rnd.randint(-2, 2)
                cs.append(Slice(g.encode(), split[g], world, 0, 0, rank))
        for name in rnd.sample(names, min(len(names), rnd.randint(0, 2))):
            dim, a = rnd.randint(-1, 3), rnd.randint(0, 9)
            b = rnd.choice([a + rnd.randint(0, 6), u64])
            slices[name] = (dim, a, None if b == u64 else b)
            cs.append(Slice(name.encode(), dim, 0, a, b, 0))
        try:
            chosen = hd.tensors if pats is None else \
                [t for t in hd.tensors if t.name in _select.resolve("f", names, pats)]
            cuts = _slices.resolve_slices("f", chosen, slices or None,
                                          rank if split else None, world if split else None,
                                          split or None)
            want = _slices.plan(chosen, cuts)
        except (ValueError, KeyError) as e:
            if rank >= world and split:
                continue  # Python checks rank first; C too, for any entry
            rc, msg = c_slices(lib, raw, at, pats, cs)
            assert rc in (-errno.EINVAL, -errno.ENOENT), (trial, e, msg)
            lo += 1
            continue
        if split and rank >= world:
            continue
        rc, got = c_slices(lib, raw, at, pats, cs)
        assert rc == 0, (trial, got, split, slices)
        ranges, dst, size, _ = want
        assert got == (ranges, dst, size, cuts), (trial, split, slices)
        hi += 1
    assert lo > 20 and hi > 120, (lo, hi)  # both kinds tried often
    for n in range(30):
        for w in range(1, 6):
            for r in range(w):
                a, b = ctypes.c_uint64(), ctypes.c_uint64()
                lib.mcfs_shard_bounds(n, r, w, ctypes.byref(a), ctypes.byref(b))
                assert (a.value, b.value) == _slices.shard_bounds(n, r, w)


def test_libmcfs_load_tensors_errors(tmp):
    lib = libmcfs()
    path = str(tmp / "src" / "s.safetensors")
    write_file(path, SMALL)
    err = ctypes.create_string_buffer(512)
    pats = (ctypes.c_char_p * 1)(b"c.*")
    n = lib.mcfs_load_tensors(path.encode(), pats, 1, None, 0, None, err, len(err))
    assert n == -errno.ENOTTY and b"not on an mcfs mount" in err.value, (n, err.value)
    need_root()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        if mcfs.info(m.p("s.safetensors"))["gpu_ok"]:
            pytest.skip("this machine has a GPU: tests/gpu covers loads")
        n = lib.mcfs_load_tensors(m.p("s.safetensors").encode(), pats, 1, None, 0, None, err,
                                  len(err))
        assert n == -errno.ENODEV and b"GPU path unavailable" in err.value, (n, err.value)


FALLBACK = textwrap.dedent("""
    import sys, types
    import numpy as np
    from safetensors import safe_open as np_open
    torch = types.ModuleType("torch")
    class _Dev:
        def __init__(self, s, index=None):
            self.type, _, i = str(s).partition(":")
            self.index = int(i) if i else index
        def __str__(self):
            return self.type + (":%d" % self.index if self.index is not None else "")
    torch.device = _Dev
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    sys.modules["torch"] = torch
    st = types.ModuleType("safetensors.torch")
    class Open:
        # safetensors' own reader (numpy flavour) behind the torch one's interface
        def __init__(self, path, framework, device):
            self.f = np_open(path, framework="np")
        def __enter__(self):
            return self
        def __exit__(self, *a):
            return False
        def keys(self):
            return self.f.keys()
        def get_tensor(self, k):
            return self.f.get_tensor(k)
    st.safe_open = Open
    sys.modules["safetensors.torch"] = st
    import mcfs
    try:
        got = mcfs.load_file(sys.argv[1], device="cuda:0", tensors=sys.argv[2:])
    except KeyError as e:
        print("KeyError", e)
    else:
        print(sorted(got), *[got[k].tobytes().hex() for k in sorted(got)])
""")


def test_fallback_with_a_selection(tmp):
    need_root()
    path = str(tmp / "src" / "s.safetensors")
    write_file(path, SMALL, seed=5)
    from safetensors.numpy import load_file
    want = load_file(path)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "gpu", "python"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        if mcfs.info(m.p("s.safetensors"))["gpu_ok"]:
            pytest.skip("this machine has a GPU: tests/gpu covers loads")
        out = subprocess.run([sys.executable, "-c", FALLBACK, m.p("s.safetensors"), "c.*", "a"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "loading with safetensors instead" in out.stderr
        names = ["a", "c.0", "c.1", "c.2"]
        line = out.stdout.strip()
        assert line.startswith(repr(names)), line
        assert line[len(repr(names)):].split() == [want[k].tobytes().hex() for k in names]
        out = subprocess.run([sys.executable, "-c", FALLBACK, m.p("s.safetensors"), "zz", "a"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "KeyError" in out.stdout and "'zz'" in out.stdout and "'a'" not in out.stdout


def ioctl_errno(fd, req):
    try:
        _abi.ioctl(fd, _abi.IOC_LOAD, req)
        return 0
    except OSError as e:
        return e.errno


def test_daemon_checks_every_range_of_a_full_request(tmp):
    """LOAD_MAX_RANGES ranges pass the daemon's checks (ENODEV without a GPU); one bad range
    among them, wherever it is, fails the whole request before any copy."""
    need_root()
    size = (3 << 20) + 5
    with open(str(tmp / "src" / "f.bin"), "wb") as f:
        f.write(os.urandom(size))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=64M", "block_size=1M"]) as m:
        if mcfs.info(m.p("f.bin"))["gpu_ok"]:
            pytest.skip("this machine has a GPU: tests/gpu covers loads")
        fd = os.open(m.p("f.bin"), os.O_RDONLY)
        try:
            def full():
                r = _abi.LoadReq(abi_version=_abi.ABI, nranges=_abi.LOAD_MAX_RANGES)
                for i in range(_abi.LOAD_MAX_RANGES):
                    r.ranges[i].file_off = i * 6000
                    r.ranges[i].len = 5000
                    r.ranges[i].dst_off = i * 5000
                return r
            assert ioctl_errno(fd, full()) == errno.ENODEV
            r = full()
            r.ranges[300].file_off = size - 10  # 5000 bytes from 10 before EOF
            assert ioctl_errno(fd, r) == errno.ERANGE
            r = full()
            r.ranges[_abi.LOAD_MAX_RANGES - 1].file_off = 2 ** 64 - 100  # its end overflows
            assert ioctl_errno(fd, r) == errno.EINVAL
            r = full()
            r.ranges[7].file_off = size  # empty, at EOF: allowed
            r.ranges[7].len = 0
            assert ioctl_errno(fd, r) == errno.ENODEV
        finally:
            os.close(fd)
