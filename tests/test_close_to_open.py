"""Close-to-open consistency (issue 16, item 0): an open confirms the file's
version with the store before any cached block is served.

The issue's case: a file is rewritten in the store (same name, same size, new
bytes) while mcfs is not mounted; mcfs mounts again with the same cache_dir,
whose LMDB holds the old attributes (younger than attr_ttl, an hour) and
whose disk tier holds the old blocks. The second mount must serve the new
bytes, every one of them, while a file that did not change is still served
from the disk tier, for one confirmation request (a stat on posix, one HEAD
on http and s3) and no read of the store. Then, within the mount, a file
rewritten while it is not open is seen by the next open, attr_ttl or not.

Offline, an open that the store does not answer is served with the version
recorded in cache_dir, and the daemon says so: in its log (once per outage,
not per open) and in `mcfs status`. open_check=ttl is the documented way back
to trusting attr_ttl at open.

Rewrites move the file's mtime a minute on: nginx's ETag and Last-Modified
count whole seconds, so a same-size rewrite within the second is the same
version to the server (and to any client of it).
"""
import contextlib
import os
import re

import pytest

from conftest import mcfs_mount, run_mcfs
from disk_helpers import OPTS, settle
from gen import MiB, rand_bytes
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift, have_nginx, have_swift

A, B = "model/a.bin", "model/b.bin"
SIZES = {A: 3 * MiB + 12345, B: 3 * MiB + 777}
NET = ["retries=0", "connect_timeout=2", "timeout=5"]
BUCKET = "c2o"


class Store:
    """One store of the test: where it is, how to mount it, how to rewrite a file."""

    def __init__(self, kind, tmp):
        self.kind = kind
        self.tmp = tmp
        self.src = str(tmp / "src")
        self.url = self.src
        self.env = None
        self.opts = OPTS + ["cache_dir=" + str(tmp / "cache")]
        self.access = None  # http: nginx's access log
        self.s3 = None
        self.mtime_ns = {}

    def put(self, rel, data):
        """Writes @rel in the store: in place where it is a file (same inode),
        its mtime a minute after the last one."""
        if self.s3:
            self.s3.put_object(Bucket=BUCKET, Key=rel, Body=data)
            return
        path = os.path.join(self.src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "r+b" if os.path.exists(path) else "wb") as f:
            f.write(data)
        t = self.mtime_ns.get(rel, os.stat(path).st_mtime_ns) + 60 * 10**9
        self.mtime_ns[rel] = t
        os.utime(path, ns=(t, t))

    def requests(self):
        with open(self.access) as f:
            return f.read().splitlines()

    @contextlib.contextmanager
    def mount(self, extra=()):
        try:
            ctx = mcfs_mount(self.url, str(self.tmp / "mnt"), opts=self.opts + list(extra),
                             env=self.env)
            m = ctx.__enter__()
        except RuntimeError as e:
            if "unsupported source" in str(e):
                pytest.skip("this mcfs is built without the network stores (MCFS_NO_NET)")
            raise
        try:
            yield m
        finally:
            ctx.__exit__(None, None, None)


@pytest.fixture(scope="module")
def swift(tmp_path_factory):
    if not have_swift():
        pytest.skip("swift/memcached not installed (deploy/install-deps.sh test installs them)")
    sw = Swift(str(tmp_path_factory.mktemp("swift"))).start()
    try:
        sw.s3().create_bucket(Bucket=BUCKET)
        yield sw
    finally:
        sw.stop()


@contextlib.contextmanager
def make_store(kind, tmp, request):
    st = Store(kind, tmp)
    if kind == "posix":
        yield st
        return
    if kind == "s3":
        sw = request.getfixturevalue("swift")
        st.s3 = sw.s3()
        prefix = tmp.name  # one prefix per test: the bucket is shared by the module
        st.put = lambda rel, data: st.s3.put_object(Bucket=BUCKET, Key=prefix + "/" + rel,
                                                    Body=data)
        st.url = "s3://%s/%s" % (BUCKET, prefix)
        st.env = {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
                  "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": ""}
        st.opts += NET + ["endpoint=" + sw.endpoint]
        yield st
        return
    if not have_nginx():
        pytest.skip("nginx not installed (deploy/install-deps.sh test installs nginx-light)")
    os.makedirs(st.src, exist_ok=True)
    st.access = str(tmp / "access.log")
    with Nginx(st.src, workdir=str(tmp / "ng"), access_log=st.access) as ng:
        st.url = ng.url + "/"
        st.opts += NET
        yield st


def read(m, rel):
    with open(m.p(rel), "rb") as f:
        return f.read()


def delta(after, before, *keys):
    return {k: after[k] - before[k] for k in keys}


@pytest.mark.parametrize("kind", ["posix", "http", "s3"])
def test_rewritten_between_mounts(tmp, request, kind):
    with make_store(kind, tmp, request) as st:
        old = {rel: rand_bytes(n, i + 1) for i, (rel, n) in enumerate(SIZES.items())}
        for rel, data in old.items():
            st.put(rel, data)
        with st.mount() as m:
            for rel, data in old.items():
                assert read(m, rel) == data
            s = settle(m)
            assert s["disk_writes"] >= 8, s  # both files' blocks are in the disk tier
        new_a = rand_bytes(SIZES[A], 10)  # same name, same size, new bytes
        st.put(A, new_a)
        with st.mount() as m:
            s0 = m.stats()
            got = read(m, A)
            assert len(got) == len(new_a) and got == new_a, \
                "the second mount served the old bytes of a file rewritten in the store"
            s1 = m.stats()
            assert s1["store_reads"] - s0["store_reads"] >= 4, delta(s1, s0, "store_reads")
            n0 = len(st.requests()) if st.access else 0
            assert read(m, B) == old[B]
            s2 = m.stats()
            # the unchanged file: from the disk tier, for one confirmation
            d = delta(s2, s1, "store_reads", "fetches", "open_checks", "store_requests",
                      "disk_hits", "offline_opens", "passthrough_opens")
            assert d["store_reads"] == 0 and d["fetches"] == 0, d
            assert d["open_checks"] == 1 and d["store_requests"] == 1, d
            # its blocks through the cache, or its own file in the disk tier by passthrough
            assert d["disk_hits"] >= 4 or d["passthrough_opens"] == 1, d
            assert d["offline_opens"] == 0, d
            if st.access:
                new = st.requests()[n0:]
                assert len(new) == 1 and '"HEAD /model/b.bin ' in new[0], new
            # within the mount: a file rewritten while no one has it open is seen
            # by the next open, long before attr_ttl (an hour) runs out
            newer_b = rand_bytes(SIZES[B], 11)
            st.put(B, newer_b)
            got = read(m, B)
            assert len(got) == len(newer_b) and got == newer_b, \
                "an open after the store file was rewritten served the old bytes"
            out = run_mcfs("status", m.path)
            assert out.returncode == 0, out.stderr
            opens = [l for l in out.stdout.splitlines() if l.strip().startswith("opens:")]
            assert opens and "%d confirmed" % m.stats()["open_checks"] in opens[0], out.stdout


def test_offline_open_is_said(tmp, request):
    """Offline, with the store down: the version recorded in cache_dir is served,
    and the log (once) and `mcfs status` say that it was not confirmed."""
    with make_store("http", tmp, request) as st:
        data = rand_bytes(SIZES[A], 1)
        st.put(A, data)
        with st.mount() as m:
            assert read(m, A) == data
            settle(m)
        url = st.url
    # nginx is stopped: the store does not answer
    with mcfs_mount(url, str(tmp / "mnt"), opts=st.opts + ["offline"]) as m:
        for _ in range(3):
            assert read(m, A) == data
        s = m.stats()
        assert s["offline_opens"] == 3 and s["open_checks"] == 0, s
        assert s["store_reads"] == 0, s
        assert s["disk_hits"] >= 4 or s["passthrough_opens"] == 3, s  # the disk tier's file
        said = [l for l in m.log().splitlines()
                if re.search(r"offline: the store did not answer the open of model/a\.bin", l)]
        assert len(said) == 1, "want one log line for the outage, not one per open:\n" + m.log()
        assert "unconfirmed" in said[0], said
        out = run_mcfs("status", m.path)
        assert out.returncode == 0, out.stderr
        assert re.search(r"opens: +0 confirmed with the store; 3 OFFLINE: .*unconfirmed",
                         out.stdout), out.stdout


def test_open_check_ttl_trusts_attr_ttl(tmp, request):
    """open_check=ttl: the old behaviour, for those who ask for it (documented):
    an open trusts attributes younger than attr_ttl, so the rewritten file is
    served from the old blocks, with no request to the store."""
    with make_store("posix", tmp, request) as st:
        old = rand_bytes(SIZES[A], 1)
        st.put(A, old)
        with st.mount(["open_check=ttl"]) as m:
            assert read(m, A) == old
            settle(m)
        st.put(A, rand_bytes(SIZES[A], 2))
        with st.mount(["open_check=ttl"]) as m:
            s0 = m.stats()
            assert read(m, A) == old
            s1 = m.stats()
            assert delta(s1, s0, "open_checks", "store_requests", "store_reads") == {
                "open_checks": 0, "store_requests": 0, "store_reads": 0}
