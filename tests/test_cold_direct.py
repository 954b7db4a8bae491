"""Cold opens with direct_io (cold_direct_io, issue 14).

An open of a file the cache does not hold whole is answered with direct_io
when the kernel lets such an open be mmapped (FUSE_DIRECT_IO_ALLOW_MMAP,
libfuse >= 3.16): its reads go from the cache into the reader's buffer with
no page cache between. `cold_direct_opens` counts them; the mount log's
`FUSE:` line says `cold opens direct_io`, or `page cache (why)`.

What the tests prove, with bytes compared with the source:
- a cold open's reads leave no page of the file in the kernel's page cache
  (mincore through a later open), and a later page-cache read does (so the
  check can fail); cold_direct_io=off reads through the page cache;
- an mmap of a cold open (shared and private) reads the file's bytes;
- a second open while a cold open is mmapped works, and is not passthrough
  (the kernel would refuse it: the mmapped inode is in cached mode);
- a file replaced in the store while a cold open is mmapped: the next open
  gets a new inode and the new bytes, the mapping keeps the old ones.
"""
import ctypes
import mmap
import os

import pytest

from conftest import wait_for, mcfs_mount
from gen import MiB, rand_bytes

SIZE = 6 * MiB + 12345
OPTS = ["block_size=1M"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident(path):
    """Bytes of `path` in the kernel's page cache (mincore of a mapping that
    faults nothing in). Opens the file: call it only once the file is
    complete in the cache, when the open uses the page cache as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of %s" % path)
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore of %s" % path)
            return sum(b & 1 for b in vec.raw) * mmap.PAGESIZE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def need_cold_direct(m):
    log = m.log()
    if "cold opens direct_io" not in log:
        line = next((ln for ln in log.splitlines() if "cold opens" in ln), log)
        pytest.skip("this build or kernel gives no direct_io cold opens: %s" % line)


def read_chunks(f, n=MiB):
    out = []
    while True:
        b = f.read(n)
        if not b:
            return b"".join(out)
        out.append(b)


def test_cold_open_bypasses_page_cache(tmp, pages_stay):
    data = rand_bytes(SIZE, 2101)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        need_cold_direct(m)
        with open(m.p("w.bin"), "rb", buffering=0) as f:
            assert read_chunks(f) == data
        st = m.stats()
        assert st["cold_direct_opens"] == 1, st
        assert resident(m.p("w.bin")) == 0, "a cold open's reads left pages in the page cache"
        # Complete now: the next open reads through the page cache, and that shows.
        with open(m.p("w.bin"), "rb", buffering=0) as f:
            assert read_chunks(f) == data
        assert m.stats()["cold_direct_opens"] == 1, m.stats()
        assert resident(m.p("w.bin")) > SIZE // 2, "a page-cache read left no pages"


def test_cold_direct_io_off(tmp, pages_stay):
    data = rand_bytes(SIZE, 2102)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cold_direct_io=off"]) as m:
        assert "cold opens page cache (cold_direct_io=off)" in m.log(), m.log()
        with open(m.p("w.bin"), "rb", buffering=0) as f:
            assert read_chunks(f) == data
        assert m.stats()["cold_direct_opens"] == 0, m.stats()
        assert resident(m.p("w.bin")) > SIZE // 2, "a page-cache read left no pages"


@pytest.mark.parametrize("flags", [mmap.MAP_SHARED, mmap.MAP_PRIVATE], ids=["shared", "private"])
def test_mmap_of_a_cold_open(tmp, flags):
    data = rand_bytes(SIZE, 2103)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        need_cold_direct(m)
        with open(m.p("w.bin"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ) as mm:
                assert mm[SIZE - 5000:] == data[SIZE - 5000:]
                assert mm[:] == data
        assert m.stats()["cold_direct_opens"] == 1, m.stats()


def test_open_beside_a_mapped_cold_open(tmp):
    """With a disk tier (passthrough where the build and root allow it): the
    file is complete once the mapping read it, but a second open must not be
    passthrough while the mapping lasts; after both close, the next may."""
    data = rand_bytes(SIZE, 2104)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s" % (tmp / "cache")]) as m:
        need_cold_direct(m)
        with open(m.p("w.bin"), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:] == data
            with open(m.p("w.bin"), "rb") as g:
                assert g.read() == data
                with mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ) as mm2:
                    assert mm2[:] == data
            st = m.stats()
            assert st["cold_direct_opens"] == 1 and st["passthrough_opens"] == 0, st
        # the kernel sends the releases after the last close and unmap, on its
        # own time: the next open is "after both close" once they came
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()
        with open(m.p("w.bin"), "rb") as f:
            assert f.read() == data
        st = m.stats()
        assert st["cold_direct_opens"] == 1, st
        if st["passthrough"]:
            assert st["passthrough_opens"] == 1, st


@pytest.mark.parametrize("ttl", ["3600", "0"])
def test_replaced_while_a_cold_open_is_mapped(tmp, ttl):
    """The new version gets a new inode: one inode's page cache never holds
    pages of two versions, though the old open bypassed it (its mapping did not)."""
    a, b = rand_bytes(SIZE, 2105), rand_bytes(SIZE + 3 * MiB + 7, 2106)
    src = tmp / "src"
    (src / "w.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=OPTS + ["attr_ttl=" + ttl]) as m:
        need_cold_direct(m)
        with open(m.p("w.bin"), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:MiB] == a[:MiB]
            old_ino = os.fstat(f.fileno()).st_ino
            (src / ".new").write_bytes(b)
            os.replace(str(src / ".new"), str(src / "w.bin"))
            with open(m.p("w.bin"), "rb") as g:
                assert os.fstat(g.fileno()).st_ino != old_ino
                assert os.fstat(g.fileno()).st_size == len(b)
                assert g.read() == b
                with mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ) as mm2:
                    assert mm2[:] == b
            # the old mapping: the old bytes it read, never the new ones
            assert mm[:MiB] == a[:MiB]
            assert os.fstat(f.fileno()).st_size == len(a)
            assert m.stats()["inode_renumbers"] == 1, m.stats()
        with open(m.p("w.bin"), "rb") as g:
            assert g.read() == b
