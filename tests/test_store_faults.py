"""Store read errors, injected with the posix fault hook, reach the reader as EIO.

MCFS_POSIX_FAULT=fail:N makes the Nth store read of the process fail with
EIO, short:N makes it return short. The reader gets EIO, the log names the
path and the block, the failure is not cached (a retry reads the right
bytes), and other blocks and files are unaffected.
readahead_max=0: the Nth store read is then the Nth block the test reads.
"""
import errno
import os
import re
import threading

import pytest

from conftest import mcfs_mount, wait_for
from gen import MiB, pread_direct, pread_direct_fd, write_random

OPTS = ["block_size=1M", "readahead_max=0"]


@pytest.mark.parametrize("kind", ["fail", "short"])
def test_fault_gives_eio_then_recovers(tmp, kind):
    data = write_random(str(tmp / "src" / "model.bin"), 4 * MiB, seed=5)
    other = write_random(str(tmp / "src" / "other.bin"), MiB, seed=6)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS,
                    env={"MCFS_POSIX_FAULT": "%s:2" % kind}) as m:
        fd = os.open(m.p("model.bin"), os.O_RDONLY | os.O_DIRECT)
        try:
            assert pread_direct_fd(fd, 0, 4096) == data[:4096]          # read 1: fine
            s0 = m.stats()
            with pytest.raises(OSError) as ei:
                pread_direct_fd(fd, 2 * MiB + 100, 4096)                 # read 2: faulted
            assert ei.value.errno == errno.EIO, ei.value
            pat = re.compile(r"model\.bin.*block 2\b")
            assert wait_for(lambda: any(pat.search(l) for l in m.log().splitlines()), 5), \
                "no log line names model.bin and block 2:\n" + m.log()
            # not cached as an error: read again, from the store, correctly
            assert pread_direct_fd(fd, 2 * MiB + 100, 4096) == data[2 * MiB + 100:2 * MiB + 4196]
            s1 = m.stats()
            assert s1["store_reads"] > s0["store_reads"]
            assert pread_direct_fd(fd, 0, 4 * MiB) == data
        finally:
            os.close(fd)
        assert open(m.p("other.bin"), "rb").read() == other


def test_fault_under_concurrent_readers(tmp):
    """Readers joined to a failing fetch all get EIO; none hangs, and all recover."""
    data = write_random(str(tmp / "src" / "m.bin"), 64 * MiB, seed=7)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=64M", "readahead_max=0"],
                    env={"MCFS_POSIX_FAULT": "fail:1"}) as m:
        res = [None] * 8
        barrier = threading.Barrier(8)

        def reader(i):
            fd = os.open(m.p("m.bin"), os.O_RDONLY | os.O_DIRECT)
            try:
                barrier.wait(10)
                res[i] = pread_direct_fd(fd, i * 4096, 4096)
            except OSError as e:
                res[i] = e.errno
            finally:
                os.close(fd)

        ts = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not any(t.is_alive() for t in ts), "a reader hung on a failed fetch"
        for i, r in enumerate(res):
            assert r == errno.EIO or r == data[i * 4096:(i + 1) * 4096], (i, r)
        assert errno.EIO in res, "the faulted read reached no reader: %r" % res
        # the failure is not cached: a new read fetches the block again
        assert pread_direct(m.p("m.bin"), 12345, MiB) == data[12345:12345 + MiB]
