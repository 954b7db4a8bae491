"""Issue 22, item 3: versions without strong validators never mix.

An http store's version of a file is its ETag, else its Last-Modified, else
only its size. Two ways that let a replacement pass for the version cached:

- Last-Modified (and nginx's ETag, made of it and the size) counts whole
  seconds: a same-size rewrite within the second it names keeps both. mcfs
  trusts such a version only once the server's clock is 2 s past it (a HEAD
  of a file modified just now is asked again), so any later rewrite names a
  later second and fails the reads' If-Match / If-Unmodified-Since.
- A server that sends neither ETag nor Last-Modified gives nothing to check a
  read against: such files are refused (EIO, said once in the log) unless
  `unversioned=trust` says the store never changes a file in place.

Real servers on loopback: nginx from Debian, and a small ranged server (the
standard library's http.server) that sends no validator at all.
"""
import errno
import http.server
import os
import re
import threading
import time

import pytest

from conftest import mcfs_mount, need_root, wait_for
from gen import MiB, rand_bytes
from servers import Nginx, have_nginx

OPTS = ["block_size=1M", "ram_cache=32M", "readahead_max=0", "retries=1", "timeout=5"]
SIZE = 4 * MiB


class NoValidatorHandler(http.server.BaseHTTPRequestHandler):
    """Serves files of `root` with HEAD and single ranged GETs, and no ETag or
    Last-Modified: what some object gateways and dynamic servers do."""
    protocol_version = "HTTP/1.1"
    root = None

    def log_message(self, *args):
        pass

    def _file(self):
        path = os.path.join(self.root, self.path.lstrip("/").split("?")[0])
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None

    def do_HEAD(self):
        data = self._file()
        if data is not None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()

    def do_GET(self):
        data = self._file()
        if data is None:
            return
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if m:
            a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
            body = data[a:b + 1]
        else:
            self.send_response(200)
            body = data
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def write_manifest(root):
    """The store's listing, as `mcfs manifest` writes it (no validator in it)."""
    import subprocess
    from conftest import MCFS
    r = subprocess.run([MCFS, "manifest", str(root)], capture_output=True)
    assert r.returncode == 0, r.stderr
    (root / ".mcfs-manifest.json").write_bytes(r.stdout)


def test_files_without_validators_are_refused(tmp_path):
    need_root()
    root = tmp_path / "store"
    root.mkdir()
    data = rand_bytes(SIZE, 31)
    (root / "m.bin").write_bytes(data)
    write_manifest(root)
    handler = type("H", (NoValidatorHandler,), {"root": str(root)})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    try:
        with mcfs_mount(url, str(tmp_path / "mnt"), opts=OPTS) as m:
            assert os.listdir(m.path) == ["m.bin"]
            assert os.stat(m.p("m.bin")).st_size == SIZE
            with pytest.raises(OSError) as ei:
                with open(m.p("m.bin"), "rb") as f:
                    f.read()
            assert ei.value.errno == errno.EIO
            log = m.log()
            assert "sends neither ETag nor Last-Modified" in log, log
            assert "unversioned=trust" in log, log
            # said once, not per block or per read
            with pytest.raises(OSError):
                with open(m.p("m.bin"), "rb") as f:
                    f.read()
            assert m.log().count("sends neither ETag nor Last-Modified") == 1, m.log()
        with mcfs_mount(url, str(tmp_path / "mnt"), opts=OPTS + ["unversioned=trust"]) as m:
            with open(m.p("m.bin"), "rb") as f:
                assert f.read() == data
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.skipif(not have_nginx(), reason="nginx not installed "
                    "(deploy/install-deps.sh test installs nginx-light)")
def test_rewrite_in_the_same_second_never_mixes(tmp_path):
    """A same-size rewrite that keeps Last-Modified (and so nginx's ETag)
    while an open file is read: before, the open's first block was of the
    first version and the rest of the second. The file's mtime is set one
    second ahead, so that it is "modified within the last 2 s" for about 3 s
    whatever the test's speed; the rewrite comes right after the daemon's first
    HEAD of the file, which the access log shows."""
    need_root()
    root = tmp_path / "store"
    root.mkdir()
    v1, v2 = rand_bytes(SIZE, 41), rand_bytes(SIZE, 42)
    path = root / "m.bin"
    path.write_bytes(v1)
    stamp = int(time.time()) + 1
    os.utime(path, (stamp, stamp))
    access = tmp_path / "access.log"
    got = {}
    first_read = threading.Event()
    rewritten = threading.Event()

    def reader(mnt):
        try:
            with open(os.path.join(mnt, "m.bin"), "rb", buffering=0) as f:
                parts = [f.read(MiB)]
                first_read.set()
                rewritten.wait(30)
                while True:
                    b = f.read(MiB)
                    if not b:
                        break
                    parts.append(b)
            got["data"] = b"".join(parts)
        except OSError as e:
            got["error"] = e

    with Nginx(str(root), workdir=str(tmp_path / "nginx"), access_log=str(access)) as ng:
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS) as m:
            t = threading.Thread(target=reader, args=(m.path,))
            t.start()
            try:
                assert wait_for(lambda: access.exists() and
                                "HEAD /m.bin" in access.read_text(), 20), \
                    "the daemon never asked nginx for m.bin"
                # a daemon that trusted the first HEAD has read block 0 by now
                first_read.wait(1.0)
                path.write_bytes(v2)
                os.utime(path, (stamp, stamp))  # the same second: validators unchanged
            finally:
                rewritten.set()
                t.join(60)
            assert not t.is_alive()
            assert "error" not in got, (got.get("error"), m.log())
            data = got["data"]
            assert len(data) == SIZE
            first = data[:MiB] == v1[:MiB]
            assert data in (v1, v2), \
                "mixed versions: block 0 of the %s version, blocks equal to v2: %s" % (
                    "first" if first else "second",
                    [data[i:i + MiB] == v2[i:i + MiB] for i in range(0, SIZE, MiB)])
