"""Issue 24: every GPU is prepared at start. With gpu_prepare (the default) the
daemon makes each visible GPU's context and maps the pinned RAM tier into it,
in the background; `mcfs status` and the counters say how many are ready, and
the log says what each took. With gpu_prepare=false none is prepared ahead,
and loads still work. Timings are the bench's (tests/bench/bench_gpu.py
--only first), never asserted here.
"""
import os
import subprocess
import time

from gpuutil import need_gpu
from conftest import MCFS, mcfs_mount

import mcfs


def wait(pred, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_every_gpu_is_prepared_at_start(tmp):
    torch = need_gpu()
    n = torch.cuda.device_count()
    with open(str(tmp / "src" / "f.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=2G"]) as m:
        assert wait(lambda: m.stats()["gpu_ready"] == n), (m.stats(), m.log())
        st = m.stats()
        assert st["gpu_devices"] == n and st["gpu_pinned_bytes"] == 2 << 30, st
        for d in range(n):
            assert "gpu: device %d ready: context made and 2.0 GiB of the pinned RAM tier " \
                   "mapped" % d in m.log(), m.log()
        out = subprocess.run([MCFS, "status", m.path], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "GPUs:       %d, %d ready" % (n, n) in out.stdout, out.stdout


def test_gpu_prepare_off_prepares_none_and_loads_work(tmp):
    torch = need_gpu()
    from safetensors.torch import save_file
    t = {"w": torch.arange(4096, dtype=torch.float32)}
    save_file(t, str(tmp / "src" / "m.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=256M", "gpu_prepare=false"]) as m:
        assert wait(lambda: m.stats()["gpu_pinned_bytes"] == 256 << 20), m.stats()
        last = "cuda:%d" % (torch.cuda.device_count() - 1)
        got = mcfs.load_file(m.p("m.safetensors"), device=last)
        assert torch.equal(got["w"].cpu(), t["w"])
        assert m.stats()["gpu_ready"] == 0
        assert "ready: context made" not in m.log()
