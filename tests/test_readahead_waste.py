"""Random reads through a small RAM tier fetch about what they read (issue 16, item 6).

8 threads read 4 MiB at random offsets of a file 8 times the size of a
64 MiB RAM tier (8 blocks of 8 MiB). The kernel sends each read as four
contiguous 1 MiB requests, which look like the start of a stream: readahead
used to prefetch the next block and fetch the rest of the read's own block
whole, and the tier evicted all of it before anyone read it: 3.8 times the
bytes read were fetched. Readahead that its reader cannot consume before
eviction must not be fetched: at most 1.3 times the bytes asked. Every read
returns the source's bytes.

O_DIRECT sends every read to the daemon as is; buffered reads go through the
kernel's page cache (and its readahead), as a user's would, each dropped from
it after the read so that the daemon sees every read, as with a file much
larger than the node's memory.
"""
import os
import random

import pytest

from conftest import mcfs_mount
from gen import MiB, drop_caches, pread_direct_fd, rand_bytes
from test_concurrent_readers import run_readers

SIZE = 512 * MiB
READ = 4 * MiB
THREADS = 8
READS = 48  # per thread: 1.5 GiB asked in all
MAX_RATIO = 1.3


def write_source(path):
    with open(path, "wb") as f:
        for i in range(SIZE // (64 * MiB)):
            f.write(rand_bytes(64 * MiB, seed=600 + i))


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "buffered"])
def test_random_reads_fetch_what_they_read(tmp, direct):
    src = str(tmp / "src" / "big.bin")
    write_source(src)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        path = m.p("big.bin")
        asked = [0] * THREADS
        drop_caches()
        before = m.stats()

        def reader(i):
            rng = random.Random(1600 + i)
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
            sfd = os.open(src, os.O_RDONLY)
            try:
                for _ in range(READS):
                    off = rng.randrange(0, SIZE - READ) & ~4095
                    if direct:
                        got = pread_direct_fd(fd, off, READ)
                    else:
                        got = os.pread(fd, READ, off)
                        # no later read is served from the page cache: each
                        # one asks the daemon, as in a file much larger than RAM
                        os.posix_fadvise(fd, off, READ, os.POSIX_FADV_DONTNEED)
                    assert got == os.pread(sfd, READ, off), "reader %d: off=%d" % (i, off)
                    asked[i] += len(got)
            finally:
                os.close(fd)
                os.close(sfd)

        run_readers(THREADS, reader, timeout=120)
        after = m.stats()
    fetched = after["fetched_bytes"] - before["fetched_bytes"]
    store = after["store_bytes"] - before["store_bytes"]
    total = sum(asked)
    assert total == THREADS * READS * READ
    print("asked %d MiB, fetched %d MiB (%.2fx), store_bytes %d MiB, prefetches %d, "
          "prefetch_unused %d" % (total // MiB, fetched // MiB, fetched / total, store // MiB,
                                  after["prefetches"] - before["prefetches"],
                                  after["prefetch_unused"] - before["prefetch_unused"]))
    assert fetched <= MAX_RATIO * total, \
        "fetched %d MiB from the store for %d MiB read (%.2fx, at most %.1fx)" \
        % (fetched // MiB, total // MiB, fetched / total, MAX_RATIO)
