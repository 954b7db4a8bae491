"""Write-behind writes each block by itself (cache/disk_writer.c): a version
file whose writes are held up does not hold up the blocks of other files.

Before, the writer took up to 16 queued blocks as a batch and published none
of them until the slowest was written, so the blocks of a file queued behind
a slow one waited for it; a cold_whole fill, where one file's writes take its
lock in turn, went at one file's speed (issue 23).

The hold-up is deterministic: the test takes a read lease (F_SETLEASE) on one
file's version file, so each open of it for writing, as a writer thread opens
it for every block, blocks in the kernel until the lease is released."""
import fcntl
import os
import signal
import time

import pytest

from conftest import mcfs_mount, need_root
from disk_helpers import settle, version_files
from gen import MiB, write_random

F_SETLEASE = 1024  # <fcntl.h>: F_LINUX_SPECIFIC_BASE + 0; Python does not name it
LEASE_BREAK = "/proc/sys/fs/lease-break-time"
OPTS = ["block_size=1M", "disk_writers=4"]


def take_lease(path, timeout=10):
    """A read lease on path (an fd to close, which releases it); retried while
    the daemon still has the file open for a write (EAGAIN)."""
    deadline = time.time() + timeout
    while True:
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
            return fd
        except OSError as e:
            os.close(fd)
            if e.errno != 11 or time.time() > deadline:
                raise
        time.sleep(0.05)


def wait_for(m, what, timeout=30):
    deadline = time.time() + timeout
    while True:
        st = m.stats()
        if what(st):
            return st
        if time.time() > deadline:
            return st
        time.sleep(0.05)


@pytest.mark.parametrize("direct", ["true", "false"])
def test_a_file_held_up_does_not_hold_up_the_others(tmp, direct):
    """disk_writers=4: two threads may write one file, with O_DIRECT (half the
    writers) and through the page cache (two) alike; two are left for b."""
    need_root()
    if not os.path.exists(LEASE_BREAK):
        pytest.skip("no %s: this kernel has no file leases" % LEASE_BREAK)
    with open(LEASE_BREAK) as f:
        break_time = f.read()
    na, nb = 16, 8  # a's blocks left and b's fit the writer's window (32)
    a = write_random(str(tmp / "src" / "a.bin"), na * MiB, seed=71)
    b = write_random(str(tmp / "src" / "b.bin"), nb * MiB, seed=72)
    cache = str(tmp / "cache")
    old_sigio = signal.signal(signal.SIGIO, lambda *_: None)  # the lease break's notice
    lease = None
    try:
        with open(LEASE_BREAK, "w") as f:
            f.write("300\n")  # the kernel must not break the lease itself meanwhile
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS + ["cache_dir=" + cache, "disk_direct=" + direct]) as m:
            with open(m.p("a.bin"), "rb") as f:
                assert f.read(MiB) == a[:MiB]
            first = settle(m)
            assert 1 <= first["disk_indexed"] < na, first  # a's version file exists
            files = version_files(cache)
            assert len(files) == 1, files
            lease = take_lease(files[0])

            # a's other blocks: each write of them now blocks in its open
            with open(m.p("a.bin"), "rb") as f:
                assert f.read() == a
            with open(m.p("b.bin"), "rb") as f:
                assert f.read() == b
            st = wait_for(m, lambda s: s["disk_indexed"] >= first["disk_indexed"] + nb)
            # every block of b is on disk and indexed, and none more of a's
            assert st["disk_indexed"] == first["disk_indexed"] + nb, st
            assert st["disk_queued"] > 0 or st["disk_owed"] > 0, st  # a's still wait

            os.close(lease)
            lease = None
            st = settle(m, timeout=60)
            assert st["disk_indexed"] == na + nb, st
            assert st["disk_write_drops"] == 0 and st["disk_io_errors"] == 0, st
        # a restart reads both files from disk, right
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS + ["cache_dir=" + cache]) as m:
            with open(m.p("a.bin"), "rb") as f:
                assert f.read() == a
            with open(m.p("b.bin"), "rb") as f:
                assert f.read() == b
            assert m.stats()["store_bytes"] == 0
    finally:
        if lease is not None:
            os.close(lease)
        with open(LEASE_BREAK, "w") as f:
            f.write(break_time)
        signal.signal(signal.SIGIO, old_sigio)
