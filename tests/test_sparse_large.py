"""A multi-GiB sparse file reads like the source, past 2^31 and 2^32 offsets.

The file is 4 GiB + 3 MiB + 17 B (the last 8 MiB block is partial) and costs
no disk: random islands sit at the start, across 1 GiB, across 2 GiB and
4 GiB (where 32-bit offsets and lengths would wrap), and at EOF; the rest is
holes that must read as zeros. Default block size (8 MiB).
"""
import os

import pytest

from conftest import mcfs_mount
from gen import GiB, MiB, pread_direct_fd, write_sparse

SIZE = 4 * GiB + 3 * MiB + 17
ISLANDS = [
    (0, 1, 64 * 1024),
    (GiB - 5000, 2, 10000),
    (2 * GiB - 3 * MiB, 3, 6 * MiB + 11),      # across 2^31
    (4 * GiB - 8 * MiB - 1, 4, 8 * MiB + 2),   # across a block and 2^32
    (SIZE - 12345, 5, 12345),                   # to EOF
]


def expected(written, off, n):
    """The source's bytes at [off, off+n) from the islands; zeros elsewhere."""
    n = max(0, min(n, SIZE - off))
    out = bytearray(n)
    for ioff, b in written.items():
        lo, hi = max(off, ioff), min(off + n, ioff + len(b))
        if lo < hi:
            out[lo - off:hi - off] = b[lo - ioff:hi - ioff]
    return bytes(out)


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "odirect"])
def test_sparse_multi_gib(tmp, direct):
    src = tmp / "src"
    path = str(src / "sparse.bin")
    written = write_sparse(path, SIZE, ISLANDS)
    assert os.stat(path).st_blocks * 512 < 64 * MiB, "source is not sparse here"
    with mcfs_mount(str(src), str(tmp / "mnt")) as m:
        mp = m.p("sparse.bin")
        assert os.stat(mp).st_size == SIZE
        fd = os.open(mp, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        rd = (lambda o, n: pread_direct_fd(fd, o, n)) if direct else \
            (lambda o, n: os.pread(fd, n, o))
        try:
            checks = [(o - 100, len(b) + 200) for o, b in written.items()]
            checks += [
                (GiB // 2, MiB),                   # a hole
                (2**31 - 1, 2), (2**31, 4096), (2**32 - 1, 2), (2**32, 4096),
                (2**32 - 4096, 8192),
                (3 * GiB + 12345, 3 * MiB),        # a hole, unaligned
                (SIZE - 1, 1), (SIZE - 10, 100), (SIZE, 10), (SIZE + GiB, 10),
                (2 * GiB - 32 * MiB, 40 * MiB),    # a long read up to the island
            ]
            for off, n in checks:
                off = max(0, off)
                got = rd(off, n)
                want = expected(written, off, n)
                assert len(got) == len(want), "off=%d len=%d: %d bytes" % (off, n, len(got))
                assert got == want, "off=%d len=%d differs" % (off, n)
        finally:
            os.close(fd)
