"""Metadata that refreshes (issue 25, item 2): a file added to the store in a
directory the mount has already listed appears

  - after SIGHUP to the daemon (which re-confirms every listing and attribute,
    and leaves the mount mounted and answering);
  - after `mcfs refresh DIR` (the same, for one subtree);
  - on a lookup of its name once the listing is older than negative_ttl,
    even while attr_ttl still trusts the listing.

Each mount trusts answers for an hour (attr_ttl=3600), so nothing but the
refresh under test can make the new file appear.
"""
import os
import signal
import subprocess
import time

import pytest

from conftest import MCFS, fuse_mounted, mcfs_mount

HOUR = ["attr_ttl=3600", "negative_ttl=3600"]


def listed_then_added(tmp, m):
    """Lists src/d through the mount, then adds d/new to the store."""
    assert sorted(os.listdir(m.p("d"))) == ["old"]
    (tmp / "src" / "d" / "new").write_bytes(b"new bytes")
    # trusted for attr_ttl: still the old listing, and the miss
    assert sorted(os.listdir(m.p("d"))) == ["old"]


def seen(m):
    assert sorted(os.listdir(m.p("d"))) == ["new", "old"]
    with open(m.p("d", "new"), "rb") as f:
        assert f.read() == b"new bytes"


@pytest.fixture
def tree(tmp):
    (tmp / "src" / "d").mkdir()
    (tmp / "src" / "d" / "old").write_bytes(b"old")
    return tmp


@pytest.mark.parametrize("cache_dir", [False, True], ids=["ram", "cache_dir"])
def test_sighup_relists_and_stays_mounted(tree, cache_dir):
    opts = HOUR + (["cache_dir=%s" % (tree / "cache")] if cache_dir else [])
    with mcfs_mount(str(tree / "src"), str(tree / "mnt"), opts=opts) as m:
        listed_then_added(tree, m)
        m.proc.send_signal(signal.SIGHUP)
        # the daemon says when it has dropped its trust: wait for that line
        deadline = time.time() + 10
        while "SIGHUP" not in m.log() and m.proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert m.proc.poll() is None, "the daemon exited on SIGHUP:\n" + m.log()
        assert fuse_mounted(m.path), "SIGHUP unmounted:\n" + m.log()
        seen(m)
        assert m.stats()["pid"] == m.proc.pid


def test_refresh_command_relists_subtree(tree):
    with mcfs_mount(str(tree / "src"), str(tree / "mnt"), opts=HOUR) as m:
        listed_then_added(tree, m)
        r = subprocess.run([MCFS, "refresh", m.p("d")], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("refreshed "), r.stdout
        seen(m)


def test_refresh_of_a_non_mcfs_path_says_so(tmp):
    r = subprocess.run([MCFS, "refresh", str(tmp / "src")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert "not on an mcfs mount" in r.stderr, r.stderr


@pytest.mark.parametrize("cache_dir", [False, True], ids=["ram", "cache_dir"])
def test_miss_in_listing_older_than_negative_ttl_relists(tree, cache_dir):
    """With cache_dir, LMDB's record of the listing is as old as the one in
    memory: the re-list must go to the store, not to it."""
    opts = ["attr_ttl=3600", "negative_ttl=1"]
    opts += ["cache_dir=%s" % (tree / "cache")] if cache_dir else []
    with mcfs_mount(str(tree / "src"), str(tree / "mnt"), opts=opts) as m:
        assert sorted(os.listdir(m.p("d"))) == ["old"]
        assert not os.path.exists(m.p("d", "new"))  # a miss, kept by the kernel too
        (tree / "src" / "d" / "new").write_bytes(b"new bytes")
        time.sleep(1.2)  # the listing is now older than negative_ttl (not than attr_ttl)
        assert os.path.exists(m.p("d", "new")), "a miss trusted a listing older than " \
            "negative_ttl"
        seen(m)


def test_refresh_refused_to_root_without_cap_sys_admin(tree):
    """A refresh makes the store answer again for every user of the mount:
    restricted as `mcfs evict` is (see test_status_evict.py)."""
    from conftest import have
    if not have("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    with mcfs_mount(str(tree / "src"), str(tree / "mnt"), opts=HOUR + ["allow_other"]) as m:
        listed_then_added(tree, m)
        r = subprocess.run(["setpriv", "--bounding-set=-sys_admin", MCFS, "refresh", m.p("d")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "only the node's admin may refresh" in r.stderr, r
        assert sorted(os.listdir(m.p("d"))) == ["old"], "refreshed without CAP_SYS_ADMIN"
