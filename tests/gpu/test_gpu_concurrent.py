"""Several loaders at once on a real GPU: 4 processes started at the same
moment (tests/bench/gpu_loader.py, as the bench runs them) each get every
tensor's bytes right, from the RAM tier and cold; their aggregate GB/s is
printed beside the pinned host-to-device limit measured here (the bench table
reports it; no test asserts a speed). With two GPUs or more, loads into
different GPUs at once are checked the same way. Skips with the reason
without a GPU.
"""
import os
import sys

import pytest

from gpuutil import ROOT, need_gpu
from conftest import mcfs_mount

sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import gpu_rows  # noqa: E402

import mcfs  # noqa: E402


def sums(torch, t):
    return {k: int(torch.sum(v.reshape(-1).view(torch.uint8), dtype=torch.int64))
            for k, v in t.items() if v.numel()}


def make(torch, path, mib):
    from safetensors.torch import save_file
    gen = torch.Generator(device="cuda").manual_seed(31)
    n = 8
    save_file({"w%d" % i: torch.randint(0, 256, ((mib << 20) // n,), dtype=torch.uint8,
                                        device="cuda", generator=gen).view(torch.bfloat16)
               for i in range(n)}, path)


def pinned_limit(torch):
    n = 256 << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(4):
        dev.copy_(host, non_blocking=True)
    e.record()
    torch.cuda.synchronize()
    return 4 * n / (s.elapsed_time(e) / 1e3) / 1e9


def run_loaders(path, n, want, extra=()):
    rounds = list(gpu_rows.Loaders("mcfs", path, n, 1, ["--sums", *extra]).rounds())
    res = rounds[0]
    for r in res:
        assert r["sums"] == want, "a loader got other bytes"
    t, nbytes = gpu_rows.aggregate(res)
    return nbytes / t / 1e9, [round(r["t1"] - r["t0"], 3) for r in res]


@pytest.mark.parametrize("cold", [False, True], ids=["ram_tier", "cold"])
def test_four_loaders_at_once(tmp, cold):
    torch = need_gpu()
    src = str(tmp / "src" / "c.safetensors")
    make(torch, src, 1024)
    from safetensors.torch import load_file
    want = sums(torch, load_file(src, device="cuda:0"))
    limit = pinned_limit(torch)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=2G", "log_level=debug"]) as m:
        path = m.p("c.safetensors")
        if not cold:
            mcfs.load_file(path, device="cuda:0")
        s0 = m.stats()
        gbs, each = run_loaders(path, 4, want)
        # cold, the posix store reads with O_DIRECT: the disk sets the pace
        print("4 loaders, %s: %.1f GB/s together (pinned limit here %.1f GB/s, %.2f of it); "
              "each took %s s; the daemon:\n  %s"
              % ("cold (posix store, O_DIRECT)" if cold else "RAM tier", gbs, limit,
                 gbs / limit, each, "\n  ".join(gpu_rows.load_lines(m.log(), 4))))
        fetched = m.stats()["fetches"] - s0["fetches"]
        blocks = (os.path.getsize(src) + (8 << 20) - 1) // (8 << 20)
        assert fetched == (blocks if cold else 0), (fetched, blocks)


def test_loads_into_different_gpus_at_once(tmp):
    torch = need_gpu()
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: loads into different GPUs need two")
    src = str(tmp / "src" / "g.safetensors")
    make(torch, src, 512)
    from safetensors.torch import load_file
    want = sums(torch, load_file(src, device="cuda:0"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=1G"]) as m:
        path = m.p("g.safetensors")
        mcfs.load_file(path, device="cuda:0")
        n = torch.cuda.device_count()
        each = [["--device", "cuda:%d" % d] for d in range(n)]
        res = list(gpu_rows.Loaders("mcfs", path, n, 1, ["--sums"], each=each).rounds())[0]
        assert all(r["sums"] == want for r in res)
        t, nbytes = gpu_rows.aggregate(res)
        print("%d GPUs at once: %.1f GB/s together" % (n, nbytes / t / 1e9))
