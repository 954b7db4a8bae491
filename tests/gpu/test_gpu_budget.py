"""Issue 24, item 4: one budget for the RAM tier. More GPU loads at once than
the tier's slots allow all complete, each with every tensor's bytes right.

ram_cache=64M is 8 slots of 8 MiB: a load's window is one block (slots / 8),
GPU loads together hold 2 (a quarter), and 12 loader processes of a 256 MiB
file (32 blocks, four times the tier) start at the same moment. Before the
budget each load held its window while asking for the next block, and
nothing bounded how many loads ran at once, so enough of them could hold
every slot and wait on each other; now a load beyond the GPU share waits its
turn for a window (gpu_window_waits counts those) and readers keep the rest.
"""
import pytest

from gpuutil import need_gpu
from conftest import mcfs_mount
from test_gpu_concurrent import make, sums
import gpu_rows

LOADERS = 12


def check_loads(m, path, want, each=None):
    res = list(gpu_rows.Loaders("mcfs", path, LOADERS, 1, ["--sums"], each=each).rounds())[0]
    assert len(res) == LOADERS
    for i, r in enumerate(res):
        assert r["sums"] == want, "loader %d got other bytes" % i
    st = m.stats()
    assert st["gpu_load_errors"] == 0, (st, m.log()[-3000:])
    print("%d loads at once on 8 slots: %d waited their turn for a window; background "
          "fetches refused by the budget: %d"
          % (LOADERS, st["gpu_window_waits"], st["ram_budget_refusals"]))


def test_more_loads_than_slots_all_complete(tmp):
    torch = need_gpu()
    src = str(tmp / "src" / "b.safetensors")
    make(torch, src, 256)
    from safetensors.torch import load_file
    want = sums(torch, load_file(src, device="cuda:0"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        check_loads(m, m.p("b.safetensors"), want)


def test_more_loads_than_slots_over_every_gpu(tmp):
    torch = need_gpu()
    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("one GPU here: loads spread over GPUs need two")
    src = str(tmp / "src" / "b.safetensors")
    make(torch, src, 256)
    from safetensors.torch import load_file
    want = sums(torch, load_file(src, device="cuda:0"))
    each = [["--device", "cuda:%d" % (i % n)] for i in range(LOADERS)]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        check_loads(m, m.p("b.safetensors"), want, each)
