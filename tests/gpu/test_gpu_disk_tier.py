"""GPU fast path from the disk tier (issues 5 and 6): a file loaded with
mcfs.load_file through a mount with a cache_dir is loaded again, after the
daemon restarts on the same cache_dir, with zero store reads - every block
comes from the disk tier into the device buffer - and the tensors are
bitwise those of safetensors' own load. Skips with the reason without a GPU.
"""
import os

import pytest

from gpuutil import assert_same, need_gpu
from conftest import mcfs_mount
from disk_helpers import settle

import mcfs


def model(torch):
    """~41 MiB over several dtypes, sizes not multiples of any block size."""
    gen = torch.Generator().manual_seed(11)

    def rnd(dtype, shape):
        n = 1
        for d in shape:
            n *= d
        return torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8,
                             generator=gen).view(dtype).reshape(shape)
    return {"embed": rnd(torch.bfloat16, (4099, 2048)),
            "w1": rnd(torch.float16, (3001, 3001)),
            "w2": rnd(torch.float32, (1234, 1111)),
            "norm": rnd(torch.float32, (2048,)),
            "ids": rnd(torch.int64, (777,)),
            "scale": rnd(torch.float8_e4m3fn, (12345,)),
            "empty": rnd(torch.bfloat16, (0, 16))}


def load_checked(torch, m, name, capfd):
    """mcfs.load_file on the mount, asserting it took the GPU path (no fallback)."""
    i = mcfs.info(m.p(name))
    assert i is not None and i["gpu_ok"], "daemon GPU path unavailable: %s" % (i,)
    got = mcfs.load_file(m.p(name), device="cuda:0")
    torch.cuda.synchronize()
    err = capfd.readouterr().err
    assert "loading with safetensors instead" not in err, err
    return got


@pytest.mark.parametrize("block_size,ram_after", [(None, "256M"), ("1M", "8M")],
                         ids=["default-blocks", "1M-blocks-8M-ram"])
def test_restart_loads_from_disk_tier(tmp, capfd, block_size, ram_after):
    """The second daemon has no block in RAM and reads none from the store; with
    an 8 MiB RAM tier the 41 MiB file streams from disk through evicting slots."""
    torch = need_gpu()
    from safetensors.torch import load_file, save_file
    src = str(tmp / "src" / "m.safetensors")
    save_file(model(torch), src)
    want = load_file(src, device="cuda:0")
    data_len = mcfs.read_header(src).data_len
    base = ["cache_dir=" + str(tmp / "cache"), "disk_cache=1G"]
    if block_size:
        base.append("block_size=" + block_size)

    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=base + ["ram_cache=256M"]) as m:
        assert_same(torch, load_checked(torch, m, "m.safetensors", capfd), want)
        st = settle(m)
        bs = st["block_size"]
        nblocks = -(-os.path.getsize(src) // bs)
        assert st["store_reads"] > 0, st
        assert st["disk_writes"] >= nblocks and st["disk_write_drops"] == 0, st
        first = st

    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=base + ["ram_cache=" + ram_after],
                    timeout=60) as m:
        at_mount = m.stats()
        assert at_mount["slots_used"] == 0 and at_mount["disk_hits"] == 0, at_mount
        got = load_checked(torch, m, "m.safetensors", capfd)
        assert_same(torch, got, want)
        st = m.stats()
        print("first daemon:", first)
        print("second daemon:", st)
        # every block from the disk tier, none from the store
        assert st["store_reads"] == 0 and st["fetches"] == 0, st
        assert st["disk_hits"] >= nblocks, st
        assert st["disk_read_bytes"] >= data_len, st
        assert st["disk_csum_errors"] == 0 and st["disk_io_errors"] == 0, st
        # tensor bytes went by DMA, not through FUSE reads (only the header did)
        assert st["fuse_read_bytes"] < data_len // 4, st
