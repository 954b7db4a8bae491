"""The disk tier (issue 5): write-behind of fetched blocks, reads verified by
checksum (a rotten block is dropped and fetched again, never served), LRU
eviction within the disk_cache limit, and a full cache filesystem degrading
to RAM-only with a log line while reads keep working."""
import os
import subprocess

import pytest

from conftest import mcfs_mount, need_root
from disk_helpers import OPTS, make_model_tree, settle, store_dir, tree_sums
from gen import MiB, write_random


def test_write_behind_fills_the_tier(tmp):
    sums = make_model_tree(str(tmp / "src"), n=3)
    cache = str(tmp / "cache")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS + ["cache_dir=" + cache]) as m:
        assert tree_sums(m.path, sums) == sums
        st = settle(m)
        nblocks = sum((os.path.getsize(os.path.join(tmp / "src", r)) + MiB - 1) // MiB
                      for r in sums)
        assert st["disk_state"] == 1, st
        assert st["disk_writes"] == nblocks, st
        assert st["disk_slots_used"] == nblocks, st
        assert st["disk_bytes_used"] == sum(os.path.getsize(os.path.join(tmp / "src", r))
                                            for r in sums)
    assert os.stat(cache).st_mode & 0o777 == 0o700
    store = store_dir(cache)
    assert os.stat(store).st_mode & 0o777 == 0o700
    assert os.path.getsize(os.path.join(store, "blocks", "slots")) > 0


def _scribble_slots(cache, nslots, bs=MiB):
    """Overwrites bytes in the middle of every slot of the slot file."""
    with open(os.path.join(store_dir(cache), "blocks", "slots"), "r+b") as f:
        for i in range(nslots):
            f.seek(i * bs + 4096)
            f.write(b"\xa5" * 512)
        f.flush()
        os.fsync(f.fileno())


def test_bad_checksum_is_dropped_and_refetched(tmp):
    sums = make_model_tree(str(tmp / "src"), n=2)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        used = settle(m)["disk_slots_used"]
    _scribble_slots(cache, used)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums  # never the rotten bytes
        st = settle(m)
        log = m.log()
    big = [r for r in sums if r.startswith("model")]
    assert st["disk_csum_errors"] >= len(big), st
    assert st["store_reads"] >= len(big), st
    assert "failed its checksum" in log
    # the refetched blocks were written again: a third mount is clean
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        st = m.stats()
        assert st["disk_csum_errors"] == 0 and st["store_reads"] == 0, st


def test_lru_eviction_within_the_limit(tmp):
    a = write_random(str(tmp / "src" / "a.bin"), 3 * MiB, seed=1)
    b = write_random(str(tmp / "src" / "b.bin"), 3 * MiB, seed=2)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache, "disk_cache=4M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("a.bin"), "rb").read() == a
        settle(m)
        assert open(m.p("b.bin"), "rb").read() == b
        st = settle(m)
        assert st["disk_slots"] == 4, st
        assert st["disk_slots_used"] <= 4 and st["disk_evictions"] >= 2, st
    # after a restart the most recent file (b) is on disk, a is (partly) not
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("b.bin"), "rb").read() == b
        st = m.stats()
        assert st["store_reads"] == 0 and st["disk_hits"] == 3, st
        assert open(m.p("a.bin"), "rb").read() == a
        assert m.stats()["store_reads"] >= 1


def test_full_cache_disk_degrades_to_ram(tmp):
    need_root()
    cache = str(tmp / "small-fs")
    os.makedirs(cache)
    # a 6 MiB filesystem, while the tier is allowed 64 MiB: the disk fills first
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", cache],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs: %s" % r.stderr.strip())
    try:
        data = write_random(str(tmp / "src" / "big.bin"), 24 * MiB + 5, seed=9)
        opts = OPTS + ["cache_dir=" + cache, "disk_cache=64M"]
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
            assert open(m.p("big.bin"), "rb").read() == data
            st = settle(m)
            assert st["disk_state"] == 2, st  # full: RAM only now
            assert 0 < st["disk_writes"] < 25, st
            # reads keep working, twice over (RAM, then the store again after eviction)
            assert open(m.p("big.bin"), "rb").read() == data
            assert "no space left" in m.log()
            assert m.log().count("no space left") == 1
    finally:
        subprocess.run(["umount", "-l", cache])


def test_unusable_cache_dir_runs_ram_only(tmp):
    data = write_random(str(tmp / "src" / "f.bin"), 2 * MiB, seed=3)
    blocker = tmp / "not-a-dir"
    blocker.write_text("x")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s/sub" % blocker]) as m:
        assert open(m.p("f.bin"), "rb").read() == data
        assert m.stats()["disk_state"] == 0
        assert "RAM only" in m.log()


def test_second_daemon_on_one_cache_dir_runs_ram_only(tmp):
    data = write_random(str(tmp / "src" / "f.bin"), 2 * MiB, seed=4)
    cache = str(tmp / "cache")
    (tmp / "mnt2").mkdir()
    opts = OPTS + ["cache_dir=" + cache]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m1:
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt2"), opts=opts) as m2:
            assert open(m2.p("f.bin"), "rb").read() == data
            assert m2.stats()["disk_state"] == 0
            assert "in use by another mcfs" in m2.log()
        assert open(m1.p("f.bin"), "rb").read() == data
        assert settle(m1)["disk_writes"] == 2
