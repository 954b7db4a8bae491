"""Bytes read through the mount equal the source at random offsets and sizes.

A 23 MiB + 777 B file with 1 MiB blocks: 400 random reads of 1 B to 3 MiB,
buffered and with O_DIRECT (which sends each request to the daemon as is,
unaligned), some of them running past EOF; then a whole-file sequential read.
The seed is printed so that a failure can be replayed.
"""
import os
import random

from conftest import mcfs_mount
from gen import MiB, drop_caches, pread_direct_fd, write_random

SIZE = 23 * MiB + 777
SEED = int(os.environ.get("MCFS_TEST_SEED", "20240611"))


def ranges(rng, n):
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:
            length = rng.randint(1, 4096)
        elif kind < 0.8:
            length = rng.randint(4097, MiB + 4096)
        else:
            length = rng.randint(MiB, 3 * MiB)
        off = rng.randint(0, SIZE + 100)  # a few start at or past EOF
        out.append((off, length))
    return out


def test_random_offsets_and_sizes(tmp):
    print("seed", SEED)
    data = write_random(str(tmp / "src" / "model.bin"), SIZE, seed=SEED)
    rng = random.Random(SEED)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        path = m.p("model.bin")
        assert os.stat(path).st_size == SIZE

        fd = os.open(path, os.O_RDONLY)
        try:
            for off, length in ranges(rng, 200):
                got = os.pread(fd, length, off)
                assert got == data[off:off + length], \
                    "buffered read off=%d len=%d (seed %d)" % (off, length, SEED)
        finally:
            os.close(fd)

        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for off, length in ranges(rng, 200):
                got = pread_direct_fd(fd, off, length)
                assert got == data[off:off + length], \
                    "O_DIRECT read off=%d len=%d (seed %d)" % (off, length, SEED)
        finally:
            os.close(fd)

        drop_caches()
        with open(path, "rb") as f:
            whole = f.read()
        assert len(whole) == SIZE
        assert whole == data
