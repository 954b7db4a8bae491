"""FUSE passthrough (issue 14): complete files are read by the kernel from their
backing file in cache_dir, with no FUSE READ; everything else goes through the
cache, with the same bytes.

A read proves passthrough when the page cache was dropped before it and the
daemon's fuse_reads did not move during it: every byte came from the backing
file. `passthrough_opens` counts the opens answered that way.
"""
import hashlib
import mmap
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import MCFS, cleanup_daemon, fuse_mounted, mcfs_mount, need_root, wait_for
from disk_helpers import allocated, settle, version_files
from fuse_knobs import ENABLE_URING, features, knob, read_knob
from gen import MiB, drop_caches, make_safetensors, rand_bytes, write_random

NOBODY = 65534
SIZE = 10 * MiB + 12345


def need_passthrough(why="test_fallback_libfuse covers this build"):
    need_root()
    if not features()["passthrough"]:
        pytest.skip("this mcfs is built against libfuse %s, without passthrough (3.17 needed): "
                    "%s" % (features()["libfuse"], why))


def opts(tmp, *more):
    return ["cache_dir=%s" % (tmp / "cache"), "block_size=1M", "ram_cache=64M", *more]


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def read_through(m, path, want):
    """Reads `path` whole after dropping the page cache; asserts the bytes and
    returns the FUSE READs the daemon answered meanwhile."""
    drop_caches()
    before = m.stats()["fuse_reads"]
    got = read_all(path)
    assert hashlib.sha256(got).digest() == hashlib.sha256(want).digest(), path
    return m.stats()["fuse_reads"] - before


def test_passthrough_only_for_complete_files(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=141)
    # no readahead, so that a read of a part fetches that part only
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "readahead_max=0", "read_ahead_kb=128")) as m:
        assert m.stats()["passthrough"] == 1, m.log()
        assert "passthrough on" in m.log(), m.log()
        # a part of it: 2 of its 11 blocks
        with open(m.p("m.bin"), "rb") as f:
            assert f.read(2 * MiB) == data[:2 * MiB]
        settle(m)
        assert m.stats()["disk_writes"] < 11, m.stats()
        # incomplete: this open goes through the cache, and its reads are FUSE READs
        with open(m.p("m.bin"), "rb") as f:
            st = m.stats()
            assert st["passthrough_opens"] == 0 and st["backing_builds"] == 0, st
            drop_caches()
            assert f.read() == data   # completes the file in the tiers
            assert m.stats()["fuse_reads"] > st["fuse_reads"]
        settle(m)
        # complete: the next open builds the backing file and is passthrough
        with open(m.p("m.bin"), "rb") as f:
            st = m.stats()
            assert st["passthrough_opens"] == 1 and st["backing_builds"] == 1, st
            assert st["backing_files"] == 1 and st["backing_bytes"] == SIZE, st
            drop_caches()
            before = m.stats()["fuse_reads"]
            assert f.read() == data
            assert m.stats()["fuse_reads"] == before, "a passthrough read reached the daemon"
        # later opens reuse it: no second build
        assert read_through(m, m.p("m.bin"), data) == 0
        st = m.stats()
        assert st["passthrough_opens"] == 2 and st["backing_builds"] == 1, st
        # random reads through passthrough; an evict while it is open keeps the
        # version's blocks for the kernel and says so
        with open(m.p("m.bin"), "rb") as f:
            for off in (0, 1, MiB - 1, 5 * MiB + 77, SIZE - 10):
                f.seek(off)
                assert f.read(4097) == data[off:off + 4097], off
            ev = os.getxattr(m.p("m.bin"), "user.mcfs.evict").decode()
            assert "disk_bytes 0\nheld_open 1\n" in ev, ev
            assert m.stats()["backing_files"] == 1, ev
            r = subprocess.run([MCFS, "evict", m.p("m.bin")], capture_output=True, text=True)
            assert r.returncode == 0 and "0 B from disk\n1 file version open through " \
                "passthrough keeps its disk blocks until the last close" in r.stdout, r
            f.seek(SIZE - 4097)
            assert f.read() == data[-4097:]
        # the kernel's RELEASE comes after close() returns: once the daemon has
        # it, the last put drops the version's blocks; the next open is cached
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()
        assert m.stats()["backing_files"] == 0, m.stats()
        ev = os.getxattr(m.p("m.bin"), "user.mcfs.evict").decode()
        assert ev.endswith("disk_bytes 0\nheld_open 0\n"), ev
        assert read_through(m, m.p("m.bin"), data) > 0
        assert m.stats()["passthrough_opens"] == 3, m.stats()


def test_replaced_file_never_mixes_versions(tmp):
    need_passthrough()
    src = tmp / "src"
    a, b = rand_bytes(SIZE, 142), rand_bytes(SIZE, 143)   # one size: only bytes differ
    (src / "m.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"),
                    opts=opts(tmp, "attr_ttl=0", "negative_ttl=0")) as m:
        assert read_all(m.p("m.bin")) == a
        settle(m)
        old = open(m.p("m.bin"), "rb")   # passthrough of version a
        try:
            assert m.stats()["passthrough_opens"] == 1, m.stats()
            assert old.read(MiB) == a[:MiB]
            (src / ".new").write_bytes(b)
            os.replace(str(src / ".new"), str(src / "m.bin"))
            # the open file keeps version a to its end
            drop_caches()
            assert old.read() == a[MiB:]
            # the kernel holds a's backing file on the inode, and no other version can
            # be opened beside it: the next open gets b on a new inode, whole, through
            # the cache (b is not complete); test_passthrough_replace.py has the rest
            assert read_through(m, m.p("m.bin"), b) > 0
            assert m.stats()["inode_renumbers"] == 1, m.stats()
            assert "changed in the store while open with passthrough" in m.log()
        finally:
            old.close()
        # a's RELEASE, which the kernel sends after close() returns, has put back a's
        # pins: b's registration below finds a's version unheld and removes it (CI's
        # TSan pass once registered b first, and a's version stayed: backing_files 2)
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()
        settle(m)
        # b complete: passthrough of b's own backing file; a's is gone (superseded)
        assert read_through(m, m.p("m.bin"), b) == 0
        st = m.stats()
        assert st["passthrough_opens"] == 2 and st["backing_builds"] == 2, st
        assert st["backing_files"] == 1, st


def test_superseded_version_goes_at_its_last_close(tmp):
    """A version still open with passthrough when a newer one is handed out
    leaves the disk tier at its last close, not at LRU's leisure."""
    need_passthrough()
    src = tmp / "src"
    a, b = rand_bytes(SIZE, 145), rand_bytes(SIZE, 146)
    (src / "m.bin").write_bytes(a)
    cache = tmp / "cache"
    with mcfs_mount(str(src), str(tmp / "mnt"),
                    opts=opts(tmp, "attr_ttl=0", "negative_ttl=0")) as m:
        assert read_all(m.p("m.bin")) == a
        settle(m)
        old = open(m.p("m.bin"), "rb")   # passthrough of version a: pinned
        try:
            assert m.stats()["passthrough_opens"] == 1, m.stats()
            (src / ".new").write_bytes(b)
            os.replace(str(src / ".new"), str(src / "m.bin"))
            assert read_through(m, m.p("m.bin"), b) > 0   # b through the cache: now whole
            settle(m)
            assert read_through(m, m.p("m.bin"), b) == 0  # b handed out beside pinned a
            st = m.stats()
            assert st["passthrough_opens"] == 2 and st["backing_files"] == 2, st
            assert old.read() == a                        # a's open still reads a
        finally:
            old.close()
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()
        assert wait_for(lambda: m.stats()["backing_files"] == 1), m.stats()
        # a's version file is punched and removed behind the release
        assert wait_for(lambda: len(version_files(cache)) == 1), version_files(cache)
        assert allocated(os.path.dirname(version_files(cache)[0])) <= SIZE * 1.1
        assert read_through(m, m.p("m.bin"), b) == 0      # b stays, passthrough


def test_mmap_and_safe_open_through_passthrough(tmp):
    need_passthrough()
    safetensors = pytest.importorskip("safetensors", reason="safetensors is not installed")
    np = pytest.importorskip("numpy", reason="numpy is not installed")
    tensors = make_safetensors(str(tmp / "src" / "model.safetensors"), seed=14, big=True)
    data = read_all(str(tmp / "src" / "model.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts(tmp)) as m:
        p = m.p("model.safetensors")
        assert read_all(p) == data   # through the cache: now complete
        settle(m)
        drop_caches()
        before = m.stats()
        with open(p, "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert mm[:] == data
                assert mm[len(data) - 5:] == data[-5:]
        assert m.stats()["passthrough_opens"] == before["passthrough_opens"] + 1
        assert m.stats()["fuse_reads"] == before["fuse_reads"], "mmap faults reached the daemon"
        drop_caches()
        before = m.stats()
        with safetensors.safe_open(p, framework="np") as f:
            assert sorted(f.keys()) == sorted(tensors)
            for k in f.keys():
                t = f.get_tensor(k)
                assert t.dtype == tensors[k].dtype and t.shape == tensors[k].shape, k
                assert np.array_equal(t, tensors[k]), k
        st = m.stats()
        assert st["passthrough_opens"] == before["passthrough_opens"] + 1, st
        assert st["fuse_reads"] == before["fuse_reads"], "safe_open's reads reached the daemon"


@pytest.mark.parametrize("uring", ["Y", "N"])
def test_passthrough_with_io_uring_on_and_off(tmp, uring):
    need_passthrough()
    if read_knob(ENABLE_URING) is None:
        pytest.skip("%s does not exist: the kernel has no FUSE over io_uring" % ENABLE_URING)
    v = read_knob("/proc/sys/kernel/io_uring_disabled")
    if uring == "Y" and v not in (None, "0"):
        pytest.skip("kernel.io_uring_disabled is %s: no io_uring for anyone" % v)
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=144)
    with knob(ENABLE_URING, uring):
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts(tmp)) as m:
            want = features()["io_uring"] and uring == "Y"
            assert m.stats()["fuse_io_uring"] == int(want), m.log()
            # cold: through the cache, over the rings or /dev/fuse
            assert read_through(m, m.p("m.bin"), data) > 0
            settle(m)
            assert read_through(m, m.p("m.bin"), data) == 0   # passthrough: neither
            assert m.stats()["passthrough_opens"] == 1, m.stats()
            assert m.stats()["fuse_io_uring"] == int(want)


def two_reads_through_the_cache(tmp, extra_opts, why):
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=145)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts(tmp, *extra_opts)) as m:
        assert "passthrough off (%s)" % why in m.log(), m.log()
        assert read_through(m, m.p("m.bin"), data) > 0
        settle(m)
        assert read_through(m, m.p("m.bin"), data) > 0   # complete, yet through the cache
        st = m.stats()
        assert st["passthrough"] == 0 and st["passthrough_opens"] == 0, st
        assert st["backing_builds"] == 0, st


def test_fallback_passthrough_off(tmp):
    need_root()
    two_reads_through_the_cache(tmp, ["passthrough=off"], "passthrough=off")


def test_fallback_libfuse(tmp):
    need_root()
    if features()["passthrough"]:
        pytest.skip("this mcfs is built against libfuse %s, with passthrough; the 3.14 build "
                    "(tests/run.sh) runs this test" % features()["libfuse"])
    two_reads_through_the_cache(tmp, [], "libfuse before 3.17")


def as_nobody(*cmd, **kw):
    return subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                           "--clear-groups", *cmd], capture_output=True, text=True,
                          timeout=120, **kw)


READER = r"""
import hashlib, os, sys
p = sys.argv[1]
def stats():
    raw = os.getxattr(os.path.dirname(p), "user.mcfs.stats").decode()
    return dict((k, int(v)) for k, v in (l.split() for l in raw.splitlines()))
for i in range(2):
    with open(p, "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest())
    if i == 0:
        import time
        for _ in range(400):   # write-behind done: the file is complete on disk
            s = stats()
            if s["disk_queued"] == 0 and s["inflight"] == 0 and s["disk_owed"] == 0:
                break
            time.sleep(0.05)
s = stats()
print(s["passthrough"], s["passthrough_opens"], s["backing_builds"], s["disk_writes"])
"""


def test_fallback_daemon_not_root():
    """A daemon without CAP_SYS_ADMIN never asks for passthrough: same bytes, through the cache."""
    from test_libfuse import dev_fuse_for_users, need_user_mounts
    need_user_mounts()
    top = tempfile.mkdtemp(prefix="mcfs-pt-user-")
    os.chmod(top, 0o755)
    src, mnt, cache = (os.path.join(top, d) for d in ("src", "mnt", "cache"))
    data = write_random(os.path.join(src, "m.bin"), SIZE, seed=146)
    os.makedirs(mnt)
    os.makedirs(cache)
    log = os.path.join(top, "log")
    for p in (top, src, mnt, cache, os.path.join(src, "m.bin")):
        os.chown(p, NOBODY, NOBODY)
    proc = None
    try:
        with dev_fuse_for_users(), open(log, "w") as logf:
            # foreground, so that its log (stderr) is ours to read
            proc = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                                     "--clear-groups", MCFS, "mount", src, mnt, "-f", "-o",
                                     "cache_dir=%s,ram_cache=64M,block_size=1M" % cache],
                                    stdout=logf, stderr=logf, cwd="/")
            assert wait_for(lambda: "passthrough " in open(log).read() or
                            proc.poll() is not None, timeout=20), open(log).read()
            assert fuse_mounted(mnt), open(log).read()
            # a build without passthrough never gets as far as asking who runs it
            why = ("the daemon lacks CAP_SYS_ADMIN" if features()["passthrough"]
                   else "libfuse before 3.17")
            assert "passthrough off (%s" % why in open(log).read(), open(log).read()
            r = as_nobody("python3", "-c", READER, os.path.join(mnt, "m.bin"), cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr
            lines = r.stdout.split()
            want = hashlib.sha256(data).hexdigest()
            assert lines[0] == want and lines[1] == want, r.stdout
            on, opens, builds, writes = map(int, lines[2:6])
            assert (on, opens, builds) == (0, 0, 0), r.stdout
            assert writes == 11, r.stdout   # the disk tier holds it whole: only root was missing
            r = as_nobody(MCFS, "umount", mnt, cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr
            assert proc.wait(timeout=20) == 0, open(log).read()
    finally:
        cleanup_daemon(mnt)
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(top, ignore_errors=True)
