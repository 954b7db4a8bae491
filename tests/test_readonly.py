"""Every write-like operation fails with EROFS, and the store is untouched.

create, open for writing (O_WRONLY, O_RDWR, O_TRUNC, O_APPEND), mkdir, rmdir,
unlink, rename, chmod, chown, truncate, utimes, symlink, link, mknod,
setxattr and removexattr, on files, directories and the root.
"""
import errno
import os

import pytest

from conftest import mcfs_mount
from gen import make_tree, tree_entries


def erofs(fn, *args, **kw):
    with pytest.raises(OSError) as ei:
        fn(*args, **kw)
    assert ei.value.errno == errno.EROFS, "%s%r: %s" % (fn.__name__, args, ei.value)


def test_writes_get_erofs(tmp):
    src = str(tmp / "src")
    make_tree(src)
    before = tree_entries(src)
    with mcfs_mount(src, str(tmp / "mnt")) as m:
        f, d, ln = m.p("small.txt"), m.p("dir with space"), m.p("link-to-small")
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND,
                      os.O_WRONLY | os.O_CREAT):
            erofs(os.open, f, flags)
        erofs(os.open, m.p("new-file"), os.O_WRONLY | os.O_CREAT, 0o644)
        erofs(os.open, m.p("dir with space", "new"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        erofs(os.mkdir, m.p("newdir"))
        erofs(os.mkdir, m.p("dir with space", "sub"))
        erofs(os.rmdir, m.p("empty dir"))
        erofs(os.unlink, f)
        erofs(os.unlink, ln)
        erofs(os.rename, f, m.p("renamed"))
        erofs(os.rename, d, m.p("renamed-dir"))
        erofs(os.chmod, f, 0o600)
        erofs(os.chmod, d, 0o700)
        erofs(os.chmod, m.path, 0o700)
        erofs(os.chown, f, 1, 1)
        erofs(os.truncate, f, 0)
        erofs(os.truncate, f, 10**9)
        erofs(os.utime, f, (0, 0))
        erofs(os.utime, f, None)
        erofs(os.symlink, "small.txt", m.p("newlink"))
        erofs(os.link, f, m.p("hardlink"))
        erofs(os.mknod, m.p("fifo"), 0o600 | 0o010000)  # S_IFIFO
        erofs(os.setxattr, f, "user.test", b"1")
        erofs(os.setxattr, m.path, "user.mcfs.stats", b"0")
        erofs(os.removexattr, f, "user.test")
        # a read-only descriptor cannot be used to write either
        fd = os.open(f, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as ei:
                os.write(fd, b"x")
            assert ei.value.errno == errno.EBADF
            with pytest.raises(OSError):
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        assert open(f, "rb").read() == open(os.path.join(src, "small.txt"), "rb").read()
    assert tree_entries(src) == before, "the store changed"
