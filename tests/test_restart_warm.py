"""Restart-warm (issue 5): a node that read a model yesterday reads it today
without reading the store. Remounting the same store with the same
cache_dir serves the files read before - bytes, attributes and listings -
with no store read after the mount's own check of the root: attributes and
listings come from LMDB, and the only requests are the opens' confirmations
of each file's version (close-to-open, issue 16: one stat or HEAD per open),
counted by the daemon and, with nginx, at the server's access log. A changed
file is revalidated and its old blocks are never served."""
import os
import subprocess
import time

import pytest

from conftest import mcfs_mount, wait_for
from disk_helpers import OPTS, make_model_tree, settle, tree_sums
from gen import MiB, write_random
from servers import Nginx, have_nginx


def listing(root):
    out = []
    for dp, dns, fns in os.walk(root):
        for n in sorted(dns + fns):
            st = os.lstat(os.path.join(dp, n))
            out.append((os.path.relpath(os.path.join(dp, n), root), st.st_mode, st.st_size,
                        st.st_mtime_ns))
    return sorted(out)


def test_remount_reads_with_one_confirmation_per_open(tmp):
    sums = make_model_tree(str(tmp / "src"))
    opts = OPTS + ["cache_dir=" + str(tmp / "cache")]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        before = listing(m.path)
        assert tree_sums(m.path, sums) == sums
        st = settle(m)
        assert st["store_reads"] > 0 and st["disk_writes"] > 0, st
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        at_mount = m.stats()
        assert listing(m.path) == before
        assert tree_sums(m.path, sums) == sums
        st = m.stats()
        # the mount checks the store's root once; after that, one confirmation
        # per open (tree_sums opens each file once) and nothing else
        assert at_mount["store_requests"] <= 1, at_mount
        assert st["open_checks"] == len(sums), (len(sums), st)
        assert st["store_requests"] - at_mount["store_requests"] == len(sums), (at_mount, st)
        assert st["store_reads"] == 0 and st["fetches"] == 0, st
        # from disk: through the cache, or (complete files) by passthrough from
        # their own version file, kept across the restart
        assert st["disk_hits"] + st["passthrough_opens"] > 0, st
        assert st["disk_csum_errors"] == 0, st


class LoggingNginx(Nginx):
    """The test servers' nginx, with an access log (written from its start, so no
    request can reach a worker that does not log) to count requests at the server."""

    def __init__(self, root, workdir):
        super().__init__(root, workdir=workdir, access_log=os.path.join(workdir, "access.log"))
        self.access = self.access_log

    def requests(self):
        if not os.path.exists(self.access):
            return []
        with open(self.access) as f:
            return f.read().splitlines()


def http_supported(tmp):
    from conftest import run_mcfs
    r = run_mcfs("help-config")
    return "endpoint" in r.stdout  # built with the network backends


@pytest.mark.skipif(not have_nginx(), reason="nginx not installed")
def test_remount_one_head_per_open_at_the_server(tmp):
    src = str(tmp / "src")
    sums = make_model_tree(src, n=3)
    opts = OPTS + ["cache_dir=" + str(tmp / "cache"), "retries=0"]
    with LoggingNginx(src, workdir=str(tmp / "ng")) as ng:
        try:
            m_ctx = mcfs_mount(ng.url + "/", str(tmp / "mnt"), opts=opts)
            m = m_ctx.__enter__()
        except RuntimeError as e:
            if "unsupported source" in str(e):
                pytest.skip("this mcfs is built without the http backend (MCFS_NO_NET)")
            raise
        # Reads by path only: an autoindex listing gives files no version (the
        # HEAD gives the ETag), so a listing would change their cache identity.
        # Known gap of the http backend, reported; listings are covered by the
        # posix test above.
        try:
            assert tree_sums(m.path, sums) == sums
            settle(m)
        finally:
            m_ctx.__exit__(None, None, None)
        assert len(ng.requests()) > 3
        with mcfs_mount(ng.url + "/", str(tmp / "mnt"), opts=opts) as m:
            n0 = len(ng.requests())  # after the mount's check of the root
            assert tree_sums(m.path, sums) == sums
            new = ng.requests()[n0:]
            # one HEAD per open (each file is opened once), no GET
            heads = sorted(l.split('"')[1] for l in new)
            assert heads == sorted("HEAD /%s HTTP/1.1" % rel for rel in sums), \
                "requests after remount, other than one HEAD per open: %s" % new[:5]
            assert m.stats()["store_reads"] == 0


def test_changed_file_is_revalidated_after_attr_ttl(tmp):
    p = str(tmp / "src" / "w.bin")
    old = write_random(p, 3 * MiB, seed=1)
    opts = OPTS + ["cache_dir=" + str(tmp / "cache"), "attr_ttl=1", "keep_cache=false"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("w.bin"), "rb").read() == old
        settle(m)
    new = write_random(p, 3 * MiB, seed=2)  # same size, new bytes and mtime
    os.utime(p, ns=(time.time_ns() + 5 * 10**9,) * 2)
    time.sleep(1.2)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("w.bin"), "rb").read() == new  # never the old blocks
        st = m.stats()
        assert st["store_reads"] >= 3 and st["disk_hits"] == 0, st
        settle(m)
        # and within one mount: changed again, seen after the ttl
        newer = write_random(p, 3 * MiB, seed=3)
        os.utime(p, ns=(time.time_ns() + 10 * 10**9,) * 2)
        time.sleep(1.2)
        assert open(m.p("w.bin"), "rb").read() == newer
