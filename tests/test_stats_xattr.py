"""The root's user.mcfs.stats and a file's user.mcfs.cached say what the cache did.

stats: "key value" lines with at least store_reads, store_bytes, hits,
misses, waits, evictions and fetches, all integers, consistent with the reads
made. cached: the bytes of that file in the RAM tier, exact per block, and
falling when its blocks are evicted. Unknown attributes give ENODATA.
"""
import errno
import os

import pytest

from conftest import mcfs_mount
from gen import MiB, cached_bytes, pread_direct, write_random

REQUIRED = ("store_reads", "store_bytes", "hits", "misses", "waits", "evictions", "fetches")


def test_stats_and_cached(tmp):
    write_random(str(tmp / "src" / "a.bin"), 5 * MiB + 100, seed=1)
    write_random(str(tmp / "src" / "b.bin"), 6 * MiB, seed=2)
    (tmp / "src" / "d").mkdir()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=8M", "readahead_max=0"]) as m:
        raw = os.getxattr(m.path, "user.mcfs.stats").decode()
        for line in raw.strip().splitlines():
            k, v = line.split()
            int(v)
        s0 = m.stats()
        for k in REQUIRED:
            assert k in s0, "stats lack %s:\n%s" % (k, raw)
        assert "user.mcfs.stats" in os.listxattr(m.path)
        assert "user.mcfs.cached" in os.listxattr(m.p("a.bin"))

        a = m.p("a.bin")
        assert cached_bytes(a) == 0
        pread_direct(a, 5 * MiB + 50, 10)               # last block: 100 bytes
        assert cached_bytes(a) == 100
        pread_direct(a, MiB - 1, 2)                      # blocks 0 and 1
        assert cached_bytes(a) == 2 * MiB + 100
        s1 = m.stats()
        assert s1["fetches"] - s0["fetches"] == 3
        assert s1["misses"] - s0["misses"] == 3
        assert s1["store_bytes"] - s0["store_bytes"] == 2 * MiB + 100
        assert s1["store_reads"] - s0["store_reads"] >= 3
        pread_direct(a, 0, 10)
        assert m.stats()["hits"] > s1["hits"]

        # 8 slots: reading all of b (6 blocks) evicts at least one of a's 3
        with open(m.p("b.bin"), "rb") as f:
            f.read()
        pread_direct(m.p("b.bin"), 0, 6 * MiB)
        s2 = m.stats()
        assert s2["evictions"] > s1["evictions"], s2
        assert cached_bytes(m.p("b.bin")) == 6 * MiB
        assert cached_bytes(a) < 2 * MiB + 100

        for p in (m.path, a, m.p("d")):
            with pytest.raises(OSError) as ei:
                os.getxattr(p, "user.no.such.attr")
            assert ei.value.errno == errno.ENODATA
        with pytest.raises(OSError) as ei:
            os.getxattr(a, "user.mcfs.stats")  # only on the root
        assert ei.value.errno == errno.ENODATA
