"""Helpers of the device-only tests: skip logic, safetensors writers, comparisons."""
import json
import os
import struct
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def need_gpu():
    """Returns torch, or skips with the reason there is no GPU path here."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (tests/gpu runs on the device machine)")
    if os.geteuid() != 0:
        pytest.skip("needs root for FUSE mounts")
    return torch


def write_raw(path, entries):
    """Writes a safetensors file with tensors in the given order (no alignment).

    entries: (name, dtype_str, shape, bytes). Lets tests put tensors at odd offsets,
    which safetensors' own writer never does.
    """
    header, at = {}, 0
    for name, dt, shape, data in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in entries:
            f.write(data)


def raw_bytes(torch, t):
    """The bytes of a tensor, on the CPU, as Python bytes."""
    t = t.detach().contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return bytes(t.view(torch.uint8).cpu().numpy().tobytes())


def assert_same(torch, got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        a, b = got[k], want[k]
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        assert tuple(a.shape) == tuple(b.shape), (k, a.shape, b.shape)
        assert a.device == b.device, (k, a.device, b.device)
        assert raw_bytes(torch, a) == raw_bytes(torch, b), "bytes differ in %s" % k


def assert_matches_file(torch, got, path):
    """Every tensor's bytes equal the file's bytes at its offsets."""
    import mcfs
    h = mcfs.read_header(path)
    with open(path, "rb") as f:
        data = f.read()
    for t in h.tensors:
        want = data[h.data_offset + t.begin:h.data_offset + t.end]
        assert raw_bytes(torch, got[t.name]) == want, "bytes differ in %s" % t.name
