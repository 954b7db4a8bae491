"""A store file that changes under an open file never yields mixed or stale bytes.

- shrinks while open: reading a block not yet cached gives EIO, and the
  daemon log has a line naming the path and the block;
- vanishes while open: the same;
- is replaced (new content, same size): the open file gives EIO for blocks
  not yet cached, a new open (attr_ttl=0) reads only new bytes, buffered or
  not, and never a mix of old cached blocks and new ones.

readahead_max=0 so that only the blocks the test reads are cached.
"""
import errno
import os
import re
import time

import pytest

from conftest import mcfs_mount, wait_for
from gen import MiB, drop_caches, pread_direct_fd, write_random

OPTS = ["block_size=1M", "readahead_max=0", "attr_ttl=0", "negative_ttl=0"]


def eio(fd, off, n=4096):
    with pytest.raises(OSError) as ei:
        pread_direct_fd(fd, off, n)
    assert ei.value.errno == errno.EIO, ei.value


def log_names(m, name, block):
    pat = re.compile(r"%s.*block %d\b" % (re.escape(name), block))
    return wait_for(lambda: any(pat.search(l) for l in m.log().splitlines()), timeout=5)


@pytest.mark.parametrize("change", ["shrink", "vanish"])
def test_changed_while_open(tmp, change):
    """Default TTLs: the kernel trusts the size it has, the read reaches the daemon."""
    path = tmp / "src" / "sub dir" / "weights.bin"
    data = write_random(str(path), 4 * MiB, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "readahead_max=0"]) as m:
        fd = os.open(m.p("sub dir", "weights.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            assert pread_direct_fd(fd, 0, 4096) == data[:4096]   # block 0 cached
            if change == "shrink":
                os.truncate(str(path), 1 * MiB + 10)
            else:
                os.unlink(str(path))
            eio(fd, 3 * MiB + 5)                                # block 3: not cached
            assert log_names(m, "weights.bin", 3), \
                "no log line names the path and block 3:\n" + m.log()
            # Block 0 was cached under the old version. Reading it again gives
            # the old bytes or EIO, never another errno (read(2) has no ENOENT)
            # and never new bytes. The pause lets any attribute invalidation
            # the daemon sent after the error reach the kernel first.
            time.sleep(0.3)
            try:
                pread_direct_fd(fd, 3 * MiB + 5, 4096)
                raise AssertionError("a second read of block 3 after the store file %s did "
                                     "not fail: the open file now ends early, silently" % (
                                         "shrank" if change == "shrink" else "vanished"))
            except OSError as e:
                assert e.errno == errno.EIO, "second read of block 3: %r" % e
            try:
                got = pread_direct_fd(fd, 0, MiB)
                assert got == data[:len(got)] and len(got) in (MiB, MiB + 10, 0), len(got)
            except OSError as e:
                assert e.errno == errno.EIO, \
                    "read of the open file after the store file %s: %r (want EIO or the " \
                    "old bytes)" % ("shrank" if change == "shrink" else "vanished", e)
        finally:
            os.close(fd)
        # the daemon is still healthy
        assert os.listdir(m.path) == ["sub dir"]


@pytest.mark.parametrize("change", ["shrink", "vanish"])
def test_changed_while_open_ttl0(tmp, change):
    """attr_ttl=0: the kernel may learn the new size (or that the file is gone)
    before it reads. Then EOF or an error is fine; bytes that are not the old
    file's are not, and neither is a hang."""
    path = tmp / "src" / "weights.bin"
    data = write_random(str(path), 4 * MiB, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        fd = os.open(m.p("weights.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            assert pread_direct_fd(fd, 0, 4096) == data[:4096]
            if change == "shrink":
                os.truncate(str(path), 1 * MiB + 10)
            else:
                os.unlink(str(path))
            for off, n in ((3 * MiB + 5, 4096), (0, 2 * MiB)):
                try:
                    got = pread_direct_fd(fd, off, n)
                except OSError as e:
                    assert e.errno in (errno.EIO, errno.ENOENT, errno.ESTALE), e
                    continue
                assert got == data[off:off + len(got)], "off=%d: bytes of no version" % off
        finally:
            os.close(fd)


def test_replaced_same_size(tmp):
    path = tmp / "src" / "w.bin"
    old = write_random(str(path), 3 * MiB, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        mp = m.p("w.bin")
        fd = os.open(mp, os.O_RDONLY | os.O_DIRECT)
        with open(mp, "rb") as f:
            assert f.read(MiB) == old[:MiB]                      # buffered, block 0
        assert pread_direct_fd(fd, 0, 4096) == old[:4096]
        time.sleep(0.01)  # a different mtime even on coarse clocks
        new = write_random(str(tmp / "src" / ".tmp"), 3 * MiB, seed=2)
        os.replace(str(tmp / "src" / ".tmp"), str(path))
        try:
            eio(fd, 2 * MiB)                                      # old version, uncached block
        finally:
            os.close(fd)
        # a new open sees only the new version, through the page cache or not
        with open(mp, "rb") as f:
            assert f.read() == new, "buffered read after replace is not the new content"
        fd = os.open(mp, os.O_RDONLY | os.O_DIRECT)
        try:
            assert pread_direct_fd(fd, 0, 3 * MiB) == new
        finally:
            os.close(fd)
        drop_caches()
        with open(mp, "rb") as f:
            assert f.read() == new


def test_grown_file_reopened(tmp):
    """A file that grew is seen at its new size by a new open (attr_ttl=0)."""
    path = tmp / "src" / "log.bin"
    a = write_random(str(path), MiB + 1, seed=3)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        assert open(m.p("log.bin"), "rb").read() == a
        b = write_random(str(tmp / "src" / ".t"), 2 * MiB + 7, seed=4)
        os.replace(str(tmp / "src" / ".t"), str(path))
        assert os.stat(m.p("log.bin")).st_size == len(b)
        assert open(m.p("log.bin"), "rb").read() == b


def test_type_change(tmp):
    """A directory replaced by a file (and back) is seen as what it is now (attr_ttl=0)."""
    import shutil
    import stat as st_
    src = tmp / "src"
    (src / "x").mkdir()
    (src / "x" / "inner").write_bytes(b"inner")
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=OPTS) as m:
        assert os.listdir(m.p("x")) == ["inner"]
        assert open(m.p("x", "inner"), "rb").read() == b"inner"
        shutil.rmtree(str(src / "x"))
        (src / "x").write_bytes(b"now a file")
        assert st_.S_ISREG(os.stat(m.p("x")).st_mode)
        assert open(m.p("x"), "rb").read() == b"now a file"
        assert not os.path.exists(m.p("x", "inner"))
        os.unlink(str(src / "x"))
        os.symlink("elsewhere", str(src / "x"))
        assert os.readlink(m.p("x")) == "elsewhere"
        os.unlink(str(src / "x"))
        (src / "x").mkdir()
        (src / "x" / "again").write_bytes(b"again")
        assert os.listdir(m.p("x")) == ["again"]
        assert open(m.p("x", "again"), "rb").read() == b"again"


def test_old_open_never_sees_new_version(tmp):
    """An open of version A, read after another open read version B, still
    reads A (or gets EIO), never B's bytes: the kernel's page cache of the
    inode is shared by every open of it, so the daemon must keep versions
    apart there too (e.g. a new inode per version, or no page cache for
    a file whose version changed)."""
    path = tmp / "src" / "model.bin"
    a = write_random(str(path), 4 * MiB, seed=1)
    b = write_random(str(tmp / "src" / ".new"), 4 * MiB, seed=2)
    os.rename(str(tmp / "src" / ".new"), str(tmp / "b.staged"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        f1 = open(m.p("model.bin"), "rb", buffering=0)
        try:
            assert f1.read(MiB) == a[:MiB]                       # open 1: version A
            os.replace(str(tmp / "b.staged"), str(path))
            with open(m.p("model.bin"), "rb") as f2:             # open 2: version B
                assert f2.read() == b
            try:
                rest = f1.read()
            except OSError as e:
                assert e.errno == errno.EIO, e
                return
            is_b, is_a = rest == b[MiB:], rest == a[MiB:]
            assert not is_b, "open 1 (version A) read version B's blocks 1-3"
            assert is_a, "open 1 read %d bytes of no version" % len(rest)
        finally:
            f1.close()


def test_random_reader_after_replace(tmp):
    """A random reader (its misses fetch only the pages they read) of version A
    keeps getting A's bytes or EIO after the store file is replaced by B of
    the same size: never B's pages, in blocks it touched or not."""
    import random
    path = tmp / "src" / "r.bin"
    a = write_random(str(path), 8 * MiB, seed=1)
    b = write_random(str(tmp / "b.staged"), 8 * MiB, seed=2)
    chunk = 64 * 1024
    offs = list(range(0, len(a), chunk))
    random.Random(5).shuffle(offs)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        fd = os.open(m.p("r.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            for off in offs[:40]:
                assert pread_direct_fd(fd, off, chunk) == a[off:off + chunk]
            os.replace(str(tmp / "b.staged"), str(path))
            eios = 0
            for off in offs:
                try:
                    got = pread_direct_fd(fd, off, chunk)
                except OSError as e:
                    assert e.errno == errno.EIO, e
                    eios += 1
                    continue
                is_a, is_b = got == a[off:off + chunk], got == b[off:off + chunk]
                assert not is_b, "version A's open read version B at %d" % off
                assert is_a, "bytes of no version at %d" % off
            assert eios > 0, "no read failed although most of A is gone from the store"
        finally:
            os.close(fd)
