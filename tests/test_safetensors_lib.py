"""The safetensors library reads the mount exactly as it reads the source.

load_file (which mmaps the file) and safe_open(...).get_tensor/get_slice,
with the numpy framework (no torch needed), over a file of ~11 MiB that spans
many 1 MiB blocks, and a small one.
"""
import os

import numpy as np
import pytest

from conftest import mcfs_mount
from gen import make_safetensors

st = pytest.importorskip("safetensors", reason="the safetensors package is not installed")
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def test_load_file_and_slices(tmp):
    src = tmp / "src"
    os.makedirs(str(src / "model"))
    saved = make_safetensors(str(src / "model" / "model.safetensors"), seed=3, big=True)
    make_safetensors(str(src / "model" / "small.safetensors"), seed=4)
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["block_size=1M", "ram_cache=8M"]) as m:
        for name in ("model.safetensors", "small.safetensors"):
            via_src = load_file(str(src / "model" / name))
            via_mnt = load_file(m.p("model", name))
            assert sorted(via_src) == sorted(via_mnt), name
            for k in via_src:
                assert same(via_src[k], via_mnt[k]), "%s: tensor %s differs" % (name, k)
        via_mnt = load_file(m.p("model", "model.safetensors"))
        for k, v in saved.items():
            assert same(v, via_mnt[k]), "tensor %s differs from what was saved" % k

        p_src = str(src / "model" / "model.safetensors")
        p_mnt = m.p("model", "model.safetensors")
        with safe_open(p_src, framework="np") as fs, safe_open(p_mnt, framework="np") as fm:
            assert sorted(fs.keys()) == sorted(fm.keys())
            assert fs.metadata() == fm.metadata() == {"format": "np", "seed": "3"}
            for k in fs.keys():
                assert same(fs.get_tensor(k), fm.get_tensor(k)), k
            # slices: rows, columns, a middle band of a multi-block tensor
            for k, sl in [("big.0", (slice(0, 1),)), ("big.0", (slice(511, 777),)),
                          ("big.0", (slice(1000, 1024), slice(3, 1500))),
                          ("big.1", (slice(1, 2), slice(250, 999), slice(0, 777))),
                          ("embed.weight", (slice(128, 257),)),
                          ("layer.0.ids", (slice(5, 6), slice(1, 3)))]:
                a = fs.get_slice(k)[sl]
                b = fm.get_slice(k)[sl]
                assert same(a, b), "get_slice(%s)[%s]" % (k, sl)
                assert same(b, saved[k][sl]), "get_slice(%s)[%s] vs saved" % (k, sl)
            assert fm.get_slice("big.0").get_shape() == [1024, 1536]
            assert fm.get_slice("big.1").get_dtype() == "F16"
