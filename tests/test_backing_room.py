"""A large file after many small ones gets passthrough (issue 22, item 8; issue 23).

A complete file's backing file is its own version file in the disk tier, so
disk_cache bounds them with the blocks: the large file's write-behind evicts
the least recently used blocks (unpinned: the small files are closed), as many
as it takes, and the large file is then whole on disk and handed to the kernel.
Once, a separate share of backing files stopped evicting after 16 of them, so
the large file was refused with ENOSPC and read through the cache for good.
"""
import os

from conftest import mcfs_mount
from disk_helpers import settle
from gen import MiB, write_random
from test_passthrough import need_passthrough

SMALL = 20           # backing files of small files, more than the old 16 victims
SMALL_SIZE = 64 * 1024
LIMIT = 24 * MiB     # disk_cache: 24 blocks of 1 MiB, small files take one each
BIG_SIZE = LIMIT - 3 * MiB - 4321   # 21 blocks: fits beside 3 small ones, 17 must go


def open_twice(m, rel, want):
    """The first open completes the file in the tiers, the second verifies its version
    file and hands it to the kernel."""
    for _ in range(2):
        with open(m.p(rel), "rb") as f:
            assert f.read() == want, rel
        settle(m)


def test_room_for_a_large_file_after_many_small(tmp):
    need_passthrough()
    small = {}
    for i in range(SMALL):
        rel = "small-%02d.bin" % i
        small[rel] = write_random(str(tmp / "src" / rel), SMALL_SIZE, seed=220 + i)
    big = write_random(str(tmp / "src" / "big.bin"), BIG_SIZE, seed=219)
    opts = ["cache_dir=%s" % (tmp / "cache"), "disk_cache=%dM" % (LIMIT // MiB),
            "block_size=1M", "ram_cache=64M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert m.stats()["passthrough"] == 1, m.log()
        for rel, data in sorted(small.items()):
            open_twice(m, rel, data)
        st = m.stats()
        assert st["backing_builds"] == SMALL and st["backing_files"] == SMALL, st
        open_twice(m, "big.bin", big)
        st = m.stats()
        assert st["backing_builds"] == SMALL + 1, (st, m.log())
        assert st["backing_files"] == 4, st   # big.bin and the 3 newest small ones
        assert st["backing_bytes"] == BIG_SIZE + 3 * SMALL_SIZE, st
        assert "No space left" not in m.log(), m.log()
        # the survivors are the most recently used: the last three small files
        before = m.stats()["passthrough_opens"]
        for rel in sorted(small)[-3:] + ["big.bin"]:
            with open(m.p(rel), "rb") as f:
                assert f.read() == (big if rel == "big.bin" else small[rel]), rel
        assert m.stats()["passthrough_opens"] == before + 4, m.stats()
