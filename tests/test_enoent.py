"""Missing paths give ENOENT (and a path through a file ENOTDIR), everywhere.

Also: a name that appears in the store later is found once negative_ttl has
passed (negative_ttl=0 here), and a missing name does not poison its
directory's listing.
"""
import errno
import os

import pytest

from conftest import mcfs_mount


def err(expect, fn, *args):
    with pytest.raises(OSError) as ei:
        fn(*args)
    assert ei.value.errno == expect, "%s%r: %s" % (fn.__name__, args, ei.value)


def test_missing_paths(tmp):
    src = tmp / "src"
    (src / "d").mkdir()
    (src / "d" / "f").write_bytes(b"abc")
    (src / "file").write_bytes(b"x")
    with mcfs_mount(str(src), str(tmp / "mnt")) as m:
        for rel in ("nope", "d/nope", "nope/deeper/still", "d/f.bak", "D", "d/F", " file",
                    "file ", "caf\u00e9", "\u65e5\u672c"):
            p = m.p(rel)
            err(errno.ENOENT, os.stat, p)
            err(errno.ENOENT, os.lstat, p)
            err(errno.ENOENT, os.open, p, os.O_RDONLY)
            err(errno.ENOENT, os.listdir, p)
            err(errno.ENOENT, os.readlink, p)
            err(errno.ENOENT, os.getxattr, p, "user.mcfs.cached")
            assert not os.path.exists(p)
        err(errno.ENOTDIR, os.stat, m.p("file", "x"))
        err(errno.ENOTDIR, os.listdir, m.p("file"))
        err(errno.ENOTDIR, os.open, m.p("d", "f", "g"), os.O_RDONLY)
        # again: answers from the negative cache must be the same
        err(errno.ENOENT, os.stat, m.p("nope"))
        assert sorted(os.listdir(m.path)) == ["d", "file"]
        assert os.listdir(m.p("d")) == ["f"]
        assert open(m.p("d", "f"), "rb").read() == b"abc"


def test_name_that_appears_later(tmp):
    src = tmp / "src"
    (src / "d").mkdir()
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["negative_ttl=0", "attr_ttl=0"]) as m:
        err(errno.ENOENT, os.stat, m.p("d", "late"))
        (src / "d" / "late").write_bytes(b"here now")
        assert open(m.p("d", "late"), "rb").read() == b"here now"
        assert "late" in os.listdir(m.p("d"))
        (src / "d" / "late").unlink()
        err(errno.ENOENT, os.stat, m.p("d", "late"))
        assert os.listdir(m.p("d")) == []
