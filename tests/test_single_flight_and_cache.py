"""Counters prove caching and single flight.

- A second read of a cached file makes no store reads: not through O_DIRECT,
  and not after the kernel's page cache was dropped (the reads reach the
  daemon, which answers them from the block cache: hits go up, store_reads
  do not).
- Concurrent misses on one block make one store read (single flight): 16
  readers started together on one uncached block cause exactly one fetch,
  and over a few rounds some of them are seen joining it (waits).

readahead_max=0 keeps readahead from adding fetches the test did not ask for.
"""
import os
import threading

import pytest

from conftest import mcfs_mount
from gen import MiB, cached_bytes, drop_caches, pread_direct_fd, write_random

OPTS = ["block_size=1M", "ram_cache=64M", "readahead_max=0"]


def test_second_read_makes_no_store_reads(tmp):
    data = write_random(str(tmp / "src" / "m.bin"), 8 * MiB + 5, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        path = m.p("m.bin")
        s0 = m.stats()
        for key in ("store_reads", "store_bytes", "hits", "misses", "waits", "evictions",
                    "fetches"):
            assert key in s0, "user.mcfs.stats lacks %s: %s" % (key, s0)
        assert cached_bytes(path) == 0

        with open(path, "rb") as f:
            assert f.read() == data
        s1 = m.stats()
        assert s1["store_reads"] > s0["store_reads"]
        assert s1["store_bytes"] - s0["store_bytes"] >= len(data)
        assert s1["fetches"] - s0["fetches"] == 9, (s0, s1)  # 9 blocks, each once
        assert cached_bytes(path) == len(data)

        # again, through the page cache dropped: the daemon serves from RAM
        drop_caches()
        with open(path, "rb") as f:
            assert f.read() == data
        s2 = m.stats()
        assert s2["store_reads"] == s1["store_reads"], (s1, s2)
        assert s2["store_bytes"] == s1["store_bytes"], (s1, s2)
        assert s2["hits"] > s1["hits"], "the reads did not reach the daemon: %s %s" % (s1, s2)

        # again, with O_DIRECT: every request reaches the daemon
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for off in range(0, len(data), 300000):
                assert pread_direct_fd(fd, off, 300000) == data[off:off + 300000]
        finally:
            os.close(fd)
        s3 = m.stats()
        assert s3["store_reads"] == s1["store_reads"], (s1, s3)
        assert s3["hits"] > s2["hits"]
        assert s3["misses"] == s1["misses"]


def test_single_flight(tmp):
    # 64 MiB blocks make each fetch long enough that concurrent readers
    # overlap it; 5 files give 5 rounds on cold blocks.
    rounds = 5
    datas = [write_random(str(tmp / "src" / ("sf%d.bin" % r)), 64 * MiB, seed=r)
             for r in range(rounds)]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=64M", "ram_cache=512M", "readahead_max=0"]) as m:
        total_waits = 0
        for r in range(rounds):
            drop_caches()  # the source's pages too: make the store read slow
            path = m.p("sf%d.bin" % r)
            fds = [os.open(path, os.O_RDONLY | os.O_DIRECT) for _ in range(16)]
            s0 = m.stats()
            barrier = threading.Barrier(16)
            got = [None] * 16
            errs = []

            def reader(i):
                try:
                    barrier.wait(timeout=30)
                    off = 4096 * i * 97
                    got[i] = (off, pread_direct_fd(fds[i], off, 4096))
                except BaseException as e:
                    errs.append(repr(e))

            ts = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(16)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            for fd in fds:
                os.close(fd)
            assert not errs, errs
            assert not any(t.is_alive() for t in ts), "readers hung"
            for off, b in got:
                assert b == datas[r][off:off + 4096]
            s1 = m.stats()
            d = {k: s1[k] - s0[k] for k in ("store_reads", "fetches", "misses", "waits", "hits")}
            assert d["fetches"] == 1, "round %d: one block, %s" % (r, d)
            assert d["misses"] == 1, "round %d: %s" % (r, d)
            assert d["hits"] + d["waits"] == 15, "round %d: %s" % (r, d)
            total_waits += d["waits"]
        assert total_waits > 0, "no reader ever joined a fetch in flight in %d rounds" % rounds


@pytest.mark.parametrize("bs", ["1M", "8M"])
def test_second_random_read_makes_no_store_reads(tmp, bs):
    """The same holds for a random reader: after one pass over the whole file in
    shuffled 64 KiB reads (O_DIRECT) the file is cached, and a second shuffled
    pass, and a sequential one, make no store reads. The RAM tier (64 MiB) is
    twice the file (32 MiB)."""
    import random
    data = write_random(str(tmp / "src" / "r.bin"), 32 * MiB, seed=3)
    chunk = 64 * 1024
    offs = list(range(0, len(data), chunk))
    # default readahead: random-read detection is part of what is tested
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=" + bs, "ram_cache=64M"]) as m:
        path = m.p("r.bin")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            random.Random(1).shuffle(offs)
            for off in offs:
                assert pread_direct_fd(fd, off, chunk) == data[off:off + chunk]
            s1 = m.stats()
            cached, size = cached_bytes(path), len(data)
            random.Random(2).shuffle(offs)
            for off in offs:
                assert pread_direct_fd(fd, off, chunk) == data[off:off + chunk]
            s2 = m.stats()
            reads, nbytes = (s2["store_reads"] - s1["store_reads"],
                             s2["store_bytes"] - s1["store_bytes"])
            assert reads == 0, ("second random pass: %d store reads, %d bytes (after the "
                                "first pass %d of %d bytes were cached)" % (reads, nbytes,
                                                                          cached, size))
            assert cached == size, "after reading every byte, %d of %d bytes are cached" % (
                cached, size)
        finally:
            os.close(fd)
        drop_caches()
        with open(path, "rb") as f:
            assert f.read() == data
        assert m.stats()["store_reads"] == s2["store_reads"]
