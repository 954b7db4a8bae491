"""16 concurrent readers of one file (and of several) get the source's bytes.

Each reader has its own descriptor and does random reads (half of them
O_DIRECT, so the daemon sees 16 concurrent requests) and one whole-file pass;
a barrier starts them together. A reader that hangs fails the test (60 s)
instead of hanging the suite.
"""
import hashlib
import os
import random
import threading

from conftest import mcfs_mount
from gen import MiB, pread_direct_fd, write_random

N = 16
SIZE = 40 * MiB + 4321


def run_readers(n, target, timeout=60):
    errors = []
    barrier = threading.Barrier(n)

    def wrap(i):
        try:
            barrier.wait(timeout=30)
            target(i)
        except BaseException as e:  # reported below, with the reader's number
            errors.append("reader %d: %r" % (i, e))

    threads = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not hung, "readers %s still running after %ds (deadlock?)" % (hung, timeout)
    assert not errors, "\n".join(errors)


def check_reader(path, data, seed, reads=40):
    rng = random.Random(seed)
    direct = seed % 2 == 1
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        for _ in range(reads):
            off = rng.randrange(0, len(data))
            n = rng.choice([1, 4096, 100000, MiB, 2 * MiB + 3])
            got = pread_direct_fd(fd, off, n) if direct else os.pread(fd, n, off)
            assert got == data[off:off + n], "off=%d len=%d direct=%s" % (off, n, direct)
        h = hashlib.sha256()
        off = 0
        while True:
            b = pread_direct_fd(fd, off, MiB) if direct else os.pread(fd, MiB, off)
            if not b:
                break
            h.update(b)
            off += len(b)
        assert off == len(data), "sequential pass read %d of %d bytes" % (off, len(data))
        assert h.digest() == hashlib.sha256(data).digest(), "sequential pass differs"
    finally:
        os.close(fd)


def test_16_readers_one_file(tmp):
    data = write_random(str(tmp / "src" / "shared.bin"), SIZE, seed=16)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        path = m.p("shared.bin")
        run_readers(N, lambda i: check_reader(path, data, seed=i))


def test_16_readers_four_files(tmp):
    files = {i: write_random(str(tmp / "src" / ("f%d.bin" % i)), 9 * MiB + i * 1000, seed=i)
             for i in range(4)}
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        run_readers(N, lambda i: check_reader(m.p("f%d.bin" % (i % 4)), files[i % 4],
                                              seed=100 + i, reads=20))


def test_killed_readers_leave_daemon_healthy(tmp):
    """Readers killed (SIGKILL) in the middle of reads: the daemon goes on, no
    slot stays pinned (the whole 4-slot tier is usable afterwards), and its
    fetches in flight drain."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import wait_for
    from gen import pread_direct

    data = write_random(str(tmp / "src" / "k.bin"), 16 * MiB, seed=21)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=4M"]) as m:
        code = ("import os,sys\n"
                "fd=os.open(sys.argv[1],os.O_RDONLY)\n"
                "while True:\n"
                "    off=0\n"
                "    while os.pread(fd,1<<20,off): off+=1<<20\n"
                "    os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)\n")
        for rnd in range(4):
            procs = [subprocess.Popen([sys.executable, "-c", code, m.p("k.bin")])
                     for _ in range(6)]
            time.sleep(0.3)
            for p in procs:
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait(10)
        assert wait_for(lambda: m.stats()["inflight"] == 0, timeout=10), m.stats()
        for off in range(0, 16 * MiB, 3 * MiB + 1):
            assert pread_direct(m.p("k.bin"), off, MiB) == data[off:off + MiB], off
        run_readers(4, lambda i: check_reader(m.p("k.bin"), data, seed=i, reads=10))
