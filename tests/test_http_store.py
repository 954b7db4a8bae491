"""The http(s) store end to end: nginx from Debian on loopback serves a
directory; mcfs mounts http://127.0.0.1:PORT and the bytes, listings and
failure modes are checked against the directory itself.

Listings come from the JSON manifest (`mcfs manifest`-format, written here by
the test through the same layout) or from nginx's autoindex JSON. A
fault-injecting proxy (faultproxy.py) between mcfs and nginx injects 503s and
dropped connections.
"""
import errno
import json
import os
import re
import subprocess
import time

import pytest

import remote_checks as rc
from conftest import MCFS, mcfs_mount, need_root
from faultproxy import FaultProxy
from servers import Nginx, have_nginx

pytestmark = pytest.mark.skipif(not have_nginx(), reason="nginx not installed "
                                "(deploy/install-deps.sh test installs nginx-light)")

OPTS = ["block_size=1M", "ram_cache=64M", "retries=3", "connect_timeout=2", "timeout=5"]


def write_manifest(root):
    """The manifest, written by `mcfs manifest ROOT` as a user would."""
    out = os.path.join(root, ".mcfs-manifest.json")
    r = subprocess.run([MCFS, "manifest", root], capture_output=True)
    assert r.returncode == 0 and r.stdout.startswith(b"{"), r.stderr
    with open(out, "wb") as f:
        f.write(r.stdout)


@pytest.fixture
def store(tmp_path):
    need_root()
    root = tmp_path / "data"
    root.mkdir()
    files = {}
    for name, size in rc.SIZES.items():
        files[name] = rc.data_for(name, size)
        (root / name).write_bytes(files[name])
    (root / "sub dir").mkdir()
    files["sub dir/nested+name=1.bin"] = rc.data_for("nested", 300000)
    (root / "sub dir" / "nested+name=1.bin").write_bytes(files["sub dir/nested+name=1.bin"])
    ng = Nginx(str(root), workdir=str(tmp_path / "nginx")).start()
    try:
        yield root, files, ng
    finally:
        ng.stop()


@pytest.mark.parametrize("listing", ["manifest", "autoindex"])
def test_bytes_and_listing(store, tmp_path, listing):
    root, files, ng = store
    if listing == "manifest":
        write_manifest(str(root))
    with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS) as m:
        assert sorted(os.listdir(m.path)) == sorted(
            [n for n in rc.SIZES] + ["sub dir"])
        assert os.listdir(m.p("sub dir")) == ["nested+name=1.bin"]
        for name, data in files.items():
            assert os.stat(m.p(name)).st_size == len(data)
        rc.check_whole_files(m.path, files)
        rc.check_random_ranges(m.p("multi.bin"), files["multi.bin"])
        rc.check_concurrent(m.p("multi.bin"), files["multi.bin"])
        rc.check_mmap(m.p("block-plus-1.bin"), files["block-plus-1.bin"])
        with pytest.raises(FileNotFoundError):
            os.stat(m.p("no-such-file"))


def test_manifest_on_a_server_with_its_own_validators(tmp_path):
    """A manifest store served by a server whose ETags mcfs cannot guess (here
    nginx with `etag off`, as a CDN or mirror computes its own): after `ls -l`
    has listed every file from the manifest, reads still carry the server's own
    validator (a HEAD at open), so bytes come back, not EIO."""
    need_root()
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    files = {"a.bin": rc.data_for("a", 3 * rc.BLOCK + 77), "sub/b.bin": rc.data_for("b", 5000)}
    for name, data in files.items():
        (root / name).write_bytes(data)
    later = rc.data_for("c", 16 * rc.BLOCK)  # read only after it is replaced
    (root / "c.bin").write_bytes(later)
    write_manifest(str(root))
    man = (root / ".mcfs-manifest.json").read_text()
    assert '"etag"' not in man, "the manifest guesses a validator: " + man[:300]
    with Nginx(str(root), workdir=str(tmp_path / "nginx"), extra="etag off;") as ng:
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS + ["readahead_max=0"]) as m:
            r = subprocess.run(["ls", "-lR", m.path], capture_output=True, text=True)
            assert r.returncode == 0 and "b.bin" in r.stdout, r.stderr
            rc.check_whole_files(m.path, files)
            rc.check_random_ranges(m.p("a.bin"), files["a.bin"])
            assert "changed on the server" not in m.log(), m.log()
            # the validator is really there: a file replaced mid-read is EIO,
            # never old and new bytes mixed
            r = subprocess.run(["ls", "-l", m.path], capture_output=True)
            assert r.returncode == 0
            fd = os.open(m.p("c.bin"), os.O_RDONLY)
            try:
                assert os.pread(fd, 4096, 0) == later[:4096]
                (root / "c.bin").write_bytes(bytes(b ^ 0xFF for b in later))
                st = os.stat(root / "c.bin")
                os.utime(root / "c.bin", (st.st_atime, st.st_mtime + 10))
                with pytest.raises(OSError) as ei:
                    os.pread(fd, 4096, 14 * rc.BLOCK)
                assert ei.value.errno == errno.EIO
            finally:
                os.close(fd)


def test_listing_over_1000(store, tmp_path):
    root, files, ng = store
    many = root / "many"
    many.mkdir()
    for i in range(1500):
        (many / ("f%05d" % i)).write_bytes(b"%d" % i)
    for listing in ("autoindex", "manifest"):
        if listing == "manifest":
            write_manifest(str(root))
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS) as m:
            names = os.listdir(m.p("many"))
            assert len(names) == 1500, listing
            with open(m.p("many", "f01234"), "rb") as f:
                assert f.read() == b"1234"


def test_escaping_names_refused(store, tmp_path):
    root, files, ng = store
    write_manifest(str(root))
    with open(root / ".mcfs-manifest.json") as f:
        man = json.load(f)
    for bad in ("../escape", "/etc/passwd", "a//b", "./dot"):
        man["entries"].append({"path": bad, "type": "file", "size": 1})
    with open(root / ".mcfs-manifest.json", "w") as f:
        json.dump(man, f)
    with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS) as m:
        names = os.listdir(m.path)
        assert "escape" not in names and ".." not in names and "etc" not in names
        log = m.log()
    assert "refused" in log and "../escape" in log


def test_server_stopped_mid_read(store, tmp_path):
    root, files, ng = store
    data = files["multi.bin"]
    with mcfs_mount(ng.url, str(tmp_path / "mnt"),
                    opts=OPTS + ["readahead_max=0", "retries=2"]) as m:
        fd = os.open(m.p("multi.bin"), os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == data[:4096]
            ng.stop()
            with pytest.raises(OSError) as ei:
                os.pread(fd, 4096, 3 * rc.BLOCK)
            assert ei.value.errno == errno.EIO
            ng.start()  # same port
            assert os.pread(fd, 4096, 3 * rc.BLOCK) == data[3 * rc.BLOCK:3 * rc.BLOCK + 4096]
        finally:
            os.close(fd)
        assert "failed after" in m.log()


def test_503_and_drops_are_retried(store, tmp_path):
    root, files, ng = store
    data = files["multi.bin"]
    with FaultProxy(ng.port) as px:
        with mcfs_mount(px.url, str(tmp_path / "mnt"),
                        opts=OPTS + ["readahead_max=0", "retries=5"]) as m:
            fd = os.open(m.p("multi.bin"), os.O_RDONLY)
            try:
                px.fail_503 = 3
                assert os.pread(fd, 4096, 0) == data[:4096]
                px.drop = 2
                assert os.pread(fd, 4096, 2 * rc.BLOCK) == data[2 * rc.BLOCK:2 * rc.BLOCK + 4096]
                px.fail_503, px.drop = 1, 1
                rc.check_random_ranges(m.p("multi.bin"), data, n=20)
            finally:
                os.close(fd)
            st = m.stats()
        assert px.counts["503"] >= 4 and px.counts["dropped"] >= 3, px.counts
        assert st["store_retries"] >= 7, st


def test_4xx_not_retried(store, tmp_path):
    root, files, ng = store
    with FaultProxy(ng.port) as px:
        with mcfs_mount(px.url, str(tmp_path / "mnt"), opts=OPTS) as m:
            before = px.counts["requests"]
            with pytest.raises(FileNotFoundError):
                os.stat(m.p("missing-file"))
            # one HEAD (plus at most the directory probe), no retries
            assert px.counts["requests"] - before <= 2


def test_replaced_mid_read(store, tmp_path):
    root, files, ng = store
    old = files["multi.bin"]
    new = bytes(reversed(old))
    opts = OPTS + ["readahead_max=0", "attr_ttl=0", "keep_cache=false"]
    with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=opts) as m:
        fd = os.open(m.p("multi.bin"), os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == old[:4096]
            tmpf = root / ".multi.tmp"
            tmpf.write_bytes(new)
            os.utime(tmpf, (time.time() + 5, time.time() + 5))  # a new ETag for sure
            os.rename(tmpf, root / "multi.bin")
            with pytest.raises(OSError) as ei:
                os.pread(fd, 4096, 4 * rc.BLOCK)
            assert ei.value.errno == errno.EIO
        finally:
            os.close(fd)
        assert "changed on the server" in m.log()
        with open(m.p("multi.bin"), "rb") as f:
            assert rc.sha(f.read()) == rc.sha(new)


def test_listing_keeps_cached_blocks_autoindex(store, tmp_path):
    """An `ls` of an autoindex directory must not change a file's identity: the
    listing's version is the ETag nginx sends, so blocks read before the
    listing are found after it (no second store read)."""
    root, files, ng = store
    name = sorted(rc.SIZES, key=rc.SIZES.get)[-1]
    with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS) as m:
        with open(m.p(name), "rb") as f:
            assert f.read() == files[name]
        s0 = m.stats()
        assert name in os.listdir(m.path)
        fd = os.open(m.p(name), os.O_RDONLY | os.O_DIRECT)
        try:
            import mmap
            buf = mmap.mmap(-1, 1 << 20)
            got = os.preadv(fd, [buf], 0)
            assert bytes(buf[:got]) == files[name][:got]
        finally:
            os.close(fd)
        s1 = m.stats()
        assert s1["store_reads"] == s0["store_reads"], (s0, s1)


def test_password_in_url_is_never_shown(store, tmp_path):
    """http://user:password@host/: libcurl sends the credentials, but the
    password appears in no log line, not in /proc/mounts (world-readable) and
    not in the cache directory's name."""
    root, files, ng = store
    secret = "pw-Zq81xkT"
    url = ng.url.replace("http://", "http://reader:%s@" % secret)
    cache = tmp_path / "cache"
    with mcfs_mount(url, str(tmp_path / "mnt"), opts=OPTS + ["cache_dir=%s" % cache,
                                                            "log_level=debug"]) as m:
        rc.check_whole_files(m.path, {"multi.bin": files["multi.bin"]})
        mounts = open("/proc/mounts").read()
        assert m.path in mounts and secret not in mounts, mounts
        names = os.listdir(cache)
        log = m.log()
    assert names and not any(secret in n for n in names), names
    assert "127.0.0.1" in log and secret not in log, log


def test_proxy_from_the_environment(store, tmp_path):
    """http_proxy in the daemon's environment (libcurl's rules: lowercase
    http_proxy, HTTPS_PROXY/https_proxy, ALL_PROXY, NO_PROXY) sends every
    request through the proxy, as a P2P distributor's proxy (Dragonfly) would
    be used; the bytes are the server's."""
    root, files, ng = store
    with FaultProxy(ng.port) as p:
        env = {"http_proxy": p.url, "no_proxy": "", "NO_PROXY": ""}
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS, env=env) as m:
            rc.check_whole_files(m.path, {"multi.bin": files["multi.bin"]})
        lines = list(p.request_lines)
    # a proxy gets the absolute URL (RFC 9112 absolute-form)
    assert any(ln.startswith("GET %s/multi.bin " % ng.url) for ln in lines), lines[:5]
    assert all(" http://127.0.0.1:%d/" % ng.port in ln for ln in lines), lines[:5]


def test_https_verifies_the_certificate(store, tmp_path):
    """https: a server whose certificate no trusted CA signed fails the mount
    with a message that says so; ca_file= naming its CA, or tls_verify=false,
    mounts it and the bytes are the server's."""
    root, files, ng = store
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with Nginx(str(root), workdir=str(tmp_path / "nginx-tls"), tls=(cert, key)) as tls:
        assert tls.url.startswith("https://")
        with pytest.raises(RuntimeError) as ei:
            with mcfs_mount(tls.url, str(tmp_path / "mnt"), opts=OPTS + ["retries=0"]):
                pass
        assert "certificate" in str(ei.value), str(ei.value)
        for opt in ("ca_file=%s" % cert, "tls_verify=false"):
            with mcfs_mount(tls.url, str(tmp_path / "mnt"), opts=OPTS + [opt]) as m:
                rc.check_whole_files(m.path, {"multi.bin": files["multi.bin"]})


def test_autoindex_on_a_server_without_etags(tmp_path):
    """nginx with `etag off;` listing by autoindex JSON: after `ls -l`, every
    file reads back whole (no validator the server never sent goes out as
    If-Match, so no spurious 412/EIO). The same store with ETags on: a file
    replaced while open still gives EIO, never old and new bytes mixed."""
    need_root()
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    files = {"a.bin": rc.data_for("a", 3 * rc.BLOCK + 77), "b.bin": rc.data_for("b", 4097),
             "sub/c.bin": rc.data_for("c", rc.BLOCK + 1)}
    for name, data in files.items():
        (root / name).write_bytes(data)
    with Nginx(str(root), workdir=str(tmp_path / "nginx"), extra="etag off;") as ng:
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=OPTS + ["readahead_max=0"]) as m:
            r = subprocess.run(["ls", "-lR", m.path], capture_output=True, text=True)
            assert r.returncode == 0 and "c.bin" in r.stdout, r.stderr
            rc.check_whole_files(m.path, files)
            rc.check_random_ranges(m.p("a.bin"), files["a.bin"], n=20)
            log = m.log()
            # "412" as a status, not inside a port number or a time stamp
            assert "changed on the server" not in log, log
            assert not re.search(r"(?<![0-9:.])412(?![0-9])", log), log
    later = rc.data_for("d", 16 * rc.BLOCK)
    (root / "d.bin").write_bytes(later)
    with Nginx(str(root), workdir=str(tmp_path / "nginx-etag")) as ng:
        with mcfs_mount(ng.url, str(tmp_path / "mnt"),
                        opts=OPTS + ["readahead_max=0", "keep_cache=false"]) as m:
            assert "d.bin" in os.listdir(m.path)
            fd = os.open(m.p("d.bin"), os.O_RDONLY)
            try:
                assert os.pread(fd, 4096, 0) == later[:4096]
                (root / "d.bin").write_bytes(bytes(b ^ 0xFF for b in later))
                st = os.stat(root / "d.bin")
                os.utime(root / "d.bin", (st.st_atime, st.st_mtime + 10))
                with pytest.raises(OSError) as ei:
                    os.pread(fd, 4096, 14 * rc.BLOCK)
                assert ei.value.errno == errno.EIO
            finally:
                os.close(fd)
            assert "changed on the server" in m.log()


def test_stalled_answer_is_retried(store, tmp_path):
    """A connection that stalls mid-body (headers and part of the body, then
    nothing, the connection still open) is cut after stall_timeout (default
    5 s) and the block fetched again on a new connection: the read returns the
    right bytes long before the 30 s transfer timeout, and the log names the
    stall."""
    root, files, ng = store
    data = files["multi.bin"]
    opts = ["block_size=1M", "ram_cache=64M", "retries=3", "connect_timeout=2", "timeout=30",
            "readahead_max=0"]
    with FaultProxy(ng.port) as px:
        with mcfs_mount(px.url, str(tmp_path / "mnt"), opts=opts) as m:
            fd = os.open(m.p("multi.bin"), os.O_RDONLY)
            try:
                assert os.pread(fd, 4096, 0) == data[:4096]
                s0 = m.stats()
                px.stall = 1
                t0 = time.monotonic()
                got = os.pread(fd, rc.BLOCK, 3 * rc.BLOCK)
                took = time.monotonic() - t0
            finally:
                os.close(fd)
            print("stalled block read took %.1f s (timeout=30, stall_timeout default)" % took)
            assert got == data[3 * rc.BLOCK:4 * rc.BLOCK]
            assert px.counts["stalled"] == 1, px.counts
            s1 = m.stats()
            assert s1["store_retries"] >= s0["store_retries"] + 1, (s0, s1)
            assert any("stalled:" in ln and "multi.bin" in ln for ln in m.log().splitlines()), \
                m.log()
            # not the transfer timeout: that would have taken 30 s
            assert took < 25, took
