"""Tensor slices on a real GPU (the device machine): mcfs.load_file with
`slices` and with a tensor-parallel plan, and the switch's get_slice, each
bitwise equal to safetensors' `safe_open(f, framework="pt", device="cpu")
.get_slice(name)[...]`; the daemon's byte counter shows that only the
slices' bytes were copied. Files have tensors at odd offsets (write_raw)
of 1, 2, 4 and 8-byte dtypes, larger than the 1 MiB blocks the mounts use,
so that strided rows straddle block boundaries. Two ranks of world 2 load at
once, in two processes. Skips with the reason without a GPU.
"""
import hashlib
import os
import subprocess
import sys
import time

import pytest

from gpuutil import ROOT, need_gpu, raw_bytes, write_raw
from conftest import mcfs_mount

import mcfs

PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "gpu", "python"))
OPTS = ["ram_cache=64M", "block_size=1M"]

# name, dtype, shape: every one but the last two larger than a 1 MiB block
SPECS = [("u8", "U8", [1031, 1100]), ("bf16", "BF16", [700, 999]),
         ("f16_3d", "F16", [5, 333, 401]), ("f32", "F32", [517, 1023]),
         ("f64_3d", "F64", [3, 257, 201]), ("i64", "I64", [129, 1030]),
         ("i8_small", "I8", [7, 9]), ("f32_1d", "F32", [1000])]

# each: {name: (dim, start, stop)} for one load_file call
CASES = [
    {"u8": (0, 3, 1000), "bf16": (0, 1, 699), "f32": (0, 100, 517), "i64": (0, 0, 65)},
    {"u8": (1, 5, 1099), "bf16": (1, 333, 998), "f32": (1, 1, 512), "i64": (1, 515, 1030),
     "i8_small": (1, 2, 7)},
    {"f16_3d": (1, 17, 300), "f64_3d": (1, 1, 256)},
    {"f16_3d": (2, 3, 400), "f64_3d": (0, 1, 3), "f32_1d": (0, 10, 999)},
    {"f16_3d": (-1, -100, None), "bf16": (1, None, 7)},
]


def odd_file(torch, path):
    """SPECS at odd offsets (a 3-byte tensor before each)."""
    gen = torch.Generator().manual_seed(24)
    entries = []
    for name, dt, shape in SPECS:
        size = {"U8": 1, "I8": 1, "BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8}[dt]
        for d in shape:
            size *= d
        pad = bytes(torch.randint(0, 256, (3,), dtype=torch.uint8, generator=gen).numpy())
        data = bytes(torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen).numpy())
        entries += [("pad." + name, "U8", [3], pad), (name, dt, shape, data)]
    write_raw(path, entries)


def index(dim, start, stop, ndim=None):
    """get_slice's index for a slice along dim (negative: from the end of ndim)."""
    if dim < 0:
        dim += ndim
    return (slice(None),) * dim + (slice(start, stop),)


def same_cpu(torch, got, want, what):
    assert got.dtype == want.dtype, what
    assert tuple(got.shape) == tuple(want.shape), (what, got.shape, want.shape)
    assert got.device.type == "cuda", what
    assert raw_bytes(torch, got) == raw_bytes(torch, want), "bytes differ in %s" % (what,)


def slice_bytes(want):
    return want.numel() * want.element_size()


def test_slices_equal_get_slice(tmp):
    torch = need_gpu()
    from safetensors import safe_open
    src = str(tmp / "src" / "odd.safetensors")
    odd_file(torch, src)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m, \
            safe_open(src, framework="pt", device="cpu") as own:
        for case in CASES:
            s0 = m.stats()
            got = mcfs.load_file(m.p("odd.safetensors"), device="cuda:0",
                                 tensors=list(case), slices=case)
            assert sorted(got) == sorted(case)
            copied = 0
            for name, sl in case.items():
                ndim = len(own.get_slice(name).get_shape())
                want = own.get_slice(name)[index(*sl, ndim=ndim)]
                same_cpu(torch, got[name], want, (name, sl))
                copied += slice_bytes(want)
            # only the slices' bytes crossed PCIe (the daemon counts what it copied)
            assert m.stats()["gpu_load_bytes"] - s0["gpu_load_bytes"] == copied, case
        # the unsliced tensors come whole beside the sliced ones
        got = mcfs.load_file(m.p("odd.safetensors"), device="cuda:0",
                             slices={"f32": (1, 7, 700)})
        assert len(got) == 2 * len(SPECS)
        for name in own.keys():
            want = own.get_slice(name)[index(1, 7, 700)] if name == "f32" \
                else own.get_tensor(name)
            same_cpu(torch, got[name], want, name)


def test_slice_rows_straddling_blocks(tmp):
    """Rows of 1 MiB + 1 byte, 2 MiB + 3 apart, from an odd offset: every row
    crosses a block boundary, and some blocks are never read."""
    torch = need_gpu()
    from safetensors import safe_open
    gen = torch.Generator().manual_seed(25)
    row = (2 << 20) + 3
    data = bytes(torch.randint(0, 256, (5 * row,), dtype=torch.uint8, generator=gen).numpy())
    src = str(tmp / "src" / "wide.safetensors")
    write_raw(src, [("pad", "U8", [5], b"\x01" * 5), ("w", "U8", [5, row], data)])
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=16M", "block_size=1M"]) as m, \
            safe_open(src, framework="pt", device="cpu") as own:
        for sl in ((1, 7, 7 + (1 << 20) + 1), (1, row - 10, row), (1, 0, 1), (0, 2, 4)):
            s0 = m.stats()
            got = mcfs.load_file(m.p("wide.safetensors"), device="cuda:0", tensors=["w"],
                                 slices={"w": sl})
            want = own.get_slice("w")[index(*sl)]
            same_cpu(torch, got["w"], want, sl)
            assert m.stats()["gpu_load_bytes"] - s0["gpu_load_bytes"] == slice_bytes(want)


def cut_rows(start, rows, pitch, col, length, bs):
    """How many rows' parts [col, col + length) a block's end cuts."""
    return sum((start + r * pitch + col) // bs != (start + r * pitch + col + length - 1) // bs
               for r in range(rows))


def test_cut_rows_gathered(tmp):
    """The rows of a dim-1 slice that a block's end cuts are gathered on the
    CPU and copied in runs: each rank's slices are bitwise equal to
    get_slice, and the daemon counts exactly the rows cut. One tensor's row
    pitch divides the block (its cuts lie equally far apart: one run), the
    other's does not (the cut drifts along the row)."""
    torch = need_gpu()
    import json
    import struct
    from safetensors import safe_open
    gen = torch.Generator().manual_seed(26)
    shapes = {"even": [1024, 4096], "drift": [700, 3001]}  # bf16: rows of 8192, 6002 bytes
    entries = [("pad", "U8", [5], b"\x07" * 5)]
    for name, (rows, cols) in shapes.items():
        data = torch.randint(0, 256, (rows * cols * 2,), dtype=torch.uint8, generator=gen)
        entries.append((name, "BF16", [rows, cols], bytes(data.numpy())))
    src = str(tmp / "src" / "cut.safetensors")
    write_raw(src, entries)
    with open(src, "rb") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(hlen))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m, \
            safe_open(src, framework="pt", device="cpu") as own:
        for rank in (0, 1):
            slices, cut = {}, 0
            for name, (rows, cols) in shapes.items():
                lo, hi = rank * (cols // 2), cols if rank else cols // 2
                slices[name] = (1, lo, hi)
                cut += cut_rows(8 + hlen + header[name]["data_offsets"][0], rows, cols * 2,
                                lo * 2, (hi - lo) * 2, 1 << 20)
            assert cut > 0, "the file's layout cuts no row of rank %d" % rank
            s0 = m.stats()
            got = mcfs.load_file(m.p("cut.safetensors"), device="cuda:0",
                                 tensors=list(shapes), slices=slices)
            s1 = m.stats()
            for name, sl in slices.items():
                same_cpu(torch, got[name], own.get_slice(name)[index(*sl)], (rank, name))
            assert s1["gpu_rows_gathered"] - s0["gpu_rows_gathered"] == cut, rank
            assert s1["gpu_load_bytes"] - s0["gpu_load_bytes"] == sum(
                slice_bytes(t) for t in got.values())


LLAMA = [("model.layers.0.self_attn.q_proj.weight", [512, 768]),
         ("model.layers.0.self_attn.k_proj.weight", [256, 768]),
         ("model.layers.0.self_attn.v_proj.weight", [256, 768]),
         ("model.layers.0.self_attn.o_proj.weight", [768, 512]),
         ("model.layers.0.mlp.gate_proj.weight", [1031, 768]),
         ("model.layers.0.mlp.up_proj.weight", [1031, 768]),
         ("model.layers.0.mlp.down_proj.weight", [768, 1031]),
         ("model.layers.0.input_layernorm.weight", [768])]
SPLIT = {"*.q_proj.weight": 0, "*.k_proj.weight": 0, "*.v_proj.weight": 0,
         "*.gate_proj.weight": 0, "*.up_proj.weight": 0,
         "*.o_proj.weight": 1, "*.down_proj.weight": 1}

RANK = r"""
import hashlib, json, os, sys, time, torch, mcfs
path, go, rank, dev = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
split = json.loads(sys.argv[5])
torch.empty(1, device=dev)  # CUDA up before the start line
while not os.path.exists(go):
    time.sleep(0.001)
t = mcfs.load_file(path, device=dev, rank=rank, world=2, split=split)
out = {}
for k in sorted(t):
    x = t[k].contiguous().reshape(-1)
    assert t[k].device == torch.device(dev), (k, t[k].device)
    out[k] = [list(t[k].shape), hashlib.sha256(
        x.view(torch.uint8).cpu().numpy().tobytes() if x.numel() else b"").hexdigest()]
print(json.dumps(out))
"""


def test_two_ranks_at_once(tmp):
    """Ranks 0 and 1 of world 2, two processes started together (each on its
    own GPU where there are two): column-parallel weights split on dim 0,
    row-parallel ones on dim 1, 1031 (odd) ceil-divided: 516 and 515, the norm whole."""
    torch = need_gpu()
    import json
    from safetensors import safe_open
    gen = torch.Generator().manual_seed(26)
    entries = [("pad", "U8", [1], b"\x07")]
    for name, shape in LLAMA:
        n = 2
        for d in shape:
            n *= d
        entries.append((name, "BF16", shape,
                        bytes(torch.randint(0, 256, (n,), dtype=torch.uint8,
                                            generator=gen).numpy())))
    src = str(tmp / "src" / "llama.safetensors")
    write_raw(src, entries)
    ngpu = torch.cuda.device_count()
    go = str(tmp / "go")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        procs = [subprocess.Popen([PY, "-c", RANK, m.p("llama.safetensors"), go, str(r),
                                   "cuda:%d" % (r % ngpu), json.dumps(SPLIT)], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        time.sleep(3)  # torch import and CUDA init in both
        open(go, "w").close()
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (_, e) in zip(procs, outs):
            assert p.returncode == 0, e
    with safe_open(src, framework="pt", device="cpu") as own:
        for r, (o, _) in enumerate(outs):
            got = json.loads(o)
            assert sorted(got) == sorted(own.keys())
            for name, shape in LLAMA + [("pad", [1])]:
                dim = next((d for g, d in SPLIT.items() if name.endswith(g[1:])), None)
                if dim is None:
                    want = own.get_tensor(name)
                else:
                    n = shape[dim]
                    size = -(-n // 2)
                    want = own.get_slice(name)[index(dim, r * size, min(n, (r + 1) * size))]
                assert got[name][0] == list(want.shape), (r, name)
                assert got[name][1] == hashlib.sha256(raw_bytes(torch, want)).hexdigest(), \
                    (r, name)


def test_switch_get_slice(tmp):
    """safe_open(device="cuda:0").get_slice(name)[...] with the switch on:
    a one-dimension slice loads only its bytes; other indexes still work."""
    torch = need_gpu()
    from safetensors import safe_open as own_open
    src = str(tmp / "src" / "odd.safetensors")
    odd_file(torch, src)
    # safetensors' own object, opened before the switch is on
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m, \
            own_open(src, framework="pt", device="cpu") as own:
        mcfs.patch_safetensors()
        try:
            import safetensors
            with safetensors.safe_open(m.p("odd.safetensors"), framework="pt", device="cuda:0") as f:
                assert "mcfs" in repr(f), "the switch did not serve this open"
                for name, idx in (("bf16", (slice(None), slice(100, 900))),
                                  ("f16_3d", (slice(None), slice(1, 300))),
                                  ("f64_3d", (slice(None), slice(None), slice(3, 200))),
                                  ("u8", slice(10, 20)), ("i64", (slice(None), slice(-5, None)))):
                    s0 = m.stats()
                    got = f.get_slice(name)[idx]
                    want = own.get_slice(name)[idx]
                    same_cpu(torch, got, want, (name, idx))
                    assert m.stats()["gpu_load_bytes"] - s0["gpu_load_bytes"] \
                        == slice_bytes(want), (name, idx)
                # two dimensions, a step: cut from the whole tensor
                for name, idx in (("f32", (slice(1, 5), slice(2, 9))),
                                  ("f32", slice(0, 500, 3))):
                    same_cpu(torch, f.get_slice(name)[idx], own.get_slice(name)[idx], idx)
        finally:
            mcfs.unpatch_safetensors()


def test_libmcfs_slices(tmp):
    """mcfs_load_tensors_sliced from C: an explicit slice along dim 1 and a
    plan (rank 1 of 2) over the rest, each result bitwise get_slice's at the
    offset the selection gives."""
    torch = need_gpu()
    import ctypes
    from safetensors import safe_open
    from libmcfs_ctypes import Selection, Slice, libmcfs
    lib = libmcfs()
    src = str(tmp / "src" / "odd.safetensors")
    odd_file(torch, src)
    slices = [Slice(b"bf16", 1, 0, 5, 900, 0), Slice(b"f16_3d", -2, 2, 0, 0, 1),
              Slice(b"*64*", 0, 2, 0, 0, 1), Slice(b"u8", 0, 0, 1000, 2 ** 64 - 1, 0)]
    arr = (Slice * len(slices))(*slices)
    cap = 64 << 20
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m, \
            safe_open(src, framework="pt", device="cpu") as own:
        buf = torch.full((cap,), 0x5A, dtype=torch.uint8, device="cuda:0")
        sel = ctypes.POINTER(Selection)()
        err = ctypes.create_string_buffer(512)
        s0 = m.stats()
        n = lib.mcfs_load_tensors_sliced(m.p("odd.safetensors").encode(), None, 0, arr,
                                         len(slices), ctypes.c_void_p(buf.data_ptr()), cap,
                                         ctypes.byref(sel), err, len(err))
        assert n > 0, err.value
        torch.cuda.synchronize()
        s = sel.contents
        assert m.stats()["gpu_load_bytes"] - s0["gpu_load_bytes"] == n == s.copy_bytes
        host = bytes(buf[:s.bytes].cpu().numpy().tobytes())
        seen = {}
        for i in range(s.n):
            name = s.tensors[i].contents.name.decode()
            c = s.cuts[i]
            want = own.get_tensor(name) if c.dim < 0 \
                else own.get_slice(name)[index(c.dim, c.start, c.stop)]
            assert c.bytes == slice_bytes(want), name
            assert host[s.dst[i]:s.dst[i] + c.bytes] == raw_bytes(torch, want), name
            seen[name] = (c.dim, c.start, c.stop)
        lib.mcfs_selection_free(sel)
    assert seen["bf16"] == (1, 5, 900) and seen["f16_3d"] == (1, 167, 333)
    assert seen["f64_3d"] == (0, 2, 3) and seen["i64"] == (0, 65, 129)
    assert seen["u8"] == (0, 1000, 1031) and seen["f32"] == (-1, 0, 0)


def test_fallback_slices(tmp):
    """Off mcfs, load_file falls back to safetensors with the same slices."""
    torch = need_gpu()
    from safetensors import safe_open
    src = str(tmp / "src" / "odd.safetensors")
    odd_file(torch, src)
    got = mcfs.load_file(src, device="cuda:0", rank=1, world=2,
                         split={"f16_3d": 1, "bf16": -1}, slices={"u8": (0, 5, 9)})
    with safe_open(src, framework="pt", device="cpu") as own:
        assert sorted(got) == sorted(own.keys())
        for name in own.keys():
            sl = {"f16_3d": (1, 167, 333), "bf16": (1, 500, 999), "u8": (0, 5, 9)}.get(name)
            want = own.get_tensor(name) if sl is None else own.get_slice(name)[index(*sl)]
            same_cpu(torch, got[name], want, name)
