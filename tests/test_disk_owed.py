"""A fetch never waits for the cache disk (issue 23): when the disk writer is
behind, a fetched block stays in the RAM tier, owed to the disk tier, and the
reader goes on at the store's speed; the owed blocks reach the disk once the
writer has room, and a restart then reads every one of them from disk. Owed
blocks the RAM tier evicts first are counted, and fetched (and written) again
at their next read.

The disk writer is held back deterministically: the cache directory is an
ext4 image, frozen (fsfreeze) after the file is opened, so each write of the
writer blocks until the thaw. Before this change the reader hung behind it."""
import contextlib
import hashlib
import os
import subprocess
import threading

from conftest import mcfs_mount
from disk_helpers import loop_fs, settle
from gen import MiB, write_random

OPTS = ["block_size=1M"]


@contextlib.contextmanager
def frozen(mnt):
    """The filesystem at mnt frozen: writes to it block until the thaw."""
    subprocess.run(["fsfreeze", "-f", mnt], check=True)
    try:
        yield
    finally:
        subprocess.run(["fsfreeze", "-u", mnt], check=True)


def read_in_thread(fd, size, timeout):
    """Reads fd whole in a thread; returns its bytes, or None if the read was
    still waiting after timeout seconds (it then ends after the thaw)."""
    out = {}

    def run():
        got = bytearray()
        while len(got) < size:
            b = os.pread(fd, 4 * MiB, len(got))
            if not b:
                break
            got += b
        out["data"] = bytes(got)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return out.get("data"), t


def read_while_frozen(m, cachefs, rel, size):
    """Opens rel (its lookup may record attributes in cache_dir), freezes the
    cache filesystem, reads rel whole and thaws; returns the bytes, or fails
    if the read was still waiting for the frozen disk after 60 s. No counters
    are read while frozen: the root's attributes may be recorded on the way."""
    fd = os.open(m.p(rel), os.O_RDONLY)
    try:
        with frozen(cachefs):
            got, t = read_in_thread(fd, size, timeout=60)
        assert got is not None, "the read waited for the frozen cache disk"
        t.join(10)
        return got
    finally:
        os.close(fd)


def test_a_cold_read_does_not_wait_for_the_cache_disk(tmp):
    size = 40 * MiB + 4097  # 41 blocks; the queue holds 16 (64 RAM slots / 4)
    data = write_random(str(tmp / "src" / "m.bin"), size, seed=5)
    nblocks = (size + MiB - 1) // MiB
    with loop_fs(tmp) as cachefs:
        opts = OPTS + ["ram_cache=64M", "cache_dir=" + cachefs]
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            got = read_while_frozen(m, cachefs, "m.bin", size)
            assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
            st = m.stats()
            assert st["disk_deferred"] > 0 and st["disk_owed_dropped"] == 0, st
            # thawed: the owed blocks reach the disk, every one
            st = settle(m, timeout=60)
            assert st["disk_owed"] == 0 and st["disk_indexed"] == nblocks, st
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            with open(m.p("m.bin"), "rb") as f:
                assert f.read() == data
            st = m.stats()
            assert st["store_bytes"] == 0, st  # a restart reads every block from disk


def test_owed_blocks_the_ram_tier_evicts_are_fetched_again(tmp):
    size = 48 * MiB  # 48 blocks through a RAM tier of 16
    data = write_random(str(tmp / "src" / "m.bin"), size, seed=6)
    with loop_fs(tmp) as cachefs:
        opts = OPTS + ["ram_cache=16M", "cache_dir=" + cachefs]
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            assert read_while_frozen(m, cachefs, "m.bin", size) == data
            st = m.stats()
            assert st["disk_owed_dropped"] > 0, st
            first = settle(m, timeout=60)
            assert first["disk_owed"] == 0, first
            assert 0 < first["disk_indexed"] < size // MiB, first
        # a RAM tier the file fits: the next read fetches exactly what never
        # reached the disk, and writes it
        opts = OPTS + ["ram_cache=64M", "cache_dir=" + cachefs]
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            with open(m.p("m.bin"), "rb") as f:
                assert f.read() == data
            st = settle(m, timeout=60)
            assert st["store_bytes"] == size - first["disk_indexed"] * MiB, st
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            with open(m.p("m.bin"), "rb") as f:
                assert f.read() == data
            assert m.stats()["store_bytes"] == 0
