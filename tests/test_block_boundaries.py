"""Reads that start, end or straddle block boundaries (1 MiB blocks).

For every boundary of a 5 MiB + 123 B file: reads ending just before it,
starting just after it, and crossing it by 1 B, 7 B, a page and 64 KiB; whole
blocks; reads spanning three blocks; and files whose size is a block size
+/- 1. Both buffered and with O_DIRECT, which passes the exact unaligned
offsets to the daemon.
"""
import os

import pytest

from conftest import mcfs_mount
from gen import MiB, pread_direct_fd, write_random

BS = MiB
SIZES = {"b5": 5 * BS + 123, "exact1": BS, "minus1": BS - 1, "plus1": BS + 1, "exact2": 2 * BS}


def boundary_ranges(size):
    out = set()
    for k in range(1, size // BS + 1):
        b = k * BS
        for d in (1, 7, 4096, 65536):
            out.add((b - d, d))          # ends at the boundary
            out.add((b, d))              # starts at it
            out.add((b - d, 2 * d))      # crosses it
            out.add((b - 1, 2))
        out.add((b - BS, BS))            # the whole block before it
        out.add((b - 4096, BS + 8192))   # a block and a bit on both sides
        out.add((b - BS + 1, 3 * BS - 2))  # three blocks, unaligned
    out.add((0, size))
    return sorted((o, n) for o, n in out if 0 <= o <= size)


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "odirect"])
def test_block_boundaries(tmp, direct):
    src = tmp / "src"
    data = {name: write_random(str(src / name), size, seed=i)
            for i, (name, size) in enumerate(SIZES.items())}
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        for name, size in SIZES.items():
            flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
            fd = os.open(m.p(name), flags)
            try:
                for off, n in boundary_ranges(size):
                    if direct:
                        got = pread_direct_fd(fd, off, n)
                    else:
                        got = os.pread(fd, n, off)
                    assert got == data[name][off:off + n], \
                        "%s: off=%d len=%d (size %d)" % (name, off, n, size)
            finally:
                os.close(fd)
