"""Listings a store gets wrong (issue 16, item 4): one entry per name, and
every name that can't be shown refused with a log line, never cut short.

A small HTTP server in this file answers like nginx's `autoindex_format json`
but with a crafted page: a name listed as a file and as a directory, a
300-byte name, a name holding a NUL byte (escaped \\u0000: nginx could not
produce it, another autoindex-compatible server could), a '/'. Files are
served with HEAD, ranged GETs and a strong ETag, as a static server does.
"""
import http.server
import json
import os
import re
import threading

import pytest

import remote_checks as rc
from conftest import mcfs_mount, need_root

OPTS = ["block_size=1M", "ram_cache=64M", "retries=1", "connect_timeout=2", "timeout=5"]


class CraftedServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, files, listings):
        self.files = files        # URL path -> bytes
        self.listings = listings  # URL path of a directory ("/", "/sub/") -> JSON text
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
        self.thread.join(5)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        srv = self.server
        if path in srv.listings:
            return self.reply(200, srv.listings[path].encode(),
                              [("Content-Type", "application/json")])
        data = srv.files.get(path)
        if data is None:
            return self.reply(404, b"")
        etag = '"%x"' % len(data)
        want = self.headers.get("If-Match")
        if want and want != etag:
            return self.reply(412, b"")
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        if not m:
            return self.reply(200, data, [("ETag", etag)])
        a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        return self.reply(206, data[a:b + 1], [("ETag", etag), (
            "Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))])


def test_crafted_autoindex(tmp_path):
    need_root()
    both = rc.data_for("both", 3 * rc.BLOCK + 5)
    ok = rc.data_for("ok", 7000)
    long_name = "x" * 300
    page = [
        {"name": "both", "type": "directory", "mtime": "Wed, 22 Nov 2023 10:00:00 GMT"},
        {"name": "ok.bin", "type": "file", "size": len(ok),
         "mtime": "Wed, 22 Nov 2023 10:00:00 GMT"},
        {"name": "both", "type": "file", "size": len(both),
         "mtime": "Wed, 22 Nov 2023 10:00:00 GMT"},
        {"name": long_name, "type": "file", "size": 1},
        {"name": "evil\u0000.bin", "type": "file", "size": 2},
        {"name": "a/b", "type": "file", "size": 3},
    ]
    files = {"/both": both, "/ok.bin": ok, "/evil": b"cut", "/" + long_name[:255]: b"c"}
    with CraftedServer(files, {"/": json.dumps(page)}) as srv:
        with mcfs_mount(srv.url, str(tmp_path / "mnt"), opts=OPTS) as m:
            names = os.listdir(m.path)
            assert sorted(names) == ["both", "ok.bin"], names
            # the listing and a lookup agree: "both" is the file
            assert os.path.isfile(m.p("both"))
            rc.check_whole_files(m.path, {"both": both, "ok.bin": ok})
            log = m.log()
    assert "'both' twice" in log and "shown once, as a file" in log, log
    assert "longer than 255 bytes" in log and long_name in log, log
    assert "NUL byte" in log and "evil" in log, log
    assert "a '/' inside a name" in log, log
    # each refusal has its own line
    for needle in ("'both' twice", "longer than 255 bytes", "NUL byte", "a '/' inside"):
        assert len([ln for ln in log.splitlines() if needle in ln]) == 1, (needle, log)
