"""The disk tier (issue 5): write-behind of fetched blocks, reads verified by
checksum (a rotten block is dropped and fetched again, never served), LRU
eviction within the disk_cache limit, and a full cache filesystem degrading
to RAM-only with a log line while reads keep working."""
import contextlib
import errno
import os
import subprocess

import pytest

from conftest import mcfs_mount, need_root
from disk_helpers import (OPTS, drop_page_cache, make_model_tree, settle, store_dir, tree_sums,
                          version_files)
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
    # one file per version held (the empty file has no block)
    assert len(version_files(cache)) == len(sums) - 1, version_files(cache)


def test_a_block_made_whole_by_pieces_is_written_behind(tmp):
    """A random reader's first reads fetch only their pages (a range of the
    block); once later reads have fetched the rest, the block is whole and is
    written to the disk tier as a block fetched whole is. Before, such a block
    never reached the disk tier, and a backing-file build then dropped its RAM
    copy: the file no longer counted as held (issue 22 follow-up)."""
    size = 4 * MiB + 777
    data = write_random(str(tmp / "src" / "w.bin"), size, seed=71)
    nblocks = (size + MiB - 1) // MiB
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s" % (tmp / "cache"), "readahead_max=0"]) as m:
        fd = os.open(m.p("w.bin"), os.O_RDONLY)
        try:
            # The middle page of every block first: each is a range fetch.
            for i in range(nblocks):
                off = i * MiB + min(MiB, size - i * MiB) // 2 // 4096 * 4096
                assert os.pread(fd, 4096, off) == data[off:off + 4096]
            pieces = settle(m)["disk_writes"]
            assert pieces < nblocks, "every block was fetched whole: nothing to test"
            got = bytearray()
            while len(got) < size:
                b = os.pread(fd, MiB, len(got))
                assert b, "short read at %d" % len(got)
                got += b
            assert bytes(got) == data
        finally:
            os.close(fd)
        st = settle(m)
        assert st["disk_writes"] == nblocks, st
        assert st["disk_bytes_used"] == size, st


def _scribble_blocks(cache, bs=MiB):
    """Overwrites bytes in every block of every version file, at the block's own offset."""
    for p in version_files(cache):
        with open(p, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            for off in range(0, size, bs):
                f.seek(off + min(4096, (size - off) // 2))
                f.write(b"\xa5")
            f.flush()
            os.fsync(f.fileno())


def test_buffered_disk_tier_restart_is_warm(tmp):
    """disk_direct=false: the disk tier writes through the page cache (the log
    says so), and a restart with the page cache dropped still serves every
    file from the disk tier, bytes equal, with no store read."""
    sums = make_model_tree(str(tmp / "src"), n=3)
    opts = OPTS + ["cache_dir=" + str(tmp / "cache"), "disk_direct=false"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        st = settle(m)
        assert st["disk_writes"] > 0, st
        assert "one file per version, buffered)" in m.log(), m.log()
    subprocess.run(["sync"], check=True)
    drop_page_cache()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        st = m.stats()
        assert st["store_reads"] == 0 and st["fetches"] == 0, st
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts[:-1]) as m:
        log = m.log()  # the default: O_DIRECT, where the filesystem takes it
        assert "one file per version, O_DIRECT)" in log or "refuses O_DIRECT" in log, log

def test_bad_checksum_is_dropped_and_refetched(tmp):
    sums = make_model_tree(str(tmp / "src"), n=2)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        settle(m)
    _scribble_blocks(cache)
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
        # from disk: 3 blocks through the cache, or b's version file by passthrough
        assert st["store_reads"] == 0, st
        assert st["disk_hits"] == 3 or st["passthrough_opens"] == 1, st
        assert open(m.p("a.bin"), "rb").read() == a
        assert m.stats()["store_reads"] >= 1


@contextlib.contextmanager
def small_fs(path, size="6m"):
    """A tmpfs of `size` mounted on `path` (made here) for the with block."""
    need_root()
    os.makedirs(path)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs: %s" % r.stderr.strip())
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path])


def test_full_cache_disk_degrades_to_ram(tmp):
    # a 6 MiB filesystem, while the tier is allowed 64 MiB: the disk fills first
    with small_fs(str(tmp / "small-fs")) as cache:
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


def fill(path):
    """Writes zeros to `path` until its filesystem is full."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (64 * 1024, 4096):  # then the last few pages
            try:
                while True:
                    f.write(bytes(chunk))
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def test_full_cache_disk_metadata_says_what_is_full(tmp):
    """Issue 22, item 9: LMDB behind a full cache filesystem. The metadata's
    failure names the filesystem, its free bytes and the metadata's size,
    not a bare errno text ("No space left on device", "Input/output error")."""
    with small_fs(str(tmp / "small-fs")) as cache:
        for i in range(300):
            (tmp / "src" / ("f%03d" % i)).write_bytes(b"%d" % i)
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                        opts=OPTS + ["cache_dir=" + cache]) as m:
            fill(os.path.join(cache, "filler"))
            assert len(os.listdir(m.p())) == 300  # a listing and 300 attributes to record
            assert open(m.p("f007"), "rb").read() == b"7"
            lines = [ln for ln in m.log().splitlines() if "cache metadata" in ln]
            assert len(lines) == 1, m.log()
            assert "no space left on the cache filesystem (" in lines[0], lines[0]
            assert "free at %s/" % cache in lines[0] and "the metadata uses" in lines[0], \
                lines[0]


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
