"""-o offline (issue 5): with the store unreachable, `ls -lR` works from
LMDB and files read before are served from the disk tier; without offline
the same mount fails. The store is nginx on loopback, stopped between
mounts (a posix store can't be "unreachable": a missing directory is an
answer, not an outage)."""
import errno
import os
import subprocess

import pytest

from conftest import mcfs_mount
from disk_helpers import OPTS, make_model_tree, settle, tree_sums
from servers import Nginx, have_nginx

pytestmark = pytest.mark.skipif(not have_nginx(), reason="nginx not installed")

NET = ["retries=0", "connect_timeout=1", "timeout=2"]


def ls_lR(root):
    r = subprocess.run(["ls", "-lR", "--time-style=+%s", root], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def mount_http(url, mnt, opts):
    ctx = mcfs_mount(url, mnt, opts=opts)
    try:
        return ctx, ctx.__enter__()
    except RuntimeError as e:
        if "unsupported source" in str(e):
            pytest.skip("this mcfs is built without the http backend (MCFS_NO_NET)")
        raise


def test_ls_lR_and_reads_while_the_store_is_down(tmp):
    src = str(tmp / "src")
    sums = make_model_tree(src, n=3)
    cache = str(tmp / "cache")
    mnt = str(tmp / "mnt")
    ng = Nginx(src, workdir=str(tmp / "ng")).start()
    try:
        ctx, m = mount_http(ng.url + "/", mnt, OPTS + NET + ["cache_dir=" + cache])
        try:
            rc, online, err = ls_lR(m.path)
            assert rc == 0, err
            with open(m.p("model", "shard-00.bin"), "rb") as f:
                first = f.read()
            settle(m)
        finally:
            ctx.__exit__(None, None, None)
    finally:
        ng.stop()
    # the store is gone now
    with pytest.raises(RuntimeError):
        with mcfs_mount(ng.url + "/", mnt, opts=OPTS + NET + ["cache_dir=" + cache]):
            pass
    with mcfs_mount(ng.url + "/", mnt, opts=OPTS + NET + ["cache_dir=" + cache,
                                                          "offline"]) as m:
        rc, offline, err = ls_lR(m.path)
        assert rc == 0, err
        assert offline == online
        assert "not reachable" in m.log()
        # a file read before comes from the disk tier
        with open(m.p("model", "shard-00.bin"), "rb") as f:
            assert f.read() == first
        st = m.stats()  # through the cache, or by passthrough from its version file
        assert st["disk_hits"] + st["passthrough_opens"] > 0, st
        # one never read has no bytes anywhere: EIO, not a hang or garbage
        with pytest.raises(OSError) as ei:
            with open(m.p("model", "shard-01.bin"), "rb") as f:
                f.read()
        assert ei.value.errno == errno.EIO
