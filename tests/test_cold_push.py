"""Cold files pushed into the page cache ahead of their reader (cold_push=true, issue 23).

An open of a file the cache does not hold whole is a page-cache open; once
its reader reads on past its first block from the start, the daemon fetches
the rest of the file and copies each block into the inode's page cache
(FUSE_NOTIFY_STORE), so an mmap reader's faults find their pages there.

What the tests prove, with bytes compared with the source:
- a cold mmap read (safetensors' way) equals the store's bytes on the posix,
  http and s3 stores, and most of it came by push, not by READs (so the
  check can fail: with cold_push=false every byte is READ);
- with a RAM tier much smaller than the file (eviction while pushing);
- a reader of the first block only pushes nothing and fetches at most two
  blocks (a header read is not a whole-file fetch);
- the pushed pages are the inode's page cache: a later read finds them
  resident (mincore), as after a local read;
- a file replaced in the store while a pushed open is mapped (its push
  ended): the next open gets the new version on a new inode, the old mapping
  keeps the old bytes;
- the same with the push held at a proxy, so that the store changes under
  it: the blocks the push had not fetched are errors (EIO to read(), SIGBUS
  in the mapping), never the new version's bytes;
- an open closed while its push runs, then unmount: clean, nothing left;
- a file pushed whole and complete on disk: its next open keeps the pushed
  pages (no READ) instead of turning passthrough, whose reads would go to a
  backing file written around the page cache; once the kernel forgets the
  inode (and its pages), the next open is passthrough again.
"""
import errno
import mmap
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import mcfs_mount, need_root, wait_for
from disk_helpers import settle
from faultproxy import FaultProxy
from gen import MiB, drop_caches, rand_bytes
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift, have_nginx, have_swift
from test_cold_direct import resident
from test_passthrough import need_passthrough

# What these tests check of the page cache must not be undone by the machine's
# proactive reclaim (conftest.pages_stay says what it is and why).
pytestmark = pytest.mark.usefixtures("pages_stay")

SIZE = 24 * MiB + 4321
OPTS = ["block_size=1M", "cold_push=true"]


def mmap_read(path):
    """safetensors' read: an mmap, consumed in order in 4 MiB slices."""
    out = bytearray()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for off in range(0, len(mm), 4 * MiB):
            out += mm[off:off + 4 * MiB]
    return bytes(out)


def check_pushed(m):
    st = m.stats()
    assert st["push_files"] == 1 and st["push_blocks"] > 0, st
    assert st["push_errors"] == 0, st
    return st


def wait_pushed(m, timeout=30):
    """Waits until a push started and none has blocks left; returns the stats.
    The push starts at the READ that finds the reader past its first block,
    which the daemon may still be answering when the reader's read() returns
    (the kernel's readahead READs run on), so push_active == 0 alone can be
    seen before the push exists."""
    deadline = time.time() + timeout
    while True:
        st = m.stats()
        if st["push_files"] >= 1 and st["push_active"] == 0:
            return st
        assert time.time() < deadline, "the push did not end: %s" % st
        time.sleep(0.02)


def started_then_mapped(m, name, data):
    """Reads the first 3 blocks (the push starts), waits for the push to end
    with the open still open, then reads the file through an mmap: every page
    is in the page cache by then (pushed, or READ by the first reads), so the
    mapping's faults send no READ. Without cold_push they would."""
    with open(m.p(name), "rb", buffering=0) as f:
        assert f.read(3 * MiB) == data[:3 * MiB]
        st0 = wait_pushed(m)
        assert st0["push_files"] == 1, st0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:] == data
        st = m.stats()
        assert st["fuse_reads"] == st0["fuse_reads"], (st0, st)
        assert st["push_bytes"] >= len(data) - 16 * MiB, st  # the kernel's readahead READ the rest


@pytest.mark.parametrize("push", ["true", "false"])
def test_cold_mmap_read_posix(tmp, push):
    data = rand_bytes(SIZE, 2301)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M", "cold_push=" + push]) as m:
        assert mmap_read(m.p("w.bin")) == data
        if push == "false":
            st = m.stats()
            assert st["push_files"] == 0 and st["push_bytes"] == 0, st
            assert st["fuse_read_bytes"] >= SIZE, st
            return
        check_pushed(m)
        assert "cold opens page cache, pushed ahead of their reader" in m.log(), m.log()
        # the pages are the inode's page cache, as after a local read
        assert resident(m.p("w.bin")) > SIZE * 9 // 10


@pytest.mark.parametrize("push", ["true", "false"])
def test_pushed_pages_serve_the_mapping(tmp, push):
    data = rand_bytes(SIZE, 2309)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M", "cold_push=" + push]) as m:
        if push == "true":
            started_then_mapped(m, "w.bin", data)
            return
        # the check can fail: without the push, the mapping READs what it reads
        with open(m.p("w.bin"), "rb", buffering=0) as f:
            assert f.read(3 * MiB) == data[:3 * MiB]
            st0 = m.stats()
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert mm[:] == data
            st = m.stats()
            assert st["fuse_reads"] > st0["fuse_reads"] and st["push_files"] == 0, (st0, st)


def test_cold_mmap_read_with_eviction(tmp):
    """A RAM tier of 8 blocks for a 24-block file: pushed blocks are evicted
    behind the push, and every byte is still right."""
    data = rand_bytes(SIZE, 2302)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["ram_cache=8M", "readahead_max=4M"]) as m:
        assert mmap_read(m.p("w.bin")) == data
        st = check_pushed(m)
        assert st["evictions"] > 0, st


def test_header_reader_pushes_nothing(tmp):
    data = rand_bytes(SIZE, 2303)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        with open(m.p("w.bin"), "rb", buffering=0) as f:
            assert f.read(8) == data[:8]
            assert f.read(64 * 1024) == data[8:8 + 64 * 1024]
        st = m.stats()
        assert st["push_files"] == 0 and st["push_blocks"] == 0, st
        assert st["fetched_bytes"] <= 2 * MiB, st


def test_replaced_while_a_pushed_open_is_mapped(tmp):
    a, b = rand_bytes(SIZE, 2304), rand_bytes(SIZE + 3 * MiB + 7, 2305)
    src = tmp / "src"
    (src / "w.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=OPTS + ["attr_ttl=0"]) as m:
        with open(m.p("w.bin"), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:4 * MiB] == a[:4 * MiB]  # past the first block: pushed
            # The push ends before the store's file changes: the old version's
            # pages are then all in the inode's page cache. A block the push had
            # not fetched yet would be asked of a store that no longer holds its
            # version: an error (SIGBUS in the mapping), never the new bytes. The
            # TSan build replaced the file here with 1 to 14 of its 25 blocks
            # pushed, and CI's TSan pass once got SIGBUS at `mm[:]` below.
            assert wait_pushed(m)["push_errors"] == 0
            old_ino = os.fstat(f.fileno()).st_ino
            (src / ".new").write_bytes(b)
            os.replace(str(src / ".new"), str(src / "w.bin"))
            assert mmap_read(m.p("w.bin")) == b
            with open(m.p("w.bin"), "rb") as g:
                assert os.fstat(g.fileno()).st_ino != old_ino
            # the old mapping: the old version whole, never the new one's bytes
            assert mm[:] == a
        assert mmap_read(m.p("w.bin")) == b
        st = m.stats()
        assert st["push_files"] >= 1 and st["inode_renumbers"] == 1, st


# The old open's reader, in a process of its own: a fault on the mapping holds
# the interpreter's lock until the page comes, and the page comes through the
# proxy's threads in the test's process. It maps the file, reads its first 4
# MiB (the push starts), says "mapped", waits for a line, then reads every
# block with read() (the old bytes, or EIO: it counts those) and says how
# many failed, then every block through the mapping (the old bytes, up to a
# page that cannot be read: SIGBUS). Exits 0 when it read all the old bytes,
# 1 at the first wrong byte.
OLD_READER = """
import errno, mmap, os, sys
MiB = 1 << 20
want = open(sys.argv[2], "rb").read()
f = open(sys.argv[1], "rb", buffering=0)
mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
assert mm[:4 * MiB] == want[:4 * MiB]
print("mapped", flush=True)
sys.stdin.readline()
eio = 0
for off in range(0, len(want), MiB):
    try:
        got = os.pread(f.fileno(), MiB, off)
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        eio += 1
        continue
    if got != want[off:off + MiB]:
        print("read: wrong bytes at", off, flush=True)
        sys.exit(1)
print("eio", eio, flush=True)
for off in range(0, len(want), MiB):
    if mm[off:off + MiB] != want[off:off + MiB]:
        print("mapping: wrong bytes at", off, flush=True)
        sys.exit(1)
sys.exit(0)
"""


def test_replaced_while_its_push_is_held(tmp):
    """The store's file is replaced while a pushed open's push is held at a
    proxy (its GETs of ranges from 20 MiB on wait until the replace: 5 of its
    25 blocks, fewer than its connections): the push then fetches those blocks
    from a store that holds the new version, which the daemon refuses
    (If-Match), so they never reach the page cache. The old open reads the
    blocks pushed before as the old bytes and the others as errors: EIO to
    read(), SIGBUS in the mapping. Never the new bytes. The next open gets the
    new version."""
    need_root()
    if not have_nginx():
        pytest.skip("nginx is not installed (deploy/install-deps.sh test installs it)")
    a, b = rand_bytes(SIZE, 2310), rand_bytes(SIZE, 2311)
    src = tmp / "src"
    (src / "w.bin").write_bytes(a)
    (tmp / "a.bin").write_bytes(a)
    release = threading.Event()
    held = []

    def hold(method, path, head):  # GETs of ranges from 20 MiB on wait for the replace
        r = re.search(rb"(?i)\r\nrange: *bytes=(\d+)-", head)
        if method == "GET" and r and int(r.group(1)) >= 20 * MiB and not release.is_set():
            held.append(int(r.group(1)))
            release.wait(30)
        return None

    ng = Nginx(str(src), workdir=str(tmp / "nginx")).start()
    reader = None
    try:
        with FaultProxy(ng.port) as px:
            px.answer = hold
            with mcfs_mount(px.url, str(tmp / "mnt"), opts=OPTS + ["attr_ttl=0"]) as m:
                reader = subprocess.Popen(
                    [sys.executable, "-c", OLD_READER, m.p("w.bin"), str(tmp / "a.bin")],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert reader.stdout.readline() == "mapped\n"
                assert wait_for(lambda: held, 10), "no GET from 20 MiB reached the proxy"
                (src / ".new").write_bytes(b)
                os.replace(str(src / ".new"), str(src / "w.bin"))
                release.set()
                st = wait_pushed(m)
                assert st["push_errors"] >= 1, st
                out, _ = reader.communicate("go\n", timeout=60)
                # read(): the old bytes or EIO; the last block was held, so one EIO at least
                eio = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("eio ")]
                assert eio and eio[0] >= 1, out
                # the mapping: the old bytes up to a page that cannot be read
                assert reader.returncode == -signal.SIGBUS, (reader.returncode, out)
                with open(m.p("w.bin"), "rb") as f:  # read(), not a mapping: this process
                    assert f.read() == b
    finally:
        release.set()
        if reader and reader.poll() is None:
            reader.kill()
            reader.wait()
        ng.stop()


def test_close_while_pushing_then_unmount(tmp):
    data = rand_bytes(SIZE, 2306)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        for _ in range(3):
            with open(m.p("w.bin"), "rb", buffering=0) as f:
                assert f.read(3 * MiB) == data[:3 * MiB]  # starts the push; closed at once
            fd = os.open(m.p("w.bin"), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        assert m.stats()["push_files"] >= 1, m.stats()
        assert mmap_read(m.p("w.bin")) == data
    assert m.proc.returncode == 0, m.log()


def test_cold_mmap_read_http(tmp):
    need_root()
    if not have_nginx():
        pytest.skip("nginx is not installed (deploy/install-deps.sh test installs it)")
    data = rand_bytes(SIZE, 2307)
    (tmp / "src" / "w.bin").write_bytes(data)
    ng = Nginx(str(tmp / "src"), workdir=str(tmp / "nginx")).start()
    try:
        with mcfs_mount(ng.url, str(tmp / "mnt"), opts=OPTS) as m:
            assert mmap_read(m.p("w.bin")) == data
            check_pushed(m)
        with mcfs_mount(ng.url, str(tmp / "mnt"), opts=OPTS) as m:
            started_then_mapped(m, "w.bin", data)
    finally:
        ng.stop()


def test_cold_mmap_read_s3(tmp):
    need_root()
    if not have_swift():
        pytest.skip("swift/memcached not installed (deploy/install-deps.sh test installs them)")
    data = rand_bytes(SIZE, 2308)
    sw = Swift(str(tmp / "swift")).start()
    try:
        s3 = sw.s3()
        s3.create_bucket(Bucket="models")
        s3.put_object(Bucket="models", Key="m/w.bin", Body=data)
        env = {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
               "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": ""}
        with mcfs_mount("s3://models/m", str(tmp / "mnt"), opts=OPTS + ["endpoint=" + sw.endpoint],
                        env=env) as m:
            assert mmap_read(m.p("w.bin")) == data
            check_pushed(m)
        with mcfs_mount("s3://models/m", str(tmp / "mnt"), opts=OPTS + ["endpoint=" + sw.endpoint],
                        env=env) as m:
            started_then_mapped(m, "w.bin", data)
    finally:
        sw.stop()


def test_pushed_file_keeps_its_pages_at_the_next_open(tmp):
    need_passthrough("without passthrough every open of the file keeps the page cache")
    data = rand_bytes(SIZE, 2310)
    (tmp / "src" / "w.bin").write_bytes(data)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s" % (tmp / "cache")]) as m:
        assert mmap_read(m.p("w.bin")) == data  # cold: pushed whole
        # its open released (the push's last handle), its blocks on disk: complete
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()
        st0 = settle(m)
        assert st0["push_files"] == 1 and st0["push_errors"] == 0, st0
        assert st0["push_kept_opens"] == 0 and st0["passthrough_opens"] == 0, st0
        # complete, yet this open keeps the pushed pages: every byte from the page cache
        assert mmap_read(m.p("w.bin")) == data
        st = m.stats()
        assert st["push_kept_opens"] == 1 and st["passthrough_opens"] == 0, st
        assert st["fuse_reads"] == st0["fuse_reads"], (st0, st)
        # the kernel forgets the inode, and its pages: passthrough again (the
        # forget comes asynchronously, so an open before it keeps the pages)
        assert wait_for(lambda: m.stats()["open_files"] == 0), m.stats()

        def reopened_passthrough():
            drop_caches()
            with open(m.p("w.bin"), "rb") as f:
                assert f.read() == data
            return m.stats()["passthrough_opens"] == 1

        assert wait_for(reopened_passthrough, timeout=20), m.stats()
