"""The disk tier as one sparse file per file version (issue 23, layout (d)):
each block at its own offset, so a complete file is its own backing file for
passthrough and the cache directory holds each byte once; a restart keeps every
block and the tier's size; a flipped byte is dropped and fetched again; LRU
eviction punches holes; a kill -9 while evicting leaves right bytes; an old
slot-file cache is discarded with one log line."""
import os
import signal
import threading
import time

from conftest import mcfs_mount
from disk_helpers import (OPTS, allocated, drop_page_cache, loop_fs, make_model_tree, settle,
                          store_dir, tree_sums, version_files)
from gen import MiB, write_random
from fuse_knobs import features
from test_crash_safety import _read_all
from test_passthrough import read_all


def sizes(src, rels):
    return sum(os.path.getsize(os.path.join(src, r)) for r in rels)


def test_one_sparse_file_per_version(tmp):
    src = str(tmp / "src")
    sums = make_model_tree(src, n=3)
    cache = str(tmp / "cache")
    with mcfs_mount(src, str(tmp / "mnt"), opts=OPTS + ["cache_dir=" + cache]) as m:
        assert tree_sums(m.path, sums) == sums
        settle(m)
    files = version_files(cache)
    held = [r for r in sums if os.path.getsize(os.path.join(src, r)) > 0]
    assert len(files) == len(held), files
    # every version file holds its file's bytes at the file's own offsets
    contents = {}
    for p in files:
        with open(p, "rb") as f:
            contents[p] = f.read()
    for rel in held:
        with open(os.path.join(src, rel), "rb") as f:
            data = f.read()
        found = [p for p, b in contents.items() if b[:len(data)] == data]
        assert len(found) == 1, (rel, [len(b) for b in contents.values()])


def test_cache_dir_holds_each_byte_once(tmp):
    """A cold pass, then a warm one (by passthrough where the build has it):
    everything under cache_dir, LMDB included, is at most 1.1x the files."""
    src = str(tmp / "src")
    sums = make_model_tree(src, n=6, size=4 * MiB + 999)
    cache = str(tmp / "cache")
    with mcfs_mount(src, str(tmp / "mnt"), opts=OPTS + ["cache_dir=" + cache]) as m:
        assert tree_sums(m.path, sums) == sums  # cold
        settle(m)
        drop_page_cache()
        assert tree_sums(m.path, sums) == sums  # warm
        st = settle(m)
        if features()["passthrough"]:
            assert st["passthrough_opens"] > 0, st
        used = allocated(cache)
    model = sizes(src, sums)
    print("cache_dir allocated %d bytes for %d bytes of files: %.3fx" % (used, model,
                                                                         used / model))
    assert used <= 1.1 * model, (used, model)


def test_restart_keeps_every_warm_block_and_the_size(tmp):
    """disk_cache left at its default (a share of the free space plus what the
    tier holds): a restart sizes the tier as before and serves every block from
    disk, with no store read. The cache directory is on a filesystem of the
    test's own: on a shared one, another process's writes between the two
    mounts move the free space, and with it the default size."""
    with loop_fs(tmp) as cachefs:
        restart_keeps_every_warm_block(tmp, os.path.join(cachefs, "cache"))


def restart_keeps_every_warm_block(tmp, cache):
    src = str(tmp / "src")
    sums = make_model_tree(src, n=4)
    opts = OPTS + ["cache_dir=" + cache]
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, sums) == sums
        st1 = settle(m)
        for rel in sums:  # read once more, so passthrough (if any) registers and pins
            read_all(m.p(rel))
        before = allocated(os.path.join(store_dir(cache), "blocks"))
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        st = m.stats()
        assert st["disk_slots_used"] == st1["disk_slots_used"], (st1, st)
        assert abs(st["disk_slots"] - st1["disk_slots"]) <= 1, (st1, st)  # free space moves
        drop_page_cache()
        assert tree_sums(m.path, sums) == sums
        st = settle(m)
        assert st["store_reads"] == 0 and st["fetches"] == 0, st
        assert st["disk_csum_errors"] == 0, st
        after = allocated(os.path.join(store_dir(cache), "blocks"))
    assert after == before, (before, after)


def flip_byte(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xff]))
        f.flush()
        os.fsync(f.fileno())


def one_file_on_disk(tmp, size, seed, *more):
    """A file of `size` bytes read once through a mount with a disk tier, and
    written behind; returns (src, cache, opts, data)."""
    src = str(tmp / "src")
    data = write_random(os.path.join(src, "w.bin"), size, seed=seed)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache, *more]
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        assert read_all(m.p("w.bin")) == data
        settle(m)
    return src, cache, opts, data


def test_flipped_byte_is_dropped_and_fetched_again(tmp):
    """Reads through the cache (passthrough off: test_backing_build_errors.py
    has the registration's check) verify each block read from disk."""
    src, cache, opts, data = one_file_on_disk(tmp, 5 * MiB + 17, 231, "passthrough=off")
    [vf] = version_files(cache)
    flip_byte(vf, 2 * MiB + 12345)  # block 2
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        assert read_all(m.p("w.bin")) == data
        st = settle(m)
        assert st["disk_csum_errors"] == 1 and st["store_reads"] == 1, st
        assert "failed its checksum" in m.log()
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:  # written again: clean
        assert read_all(m.p("w.bin")) == data
        st = m.stats()
        assert st["disk_csum_errors"] == 0 and st["store_reads"] == 0, st


def test_lru_eviction_punches_holes(tmp):
    src = str(tmp / "src")
    a = write_random(os.path.join(src, "a.bin"), 3 * MiB, seed=1)
    b = write_random(os.path.join(src, "b.bin"), 3 * MiB, seed=2)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache, "disk_cache=4M"]
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        assert read_all(m.p("a.bin")) == a
        settle(m)
        [fa] = version_files(cache)
        full = os.stat(fa).st_blocks * 512
        assert full >= 3 * MiB, full
        assert read_all(m.p("b.bin")) == b
        st = settle(m)
        assert st["disk_evictions"] == 2, st
        left = os.stat(fa).st_blocks * 512
        blocks = allocated(os.path.join(store_dir(cache), "blocks"))
    print("a.bin's version file: %d -> %d bytes allocated; the tier %d" % (full, left, blocks))
    assert left <= full - 2 * MiB, (full, left)
    assert blocks <= 4 * MiB, blocks


def test_kill9_during_eviction_then_remount_is_exact(tmp):
    """A tier of 6 blocks under a tree of 40: every write-behind evicts (deletes
    an entry, punches its block). kill -9 once evictions run, a few times; the
    next mount serves right bytes, and the tier holds no more than its size."""
    src = str(tmp / "src")
    sums = make_model_tree(src, n=8, size=4 * MiB + 777)
    rels = sorted(sums)
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache, "disk_cache=6M"]
    caught = 0
    for rnd in range(3):
        drop_page_cache()
        with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
            errors = []
            t = threading.Thread(target=_read_all, args=(m.path, rels[rnd:] + rels[:rnd],
                                                          errors), daemon=True)
            t.start()
            deadline = time.time() + 30
            last = {}
            while time.time() < deadline and t.is_alive():
                last = m.stats()
                if last["disk_evictions"] >= 3 + 2 * rnd and last["disk_queued"] > 0:
                    break
                time.sleep(0.001)
            os.kill(m.proc.pid, signal.SIGKILL)
            m.proc.wait(timeout=10)
            t.join(timeout=30)
            caught += last.get("disk_evictions", 0) > 0
        if os.path.exists(m.logpath):
            os.unlink(m.logpath)
    assert caught >= 1, "never killed while evicting"
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        assert tree_sums(m.path, rels) == sums
        settle(m)
        blocks = allocated(os.path.join(store_dir(cache), "blocks"))
    assert blocks <= 6 * MiB, blocks


def test_old_slot_file_cache_is_discarded_with_one_line(tmp):
    src, cache, opts, data = one_file_on_disk(tmp, 3 * MiB + 5, 77)
    store = store_dir(cache)
    # what mcfs before layout (d) left: the slot file and copied backing files
    with open(os.path.join(store, "blocks", "slots"), "wb") as f:
        f.write(os.urandom(2 * MiB))
    os.makedirs(os.path.join(store, "files"), exist_ok=True)
    with open(os.path.join(store, "files", "0" * 48), "wb") as f:
        f.write(data)
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        lines = [ln for ln in m.log().splitlines() if "older layout" in ln]
        assert len(lines) == 1, m.log()
        assert not os.path.exists(os.path.join(store, "blocks", "slots"))
        assert not os.path.exists(os.path.join(store, "files"))
        assert version_files(cache) == []
        assert read_all(m.p("w.bin")) == data
        st = settle(m)
        assert st["store_reads"] >= 1, st
    assert len(version_files(cache)) == 1
