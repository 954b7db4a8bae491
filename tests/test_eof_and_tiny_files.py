"""EOF behaviour, and files of 0 and 1 bytes.

A read at EOF returns nothing, a read that runs past EOF is cut there, and a
read that starts past EOF returns nothing (never an error, never stale
bytes); empty and 1-byte files read, stat and copy like the source.
"""
import os
import shutil

import pytest

from conftest import mcfs_mount
from gen import MiB, pread_direct_fd, write_random


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "odirect"])
def test_eof(tmp, direct):
    src = tmp / "src"
    sizes = {"empty": 0, "one": 1, "odd": 3 * MiB + 5, "page": 4096}
    data = {n: write_random(str(src / n), s, seed=s) for n, s in sizes.items()}
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        for name, size in sizes.items():
            st = os.stat(m.p(name))
            assert st.st_size == size, name
            flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
            fd = os.open(m.p(name), flags)
            try:
                rd = (lambda o, n: pread_direct_fd(fd, o, n)) if direct else \
                    (lambda o, n: os.pread(fd, n, o))
                assert rd(size, 10) == b"", "%s: read at EOF" % name
                assert rd(size + 1, 10) == b"", "%s: read past EOF" % name
                assert rd(size + 5 * MiB, 4096) == b"", "%s: read far past EOF" % name
                if size:
                    assert rd(size - 1, 100) == data[name][-1:], "%s: last byte" % name
                    assert rd(max(0, size - 4000), 8192) == data[name][-4000:], name
                assert rd(0, size + 4096) == data[name], "%s: whole + more" % name
            finally:
                os.close(fd)


def test_empty_and_one_byte(tmp):
    src = tmp / "src"
    (src / "empty").write_bytes(b"")
    (src / "one").write_bytes(b"\x00")
    (src / "one-x").write_bytes(b"x")
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        assert open(m.p("empty"), "rb").read() == b""
        assert open(m.p("one"), "rb").read() == b"\x00"
        assert open(m.p("one-x"), "rb").read() == b"x"
        with open(m.p("one-x"), "rb") as f:
            assert f.read(1) == b"x"
            assert f.read(1) == b""
        out = tmp / "copy"
        out.mkdir()
        for n in ("empty", "one", "one-x"):
            shutil.copyfile(m.p(n), str(out / n))
            assert (out / n).read_bytes() == (src / n).read_bytes()
