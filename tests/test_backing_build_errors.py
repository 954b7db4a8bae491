"""A backing file is verified before the kernel reads it (issue 23).

A complete file's backing file is its own version file in the disk tier. The
first time a version is handed to the kernel in a mount, every block is read
and checked against its XXH3 in the index. A byte flipped on disk (here while
the daemon was down) makes that check fail: the version gets no passthrough,
the bad block is dropped and counted in backing_build_errors (logged once),
reads go through the cache with the right bytes, and once the block was
fetched and written again, a later open verifies the whole file and gets
passthrough.
"""
import os

from conftest import mcfs_mount
from disk_helpers import settle, version_files
from gen import MiB, write_random
from test_passthrough import need_passthrough, read_through

SIZE = 3 * MiB + 4321


def test_flipped_byte_refuses_passthrough_until_fixed(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "a.bin"), SIZE, seed=90)
    cache = str(tmp / "cache")
    opts = ["cache_dir=" + cache, "block_size=1M", "ram_cache=64M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert read_through(m, m.p("a.bin"), data) > 0  # cold: through the cache
        settle(m)
    [vf] = version_files(cache)
    with open(vf, "r+b") as f:  # block 1, as rot or a stray write would
        f.seek(MiB + 777)
        b = f.read(1)
        f.seek(MiB + 777)
        f.write(bytes([b[0] ^ 0x5a]))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        # refused at registration: read through the cache, the block fetched again
        assert read_through(m, m.p("a.bin"), data) > 0
        st = settle(m)
        assert st["passthrough_opens"] == 0, st
        assert st["backing_build_errors"] == 1 and st["backing_builds"] == 0, st
        assert st["store_reads"] == 1, st  # block 1 only
        lines = [ln for ln in m.log().splitlines() if "failed its checksum at registration"
                 in ln]
        assert len(lines) == 1 and "a.bin" in lines[0], m.log()
        # whole and good again: verified, then handed to the kernel
        assert read_through(m, m.p("a.bin"), data) == 0
        st = m.stats()
        assert st["passthrough_opens"] == 1 and st["backing_builds"] == 1, st
        assert st["backing_build_errors"] == 1, st
