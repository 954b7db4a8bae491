"""mmap reads through the mount equal the source.

Maps a whole file and a window at a page-aligned offset, reads random
slices, and compares after the page cache was dropped (page faults then go
through the daemon). The RAM tier is smaller than the file.
"""
import mmap
import random

from conftest import mcfs_mount
from gen import MiB, drop_caches, write_random

SIZE = 10 * MiB + 3333


def test_mmap_reads(tmp):
    data = write_random(str(tmp / "src" / "w.bin"), SIZE, seed=9)
    rng = random.Random(9)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=4M"]) as m:
        with open(m.p("w.bin"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert len(mm) == SIZE
                for _ in range(200):
                    off = rng.randrange(0, SIZE)
                    n = rng.choice([1, 100, 4096, 70000, MiB + 17])
                    assert mm[off:off + n] == data[off:off + n], (off, n)
                assert mm[SIZE - 1:] == data[-1:]
                assert mm[:] == data

            drop_caches()
            off = 3 * MiB + 8192  # page aligned, not block aligned
            with mmap.mmap(f.fileno(), 2 * MiB, access=mmap.ACCESS_READ, offset=off) as mm:
                assert mm[:] == data[off:off + 2 * MiB]
            # a window that reaches EOF
            off = (SIZE // mmap.PAGESIZE - 3) * mmap.PAGESIZE
            with mmap.mmap(f.fileno(), SIZE - off, access=mmap.ACCESS_READ, offset=off) as mm:
                assert mm[:] == data[off:]


def test_mmap_write_refused(tmp):
    write_random(str(tmp / "src" / "w.bin"), 8192, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt")) as m:
        with open(m.p("w.bin"), "rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
            except (PermissionError, OSError):
                return  # refused: a read-only descriptor can't be mapped shared-writable
            mm.close()
            raise AssertionError("shared writable mapping of a read-only file was allowed")


def test_mmap_concurrent_tiny_tier(tmp):
    """8 threads fault in pages of one mapping while a 4-slot tier churns."""
    from test_concurrent_readers import run_readers
    data = write_random(str(tmp / "src" / "w.bin"), 12 * MiB + 77, seed=11)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=4M"]) as m:
        drop_caches()
        with open(m.p("w.bin"), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            def reader(i):
                rng = random.Random(i)
                for _ in range(60):
                    off = rng.randrange(0, len(data))
                    n = rng.choice([1, 4096, 300000])
                    assert mm[off:off + n] == data[off:off + n], (off, n)

            run_readers(8, reader, timeout=60)
