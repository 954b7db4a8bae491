"""FUSE requests over 1 MiB (issue 14).

With libfuse >= 3.17.2 mcfs asks the kernel for requests the size of a block
(max_request, 0 = block_size) and the kernel grants up to
/proc/sys/fs/fuse/max_pages_limit pages; with libfuse 3.14 requests stay at
1 MiB whatever the limit. The tests set the limit (and put it back), mount,
and check three things against the build under test (`mcfs --version`): the
size the daemon reports as granted (stats fuse_max_request), the size of the
READ requests that really arrive (fuse_read_bytes / fuse_reads over a read),
and the bytes, compared with the source.
"""
import hashlib

from conftest import mcfs_mount, need_root, run_mcfs
from fuse_knobs import MAX_PAGES_LIMIT, features, knob
from gen import MiB, drop_caches, pread_direct, write_random

SIZE = 40 * MiB + 12345


def read_counts(m, fn):
    """Runs fn(); returns (READ requests, bytes) the daemon answered meanwhile."""
    st0 = m.stats()
    fn()
    st = m.stats()
    return st["fuse_reads"] - st0["fuse_reads"], st["fuse_read_bytes"] - st0["fuse_read_bytes"]


def direct_pass(path, data, chunk):
    """Reads the file with O_DIRECT in `chunk`s (chunk-aligned) and compares."""
    for off in range(0, len(data), chunk):
        got = pread_direct(path, off, chunk)
        assert got == data[off:off + chunk], "O_DIRECT read at %d differs" % off


def buffered_pass(path, data):
    drop_caches()
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(8 * MiB)
            if not b:
                break
            h.update(b)
    assert h.digest() == hashlib.sha256(data).digest(), "buffered pass differs"


def test_block_sized_requests(tmp):
    """Limit raised to 2048 pages: 8 MiB READs where the build can, 1 MiB where not."""
    need_root()
    big = features()["requests over 1 MiB"]
    data = write_random(str(tmp / "src" / "big.bin"), SIZE, seed=14)
    with knob(MAX_PAGES_LIMIT, "2048"):
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=256M"]) as m:
            want = 8 * MiB if big else MiB
            assert m.stats()["fuse_max_request"] == want, m.log()
            assert "requests up to %d.0 MiB" % (want // MiB) in m.log(), m.log()
            r = run_mcfs("status", m.path)
            assert "FUSE:       requests up to %d.0 MiB, io_uring " % (want // MiB) in r.stdout, \
                r.stdout
            n, nbytes = read_counts(m, lambda: direct_pass(m.p("big.bin"), data, 8 * MiB))
            assert nbytes == len(data)
            if big:
                # 6 reads of 8 MiB: one request each; never 1 MiB pieces
                assert nbytes / n > MiB, (n, nbytes)
            else:
                assert n >= len(data) // MiB, (n, nbytes)
            n, nbytes = read_counts(m, lambda: buffered_pass(m.p("big.bin"), data))
            assert nbytes >= len(data)
            # read_ahead_kb = 8192 (the default) lets buffered reads fill 8 MiB requests
            if big:
                assert nbytes / n > MiB, (n, nbytes)
            else:
                assert nbytes / n <= MiB, (n, nbytes)


def test_limit_bounds_requests(tmp):
    """The kernel's default limit (256 pages) keeps requests at 1 MiB; the log says what root
    can do about it."""
    need_root()
    big = features()["requests over 1 MiB"]
    data = write_random(str(tmp / "src" / "big.bin"), SIZE, seed=15)
    with knob(MAX_PAGES_LIMIT, "256"):
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=256M"]) as m:
            assert m.stats()["fuse_max_request"] == MiB
            if big:
                assert "sysctl fs.fuse.max_pages_limit=2048" in m.log(), m.log()
            n, nbytes = read_counts(m, lambda: direct_pass(m.p("big.bin"), data, 8 * MiB))
            assert nbytes == len(data) and n >= len(data) // MiB, (n, nbytes)


def test_max_request_option(tmp):
    """max_request=2M caps requests at 2 MiB below a higher limit; a 16 MiB block asks for
    16 MiB and gets what the limit allows."""
    need_root()
    big = features()["requests over 1 MiB"]
    data = write_random(str(tmp / "src" / "big.bin"), SIZE, seed=16)
    with knob(MAX_PAGES_LIMIT, "2048"):
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                        opts=["ram_cache=256M", "max_request=2M"]) as m:
            assert m.stats()["fuse_max_request"] == (2 * MiB if big else MiB)
            n, nbytes = read_counts(m, lambda: direct_pass(m.p("big.bin"), data, 8 * MiB))
            assert nbytes == len(data)
            assert n >= len(data) // (2 * MiB), (n, nbytes)   # none over 2 MiB
            if big:
                assert nbytes / n > MiB, (n, nbytes)
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                        opts=["ram_cache=256M", "block_size=16M"]) as m:
            assert m.stats()["fuse_max_request"] == (8 * MiB if big else MiB)
            assert "asked 16.0 MiB" in m.log(), m.log()
            direct_pass(m.p("big.bin"), data, 16 * MiB)
