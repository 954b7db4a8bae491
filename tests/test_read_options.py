"""Bytes stay right under each option that changes the read path.

splice (replies spliced into /dev/fuse), keep_cache=false, odirect (the
posix store reads with O_DIRECT, the default: aligned buffers, a partial last
block; and without it, through the source's page cache),
max_threads=1 and connections=1 (everything serialised: no deadlock between
a reader and the fetch it waits for), small kernel readahead, and a 64 MiB
block size. Each runs 8 concurrent readers over two files with odd sizes.
"""
import pytest

from conftest import mcfs_mount
from gen import MiB, write_random
from test_concurrent_readers import check_reader, run_readers

CASES = {
    "splice": ["splice=true", "block_size=1M"],
    "no_keep_cache": ["keep_cache=false", "block_size=1M"],
    "odirect_store": ["odirect=true", "block_size=1M"],
    "buffered_store": ["odirect=false", "block_size=1M"],
    "one_thread": ["max_threads=1", "connections=1", "block_size=1M", "ram_cache=4M"],
    "small_kernel_ra": ["read_ahead_kb=16", "block_size=2M"],
    "block_64m": ["block_size=64M", "ram_cache=256M"],
    "no_readahead": ["readahead_max=0", "block_size=1M", "ram_cache=4M"],
    "splice_tiny_tier": ["splice=true", "block_size=1M", "ram_cache=4M"],
    "one_thread_64m": ["max_threads=1", "block_size=64M", "ram_cache=256M"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reads_under_option(tmp, case):
    files = [write_random(str(tmp / "src" / ("f%d" % i)), size, seed=i)
             for i, size in enumerate([5 * MiB + 4097, 3 * MiB - 1])]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=CASES[case]) as m:
        run_readers(8, lambda i: check_reader(m.p("f%d" % (i % 2)), files[i % 2],
                                              seed=300 + i, reads=15), timeout=60)
        assert m.stats()["fetches"] > 0
        if case == "odirect_store" and odirect_works(str(tmp / "src" / "f0")):
            assert "refuses O_DIRECT" not in m.log(), m.log()


def odirect_works(path):
    """Does the file system under the test accept O_DIRECT?"""
    import os
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
