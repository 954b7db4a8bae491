"""Loading only what a rank owns, on a real GPU: mcfs.load_file(path, device,
tensors=[names or globs]) returns exactly the selected tensors, bitwise equal
to safetensors' own; the daemon fetches only the blocks those tensors lie in
and copies only their bytes (its log says what each request copied); a
selection of more runs than one request holds goes in several requests; names
that select nothing raise a KeyError naming them; libmcfs's
mcfs_load_tensors() does the same from C. Skips with the reason without a GPU.
"""
import ctypes
import errno
import os
import re
import time

import pytest

from gpuutil import assert_same, need_gpu, write_raw
from conftest import mcfs_mount
from libmcfs_ctypes import Selection, libmcfs

import mcfs
from mcfs import _select

MiB = 1 << 20


def model(torch, path, n=48, seed=11):
    """n layers of three tensors (mixed dtypes and sizes, some at odd offsets)."""
    gen = torch.Generator().manual_seed(seed)
    rb = lambda k: bytes(torch.randint(0, 256, (k,), dtype=torch.uint8,  # noqa: E731
                                       generator=gen).numpy())
    entries = []
    for i in range(n):
        entries.append(("layers.%d.w" % i, "BF16", [512, 700], rb(512 * 700 * 2)))
        entries.append(("layers.%d.norm" % i, "F32", [33], rb(33 * 4)))
        entries.append(("layers.%d.bias" % i, "U8", [5], rb(5)))  # leaves the next odd
    entries.append(("lm_head", "F16", [1000, 64], rb(128000)))
    write_raw(path, entries)


def load_lines(m):
    return [int(x) for x in re.findall(r"ioctl: loaded (\d+) bytes", m.log())]


def touched_blocks(header, ranges, bs):
    out = set()
    for off, n, _ in ranges:
        a = header.data_offset + off
        out.update(range(a // bs, (a + n - 1) // bs + 1))
    return out


def settled_cached(m, path):
    """Bytes of `path` cached once the kernel's readahead of the header is done."""
    last = None
    while True:
        now = int(os.getxattr(path, "user.mcfs.cached").decode())
        if now == last and m.stats()["inflight"] == 0:
            return now
        last = now
        time.sleep(0.05)


def test_selection_fetches_and_copies_only_its_share(tmp):
    torch = need_gpu()
    from safetensors import safe_open
    src = str(tmp / "src" / "m.safetensors")
    model(torch, src)
    # layers 10-19 start about 7 MiB in: far from the header's blocks
    pats = ["layers.1?.*", "layers.3?.w", "lm_head"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=128M", "block_size=1M", "readahead_max=0",
                          "read_ahead_kb=0", "log_level=debug"]) as m:
        path = m.p("m.safetensors")
        h = mcfs.read_header(path)  # reads the header through FUSE (and the kernel's readahead)
        held = -(-settled_cached(m, path) // MiB)  # blocks the header's reads touched
        names = _select.resolve(path, [t.name for t in h.tensors], pats)
        chosen = [t for t in h.tensors if t.name in names]
        ranges, _, _ = _select.plan(chosen)
        want_blocks = {b for b in touched_blocks(h, ranges, MiB) if b >= held}
        s0 = m.stats()
        got = mcfs.load_file(path, device="cuda:0", tensors=pats)
        fetched = m.stats()["fetches"] - s0["fetches"]
        assert sorted(got) == sorted(names)
        assert len(names) == 10 * 3 + 10 + 1
        with safe_open(src, framework="pt", device="cuda:0") as f:
            want = {k: f.get_tensor(k) for k in names}
        assert_same(torch, got, want)
        # the store sent only the blocks of the selection (the header's excepted)
        assert fetched == len(want_blocks), (fetched, len(want_blocks), held)
        total_blocks = (os.path.getsize(src) + MiB - 1) // MiB
        assert fetched < total_blocks - held, "the whole file was fetched"
        # and the daemon copied only the selected bytes, in one request
        assert load_lines(m)[-1:] == [sum(t.end - t.begin for t in chosen)]


def test_more_runs_than_one_request_holds(tmp):
    """1200 runs (every other tensor of 2400): requests of at most LOAD_MAX_RANGES
    runs each (384 since ABI 3: 4 requests)."""
    torch = need_gpu()
    from safetensors.torch import load_file, save_file
    gen = torch.Generator().manual_seed(12)
    ts = {"t%04d" % i: torch.randint(0, 256, ((i % 13) + 1, 3), dtype=torch.uint8,
                                     generator=gen).view(torch.int8) for i in range(2400)}
    save_file(ts, str(tmp / "src" / "k.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=64M", "log_level=debug"]) as m:
        path = m.p("k.safetensors")
        h = mcfs.read_header(path)
        order = [t.name for t in h.tensors]
        pick = order[::2]  # in file order, so no two are adjacent
        n0 = len(load_lines(m))
        got = mcfs.load_file(path, device="cuda", tensors=pick)
        want = load_file(str(tmp / "src" / "k.safetensors"), device="cuda")
        assert_same(torch, got, {k: want[k] for k in pick})
        sent = load_lines(m)[n0:]
        from mcfs import _abi
        assert len(sent) == -(-1200 // _abi.LOAD_MAX_RANGES), sent  # 384 + 384 + 384 + 48
        assert sum(sent) == sum(t.end - t.begin for t in h.tensors if t.name in set(pick))
        # every request but the last kept the mapping; the last closed it: a new
        # buffer at the same address (the old one freed) loads correctly again
        del got
        torch.cuda.empty_cache()
        again = mcfs.load_file(path, device="cuda", tensors=pick[:5])
        assert_same(torch, again, {k: want[k] for k in pick[:5]})


def test_unknown_names_and_empty_selection(tmp):
    torch = need_gpu()
    from safetensors.torch import save_file
    save_file({"a": torch.zeros(3), "b.x": torch.ones(2)}, str(tmp / "src" / "s.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        path = m.p("s.safetensors")
        with pytest.raises(KeyError) as e:
            mcfs.load_file(path, device="cuda:0", tensors=["a", "nope", "c.*"])
        assert isinstance(e.value, mcfs.UnknownTensorError)
        assert "'nope', 'c.*'" in str(e.value) and path in str(e.value)
        assert mcfs.load_file(path, device="cuda:0", tensors=[]) == {}
        got = mcfs.load_file(path, device="cuda:0", tensors="b.*")
        assert list(got) == ["b.x"] and got["b.x"].tolist() == [1.0, 1.0]


def test_libmcfs_load_tensors(tmp):
    torch = need_gpu()
    lib = libmcfs()
    src = str(tmp / "src" / "m.safetensors")
    model(torch, src, n=12, seed=13)
    with open(src, "rb") as f:
        data = f.read()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=64M", "block_size=1M"]) as m:
        path = m.p("m.safetensors")
        h = mcfs.read_header(path)
        pats = [b"layers.[2-4].*", b"lm_head"]
        arr = (ctypes.c_char_p * 2)(*pats)
        cap = 64 * MiB
        buf = torch.full((cap,), 0x5A, dtype=torch.uint8, device="cuda:0")
        sel = ctypes.POINTER(Selection)()
        err = ctypes.create_string_buffer(512)
        n = lib.mcfs_load_tensors(path.encode(), arr, 2, ctypes.c_void_p(buf.data_ptr()), cap,
                                  ctypes.byref(sel), err, len(err))
        assert n > 0, err.value
        torch.cuda.synchronize()
        s = sel.contents
        host = bytes(buf[:s.bytes].cpu().numpy().tobytes())
        names = []
        for i in range(s.n):
            t = s.tensors[i].contents
            names.append(t.name.decode())
            want = data[h.data_offset + t.begin:h.data_offset + t.end]
            assert host[s.dst[i]:s.dst[i] + len(want)] == want, names[-1]
        assert n == sum(t.end - t.begin for t in (s.tensors[i].contents for i in range(s.n)))
        assert sorted(names) == sorted(x for x in (t.name for t in h.tensors)
                                       if x == "lm_head" or re.match(r"layers\.[2-4]\.", x))
        assert bytes(buf[s.bytes:s.bytes + 4096].cpu().numpy()) == b"\x5a" * 4096
        lib.mcfs_selection_free(sel)
        # a buffer too small for the selection: refused before any byte moves
        n = lib.mcfs_load_tensors(path.encode(), arr, 2, ctypes.c_void_p(buf.data_ptr()), 1000,
                                  None, err, len(err))
        assert n == -errno.ENOSPC and b"needs" in err.value, (n, err.value)
        arr1 = (ctypes.c_char_p * 1)(b"zz*")
        n = lib.mcfs_load_tensors(path.encode(), arr1, 1, ctypes.c_void_p(buf.data_ptr()), cap,
                                  None, err, len(err))
        assert n == -errno.ENOENT and b"'zz*'" in err.value, (n, err.value)
