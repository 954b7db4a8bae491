"""A RAM tier much smaller than the file still reads correctly, concurrently.

ram_cache=4M with block_size=1M is the smallest allowed tier: 4 slots, while
16 readers each need up to 2 blocks at once (a 1 MiB FUSE read that is not
block aligned spans two). The daemon must neither deadlock (readers holding
slots while waiting for slots) nor serve a slot's bytes after it was reused.
Counters must show evictions, and the file's cached bytes never exceed the
tier.
"""
import os
import time

import pytest

from conftest import mcfs_mount, wait_for
from gen import MiB, cached_bytes, pread_direct_fd, sanitized, write_random
from test_concurrent_readers import check_reader, run_readers

SIZE = 24 * MiB + 999


def test_tiny_tier_concurrent(tmp):
    data = write_random(str(tmp / "src" / "big.bin"), SIZE, seed=4)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=4M"]) as m:
        path = m.p("big.bin")
        run_readers(16, lambda i: check_reader(path, data, seed=200 + i, reads=25), timeout=90)
        st = m.stats()
        assert st["evictions"] > 0, st
        assert st["fetches"] >= 24, st
        assert cached_bytes(path) <= 4 * MiB


def test_tiny_tier_two_files_interleaved(tmp):
    """Two files read alternately block by block: every block is evicted before reuse."""
    a = write_random(str(tmp / "src" / "a.bin"), 10 * MiB, seed=5)
    b = write_random(str(tmp / "src" / "b.bin"), 10 * MiB + 1, seed=6)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=4M"]) as m:
        fa = os.open(m.p("a.bin"), os.O_RDONLY | os.O_DIRECT)
        fb = os.open(m.p("b.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            for rnd in range(2):
                for k in range(10):
                    off = k * MiB + 1000 * rnd
                    assert pread_direct_fd(fa, off, MiB) == a[off:off + MiB], (rnd, k)
                    assert pread_direct_fd(fb, off, MiB) == b[off:off + MiB], (rnd, k)
        finally:
            os.close(fa)
            os.close(fb)
        assert cached_bytes(m.p("a.bin")) + cached_bytes(m.p("b.bin")) <= 4 * MiB
        assert m.stats()["evictions"] > 0


def test_memory_stays_bounded(tmp):
    """Reading 96 MiB through a 16 MiB tier, in reads that straddle blocks (the
    daemon assembles those in a buffer), does not grow the daemon's memory by
    more than the tier and some slack: no buffer or block is leaked."""
    size = 96 * MiB
    data = write_random(str(tmp / "src" / "s.bin"), size, seed=8)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=16M"]) as m:
        def rss_kb():
            with open("/proc/%d/status" % m.proc.pid) as f:
                return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])

        fd = os.open(m.p("s.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            for off in range(MiB // 2, size - MiB, MiB):      # warm up: one pass
                assert pread_direct_fd(fd, off, MiB) == data[off:off + MiB]
            base = rss_kb()
            for rnd in range(3):
                for off in range(MiB // 2 + rnd * 4096, size - MiB, MiB):
                    assert pread_direct_fd(fd, off, MiB) == data[off:off + MiB], off
        finally:
            os.close(fd)
        grown = rss_kb() - base
        if sanitized(m.proc.pid):
            pytest.skip("RSS not checked: the daemon runs under a sanitizer (quarantine)")
        assert grown < 24 * 1024, "daemon RSS grew %d KiB over 3 passes of 96 MiB" % grown


@pytest.mark.parametrize("prefault", [True, False])
def test_ram_tier_prefault(tmp, prefault):
    """ram_prefault (the default) faults the whole RAM tier in after start-up,
    with no read, and logs how long it took; ram_prefault=false leaves it to
    first use. Both read right while the tier fills (or doesn't)."""
    data = write_random(str(tmp / "src" / "p.bin"), 3 * MiB + 5, seed=9)
    opts = ["block_size=1M", "ram_cache=192M", "ram_prefault=%s" % str(prefault).lower()]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        def rss_kb():
            with open("/proc/%d/status" % m.proc.pid) as f:
                return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])

        assert open(m.p("p.bin"), "rb").read() == data
        if prefault:
            assert wait_for(lambda: "RAM tier: 192.0 MiB faulted in" in m.log(), 20), m.log()
            assert rss_kb() >= 192 * 1024
            st = m.stats()
            assert (st["ram_prefault"], st["ram_faulted_bytes"]) == (2, 192 * MiB), st
        else:
            time.sleep(1)
            assert "faulted in" not in m.log()
            st = m.stats()
            assert (st["ram_prefault"], st["ram_faulted_bytes"]) == (0, 0), st
            if not sanitized(m.proc.pid):
                assert rss_kb() < 128 * 1024, rss_kb()
        assert open(m.p("p.bin"), "rb").read() == data
