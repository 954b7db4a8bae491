"""`mcfs status MOUNTPOINT` and `mcfs evict PATH` (issue 5): status prints
both tiers' usage and hit ratios, bytes fetched and fetches in flight, and
when there is no disk tier, why (issue 16); evict drops a file's blocks from
RAM and disk (its user.mcfs.cached goes to 0) so the next read goes to the
store, and says how much it dropped from each tier (issue 16); per-file
cached bytes include the disk tier. With shared_cache set, status shows the
shared tier's state and counters (issue 15; tests/test_shared_cache.py checks
them on a working one)."""
import os
import re

import pytest

from conftest import MCFS, have, mcfs_mount, run_mcfs
from disk_helpers import OPTS, settle
from gen import MiB, cached_bytes, write_random
from servers import free_port


def test_status_prints_tiers(tmp):
    data = write_random(str(tmp / "src" / "a.bin"), 5 * MiB + 3, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=" + str(tmp / "cache")]) as m:
        assert open(m.p("a.bin"), "rb").read() == data
        settle(m)
        r = run_mcfs("status", m.path)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert re.search(r"RAM tier: +\d+ of 64 slots used", out), out
        assert re.search(r"disk tier: +on; 6 of \d+ blocks", out), out
        assert "hit ratio" in out and "written 5.0 MiB (6 blocks)" in out, out
        assert re.search(r"store: +5\.0 MiB fetched in 6 blocks", out), out
        assert re.search(r"in flight: +0 fetches, 0 disk writes queued", out), out
        assert "shared tier" not in out, out  # no shared_cache set
    r = run_mcfs("status", str(tmp))
    assert r.returncode != 0 and "not an mcfs mount" in r.stderr


def test_status_without_disk_tier(tmp):
    write_random(str(tmp / "src" / "a.bin"), 10, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        r = run_mcfs("status", m.path)
        assert r.returncode == 0 and "disk tier:  off (no cache_dir set)" in r.stdout, r.stdout


def test_status_shows_a_shared_tier_that_is_down(tmp):
    """A shared cache that does not answer (nothing listens at its endpoint):
    the mount goes on, the reads come from the store, and status says the
    shared tier is down, with its counters: no hits, its failed requests."""
    data = write_random(str(tmp / "src" / "a.bin"), 3 * MiB, seed=7)
    key = tmp / "cluster.key"
    key.write_bytes(b"0123456789abcdef0123456789abcdef")
    key.chmod(0o600)
    opts = OPTS + ["shared_cache=s3://nobody/here", "shared_key_file=%s" % key,
                   "shared_endpoint=http://127.0.0.1:%d" % free_port()]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("a.bin"), "rb").read() == data
        st = m.stats()
        r = run_mcfs("status", m.path)
    assert r.returncode == 0, r.stderr
    assert st["shared_state"] == 2 and st["store_reads"] == 3, st
    assert ("shared tier: DOWN: reads go to the store; hit ratio 0.0% (0 hits, 0 misses), "
            "0 B read;" in r.stdout), r.stdout
    assert re.search(r"written 0 B \(0 blocks\), 0 found there already, \d+ dropped, "
                     r"0 queued; \d+ errors, 0 corrupt and 0 unauthentic objects refused",
                     r.stdout), r.stdout


def test_status_refuses_counters_it_lacks(tmp):
    """status reads every counter by name and fails, naming it, when one is
    missing or not a number (a daemon of another version), instead of
    printing it as 0. The text is a real daemon's, set on a plain directory
    (user xattrs of the local filesystem) with one line dropped or spoiled."""
    write_random(str(tmp / "src" / "a.bin"), 10, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS) as m:
        text = os.getxattr(m.path, "user.mcfs.stats").decode()
    fake = tmp / "fake"
    fake.mkdir()
    try:
        os.setxattr(str(fake), "user.mcfs.stats", text.encode())
    except OSError as e:
        pytest.skip("no user xattrs on %s: %s" % (tmp, e))
    r = run_mcfs("status", str(fake))
    assert r.returncode == 0 and "RAM tier:" in r.stdout, r.stdout + r.stderr
    for key in ("disk_misses", "pid", "disk_off_reason"):
        lines = [ln for ln in text.splitlines() if ln.split()[0] != key]
        os.setxattr(str(fake), "user.mcfs.stats", "\n".join(lines).encode() + b"\n")
        r = run_mcfs("status", str(fake))
        assert r.returncode == 1 and r.stdout == "", r.stdout
        assert "counters lack '%s'" % key in r.stderr, r.stderr
    spoiled = text.replace("\nhits ", "\nhits x")
    os.setxattr(str(fake), "user.mcfs.stats", spoiled.encode())
    r = run_mcfs("status", str(fake))
    assert r.returncode == 1 and "have no number for 'hits'" in r.stderr, r.stderr


def test_status_says_why_the_disk_tier_is_off(tmp):
    """A second daemon of the same store on one cache_dir runs RAM only, and
    its status names the lock, not "no cache_dir"; a cache_dir that cannot be
    made says so, with the errno."""
    write_random(str(tmp / "src" / "a.bin"), 10, seed=1)
    (tmp / "mnt2").mkdir()
    opts = OPTS + ["cache_dir=" + str(tmp / "cache")]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m1:
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt2"), opts=opts) as m2:
            assert "in use by another mcfs" in m2.log()
            r = run_mcfs("status", m2.path)
            assert r.returncode == 0, r.stderr
            assert ("disk tier:  off (cache_dir in use by another mcfs daemon of this store)"
                    in r.stdout), r.stdout
        r = run_mcfs("status", m1.path)
        assert re.search(r"disk tier: +on;", r.stdout), r.stdout
    blocker = tmp / "not-a-dir"
    blocker.write_text("x")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s/sub" % blocker]) as m:
        r = run_mcfs("status", m.path)
        assert r.returncode == 0, r.stderr
        assert ("disk tier:  off (cache_dir (or the store's directory in it) could not be made "
                "or used: Not a directory)" in r.stdout), r.stdout


def test_evict_reports_each_tier(tmp):
    """A 6 MiB file held by both tiers: evict says 6 MiB from RAM and 6 MiB
    from disk (not "12 MiB dropped"), and both tiers are empty of it after."""
    a = write_random(str(tmp / "src" / "a.bin"), 6 * MiB, seed=5)
    opts = OPTS + ["cache_dir=" + str(tmp / "cache"), "keep_cache=false"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("a.bin"), "rb").read() == a
        st = settle(m)
        assert st["slots_used"] == 6 and st["disk_slots_used"] == 6, st
        r = run_mcfs("evict", m.p("a.bin"))
        assert r.returncode == 0, r.stderr
        assert "evicted 1 file: 6.0 MiB dropped from RAM, 6.0 MiB from disk" in r.stdout, \
            r.stdout
        st = m.stats()
        assert st["slots_used"] == 0 and st["disk_slots_used"] == 0, st
        assert cached_bytes(m.p("a.bin")) == 0


def test_evict_drops_both_tiers(tmp):
    a = write_random(str(tmp / "src" / "d" / "a.bin"), 3 * MiB, seed=1)
    b = write_random(str(tmp / "src" / "d" / "b.bin"), 2 * MiB, seed=2)
    opts = OPTS + ["cache_dir=" + str(tmp / "cache"), "keep_cache=false"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert open(m.p("d", "a.bin"), "rb").read() == a
        assert open(m.p("d", "b.bin"), "rb").read() == b
        settle(m)
        assert cached_bytes(m.p("d", "a.bin")) == 3 * MiB
    # a fresh daemon: RAM empty, so cached bytes are the disk tier's alone
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert cached_bytes(m.p("d", "a.bin")) == 3 * MiB
        r = run_mcfs("evict", m.p("d", "a.bin"))
        assert r.returncode == 0, r.stderr
        assert "evicted 1 file: 0 B dropped from RAM, 3.0 MiB from disk" in r.stdout, r.stdout
        assert cached_bytes(m.p("d", "a.bin")) == 0
        assert cached_bytes(m.p("d", "b.bin")) == 2 * MiB
        reads = m.stats()["store_reads"]
        assert open(m.p("d", "a.bin"), "rb").read() == a
        assert m.stats()["store_reads"] >= reads + 3
        settle(m)
        # a directory: every file below
        r = run_mcfs("evict", m.p("d"))
        assert r.returncode == 0 and "evicted 2 files" in r.stdout, r.stdout
        assert cached_bytes(m.p("d", "a.bin")) == 0 and cached_bytes(m.p("d", "b.bin")) == 0
        r = run_mcfs("evict", str(tmp / "src" / "d" / "a.bin"))
        assert r.returncode == 1 and "not a file on an mcfs mount" in r.stderr
    # evicted blocks stay evicted across a restart
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert cached_bytes(m.p("d", "b.bin")) == 0


def test_evict_needs_root_and_a_probe_drops_nothing(tmp):
    """Reading user.mcfs.evict drops blocks only for root (or the daemon's own
    user): with allow_other, another user gets EPERM and the file stays
    cached; a size probe (getxattr with size 0) answers a length and drops
    nothing."""
    import ctypes
    import shutil
    import subprocess
    import tempfile
    a = write_random(str(tmp / "src" / "a.bin"), 2 * MiB, seed=3)
    os.chmod(tmp / "src", 0o755)
    # a mount point that another user can reach (pytest's tmp is 0700)
    top = tempfile.mkdtemp(prefix="mcfs-evict-")
    os.chmod(top, 0o755)
    try:
        with mcfs_mount(str(tmp / "src"), os.path.join(top, "mnt"),
                        opts=OPTS + ["allow_other"]) as m:
            assert open(m.p("a.bin"), "rb").read() == a
            assert cached_bytes(m.p("a.bin")) == 2 * MiB
            libc = ctypes.CDLL(None, use_errno=True)
            n = libc.getxattr(m.p("a.bin").encode(), b"user.mcfs.evict", None, 0)
            assert n > 0, ctypes.get_errno()
            assert cached_bytes(m.p("a.bin")) == 2 * MiB, "a size probe evicted"
            # setpriv (util-linux) and getfattr (attr: deploy/install-deps.sh test)
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "getfattr", "-n", "user.mcfs.evict", m.p("a.bin")],
                               capture_output=True, text=True)
            assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr
            assert cached_bytes(m.p("a.bin")) == 2 * MiB, "another user evicted"
            r = run_mcfs("evict", m.p("a.bin"))
            assert r.returncode == 0, r.stderr
            assert "2.0 MiB dropped from RAM, 0 B from disk" in r.stdout, r.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_evict_refused_to_root_without_cap_sys_admin(tmp):
    """Issue 22, item 8: uid 0 is not enough to evict for every user of the
    mount. A pod's root shares the node's uid 0 but not CAP_SYS_ADMIN (its
    runtime drops it), or has a user namespace of its own, where its
    capabilities don't count: both get EPERM and the file stays cached. The
    node's root (CAP_SYS_ADMIN in the daemon's user namespace) may evict."""
    import subprocess
    if not (have("setpriv") and have("unshare") and have("getfattr")):
        pytest.skip("needs setpriv, unshare (util-linux) and getfattr (attr)")
    a = write_random(str(tmp / "src" / "a.bin"), 2 * MiB, seed=4)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS + ["allow_other"]) as m:
        assert open(m.p("a.bin"), "rb").read() == a
        assert cached_bytes(m.p("a.bin")) == 2 * MiB
        getfattr = ["getfattr", "-n", "user.mcfs.evict", m.p("a.bin")]
        for how in (["setpriv", "--bounding-set=-sys_admin"],
                    ["unshare", "--user", "--map-root-user"]):
            r = subprocess.run(how + getfattr, capture_output=True, text=True)
            assert r.returncode != 0 and "Operation not permitted" in r.stderr, (how, r)
            assert cached_bytes(m.p("a.bin")) == 2 * MiB, "%s evicted" % how
        r = subprocess.run(["setpriv", "--bounding-set=-sys_admin", MCFS, "evict", m.p("a.bin")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "only the node's admin may evict" in r.stderr, r
        # the same commands, with CAP_SYS_ADMIN in our namespace, do evict
        r = subprocess.run(["setpriv", "--bounding-set=-sys_nice"] + getfattr,
                           capture_output=True, text=True)
        assert r.returncode == 0, r
        assert cached_bytes(m.p("a.bin")) == 0
