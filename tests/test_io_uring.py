"""FUSE over io_uring (issue 14): on and off, the same bytes.

The kernel offers io_uring only while root has set
/sys/module/fuse/parameters/enable_uring; the tests set it (and put the old
value back) and mount with io_uring=auto, on and off. Whether requests really
arrive over a ring is what the daemon saw (stats fuse_io_uring: the stats
request itself came over one), not what was asked for. The build under test
decides what to expect (`mcfs --version`): with libfuse 3.18 auto and on use
the rings; with 3.14 auto serves through /dev/fuse and on refuses to mount.
"""
import hashlib
import mmap
import random

import pytest

from conftest import fuse_mounted, mcfs_mount, need_root, run_mcfs
from fuse_knobs import ENABLE_URING, MAX_PAGES_LIMIT, features, knob, read_knob, tsan_build
from gen import MiB, drop_caches, pread_direct, write_random
from test_concurrent_readers import check_reader, run_readers

SIZE = 24 * MiB + 777


def kernel_io_uring_usable():
    """io_uring itself can be switched off system-wide (kernel.io_uring_disabled)."""
    v = read_knob("/proc/sys/kernel/io_uring_disabled")
    if v not in (None, "0"):
        pytest.skip("kernel.io_uring_disabled is %s: no io_uring for anyone" % v)


def skip_under_tsan():
    """Requests that meet in the daemon (an open and the reads of its handle) are ordered by
    the kernel. Over /dev/fuse libfuse's session lock also orders them where TSan can see it;
    over io_uring each ring has its own lock, and TSan reports the handle's fields as races."""
    if tsan_build():
        pytest.skip("ThreadSanitizer cannot see the kernel's ordering of requests that come "
                    "over different io_uring rings")


def check_bytes(m, files):
    """Concurrent random and sequential readers (half O_DIRECT), mmap after a cache drop,
    and a whole buffered pass: all equal to the source."""
    run_readers(8, lambda i: check_reader(m.p("f%d" % (i % 2)), files[i % 2],
                                          seed=140 + i, reads=12), timeout=120)
    drop_caches()
    rng = random.Random(14)
    with open(m.p("f0"), "rb") as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for _ in range(50):
                off = rng.randrange(0, len(files[0]))
                n = rng.choice([1, 4096, 300000, 3 * MiB])
                assert mm[off:off + n] == files[0][off:off + n], (off, n)
    drop_caches()
    with open(m.p("f1"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(files[1]).digest()


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
def test_io_uring_modes(tmp, mode):
    need_root()
    kernel_io_uring_usable()
    uring = features()["io_uring"]
    if uring and mode != "off":
        skip_under_tsan()
    files = [write_random(str(tmp / "src" / ("f%d" % i)), size, seed=40 + i)
             for i, size in enumerate([SIZE, 9 * MiB - 5])]
    with knob(ENABLE_URING, "Y"):
        if mode == "on" and not uring:
            r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-o",
                         "io_uring=on,cache_dir=")
            assert r.returncode != 0 and not fuse_mounted(str(tmp / "mnt")), r.stderr
            assert "io_uring=on" in r.stderr and "without FUSE over io_uring" in r.stderr, \
                r.stderr
            return
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                        opts=["io_uring=" + mode, "ram_cache=128M", "block_size=2M"]) as m:
            want = uring and mode != "off"
            assert m.stats()["fuse_io_uring"] == int(want), m.log()
            assert ("io_uring on" in m.log()) == want, m.log()
            check_bytes(m, files)
            # still the same transport after the reads
            assert m.stats()["fuse_io_uring"] == int(want)


def test_io_uring_on_needs_the_kernel(tmp):
    """io_uring=on with the kernel's switch off: the mount fails and says which knob."""
    need_root()
    uring = features()["io_uring"]
    (tmp / "src" / "a").write_bytes(b"x")
    with knob(ENABLE_URING, "N"):
        r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-o",
                     "io_uring=on,cache_dir=")
        assert r.returncode != 0, r.stdout + r.stderr
        assert not fuse_mounted(str(tmp / "mnt"))
        if uring:
            assert ENABLE_URING in r.stderr, r.stderr
        else:
            assert "without FUSE over io_uring" in r.stderr, r.stderr
        # auto does not need it: the same mount goes through /dev/fuse
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["io_uring=auto"]) as m:
            assert m.stats()["fuse_io_uring"] == 0
            with open(m.p("a"), "rb") as f:
                assert f.read() == b"x"


def test_io_uring_with_large_requests(tmp):
    """Both at once: the rings' buffers are sized from the request size (libfuse), so 8 MiB
    READs come over the rings whole."""
    need_root()
    kernel_io_uring_usable()
    feats = features()
    if not (feats["io_uring"] and feats["requests over 1 MiB"]):
        pytest.skip("this mcfs is built against libfuse %s: no io_uring or no requests "
                    "over 1 MiB" % feats["libfuse"])
    skip_under_tsan()
    data = write_random(str(tmp / "src" / "big.bin"), SIZE, seed=44)
    with knob(ENABLE_URING, "Y"), knob(MAX_PAGES_LIMIT, "2048"):
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=128M"]) as m:
            st0 = m.stats()
            assert st0["fuse_io_uring"] == 1 and st0["fuse_max_request"] == 8 * MiB, m.log()
            for off in range(0, SIZE, 8 * MiB):
                assert pread_direct(m.p("big.bin"), off, 8 * MiB) == data[off:off + 8 * MiB]
            st = m.stats()
            n = st["fuse_reads"] - st0["fuse_reads"]
            nbytes = st["fuse_read_bytes"] - st0["fuse_read_bytes"]
            assert nbytes == SIZE and nbytes / n > MiB, (n, nbytes)
