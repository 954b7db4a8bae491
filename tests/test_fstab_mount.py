"""mount(8) mounts mcfs: `mount -t fuse.mcfs SOURCE DIR -o ...` and an fstab line.

mount.fuse3 runs `/bin/sh -c 'mcfs SOURCE DIR -o OPTIONS'`, so `mcfs` must be
found on PATH:
- test_mount_fuse3_helper runs mount.fuse3 itself with an `mcfs` symlink in a
  temporary directory on PATH;
- mount(8) removes PATH from the helper's environment (util-linux does, even
  for root), so /bin/sh searches its default PATH, /usr/local/sbin first. The
  mount(8) tests run in a mount namespace of their own (unshare) in which a
  directory of the test's, holding only `mcfs` -> the built binary, is bound
  over /usr/local/sbin. The host's /usr/local/sbin is never touched, so two
  runs on one machine (or an installed mcfs) cannot collide. The FUSE mount
  lives in that namespace: the test looks at it through the daemon's
  /proc/PID/mounts and /proc/PID/root, and unmounts it with nsenter.
Options include the ones mount(8) and fstab add (ro, nodev, nosuid, _netdev,
dev, suid, ...), which mcfs must ignore.
"""
import os
import subprocess

import pytest

from conftest import MCFS, cleanup_daemon, daemon_pids, fuse_mounted, have, need_root, wait_for
from gen import MiB, write_random


# /bin/sh's default PATH, in order: the first of these that exists is where sh looks first
SH_PATH_FIRST = ("/usr/local/sbin", "/usr/local/bin")


class PrivateSbin:
    """Runs commands in a new mount namespace whose first PATH directory holds only the
    binary under test."""

    def __init__(self, bindir, over):
        self.bindir, self.over = bindir, over

    def run(self, cmd, **kw):
        wrap = ["unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"',
                self.bindir, self.over]
        return subprocess.run(wrap + cmd, capture_output=True, text=True, timeout=30, **kw)


@pytest.fixture
def private_sbin(tmp):
    need_root()
    for tool in ("mount.fuse3", "unshare", "nsenter"):
        if not have(tool):
            pytest.skip("%s is not installed (packages fuse3, util-linux)" % tool)
    over = next((d for d in SH_PATH_FIRST if os.path.isdir(d)), None)
    if not over:
        pytest.skip("none of %s exists to bind the binary over" % (SH_PATH_FIRST,))
    bindir = tmp / "sbin"
    bindir.mkdir()
    os.symlink(os.path.abspath(MCFS), str(bindir / "mcfs"))
    yield PrivateSbin(str(bindir), over)
    assert not linked_on_host(over), "the run linked its binary into the host's %s" % over


def linked_on_host(over):
    """True if the host's `over`/mcfs is the binary under test (what the old tests did)."""
    host = os.path.join(over, "mcfs")
    return os.path.lexists(host) and os.path.realpath(host) == os.path.realpath(MCFS)


@pytest.fixture
def path_env(tmp):
    if not have("mount.fuse3"):
        pytest.skip("mount.fuse3 is not installed (package fuse3)")
    bindir = tmp / "bin"
    bindir.mkdir()
    os.symlink(os.path.abspath(MCFS), str(bindir / "mcfs"))
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (bindir, env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    return env


def check_mounted(mnt, data):
    assert fuse_mounted(mnt)
    with open("/proc/mounts") as f:
        line = [l for l in f if l.split()[1] == os.path.realpath(mnt)][0]
    assert line.split()[2] == "fuse.mcfs", line
    assert open(os.path.join(mnt, "w.bin"), "rb").read() == data


def umount_and_wait(mnt):
    r = subprocess.run(["umount", mnt], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert not fuse_mounted(mnt)
    assert wait_for(lambda: not daemon_pids(mnt), timeout=10), \
        "daemon still running after umount: %s" % daemon_pids(mnt)


def the_daemon(mnt):
    pids = daemon_pids(mnt)
    assert len(pids) == 1, "daemons serving %s: %s" % (mnt, pids)
    assert os.path.realpath("/proc/%d/exe" % pids[0]) == os.path.realpath(MCFS), \
        "mount(8) ran another mcfs: %s" % os.path.realpath("/proc/%d/exe" % pids[0])
    return pids[0]


def check_mounted_in_ns(mnt, data):
    """The mount as the daemon's namespace sees it; the host sees none. Returns the pid."""
    pid = the_daemon(mnt)
    real = os.path.realpath(mnt)
    with open("/proc/%d/mounts" % pid) as f:
        lines = [l for l in f if l.split()[1] == real]
    assert lines and lines[-1].split()[2] == "fuse.mcfs", lines
    with open("/proc/%d/root%s/w.bin" % (pid, real), "rb") as f:
        assert f.read() == data
    assert not fuse_mounted(mnt), "the private namespace's mount reached the host"
    return pid


def umount_in_ns_and_wait(pid, mnt):
    r = subprocess.run(["nsenter", "--target", str(pid), "--mount", "umount", mnt],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: not daemon_pids(mnt), timeout=10), \
        "daemon still running after umount: %s" % daemon_pids(mnt)


def test_mount_fuse3_helper(tmp, path_env):
    """What mount.fuse3 does for type fuse.mcfs: `mcfs SOURCE DIR -o OPTS` (daemonises)."""
    data = write_random(str(tmp / "src" / "w.bin"), MiB + 5, seed=3)
    mnt = str(tmp / "mnt")
    try:
        r = subprocess.run(["mount.fuse3", str(tmp / "src"), mnt, "-t", "fuse.mcfs",
                            "-o", "ro,nodev,nosuid,block_size=1M,cache_dir="],
                           env=path_env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        check_mounted(mnt, data)
        umount_and_wait(mnt)
    finally:
        cleanup_daemon(mnt)


def test_mount_t_fuse_mcfs(tmp, private_sbin):
    data = write_random(str(tmp / "src" / "w.bin"), 2 * MiB + 3, seed=1)
    mnt = str(tmp / "mnt")
    try:
        r = private_sbin.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt,
                              "-o", "ro,nodev,nosuid,block_size=1M,ram_cache=16M,cache_dir="])
        assert r.returncode == 0, r.stdout + r.stderr
        pid = check_mounted_in_ns(mnt, data)
        umount_in_ns_and_wait(pid, mnt)
    finally:
        cleanup_daemon(mnt)


def test_fstab_line(tmp, private_sbin):
    data = write_random(str(tmp / "src" / "w.bin"), 1000, seed=2)
    mnt = str(tmp / "mnt")
    fstab = tmp / "fstab"
    src = "file://" + str(tmp / "src")
    fstab.write_text("# test fstab\n%s %s fuse.mcfs ro,_netdev,nofail,block_size=2M,"
                     "attr_ttl=60,allow_other,cache_dir= 0 0\n" % (src, mnt))
    try:
        r = private_sbin.run(["mount", "-T", str(fstab), mnt])
        assert r.returncode == 0, r.stdout + r.stderr
        pid = check_mounted_in_ns(mnt, data)
        umount_in_ns_and_wait(pid, mnt)
    finally:
        cleanup_daemon(mnt)


def test_mount_t_bad_option_fails(tmp, private_sbin):
    mnt = str(tmp / "mnt")
    try:
        r = private_sbin.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt,
                              "-o", "block_size=7M"])
        assert r.returncode != 0
        assert "block_size" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not daemon_pids(mnt) and not fuse_mounted(mnt)
    finally:
        cleanup_daemon(mnt)


def test_two_runs_do_not_collide(tmp, private_sbin):
    """Another run's binary in /usr/local/sbin (here: a decoy that fails, in a namespace of
    its own) does not reach this run's mount, and this run leaves the host's alone."""
    data = write_random(str(tmp / "src" / "w.bin"), 3000, seed=4)
    decoy = tmp / "decoy"
    decoy.mkdir()
    (decoy / "mcfs").write_text("#!/bin/sh\necho decoy ran >&2\nexit 42\n")
    (decoy / "mcfs").chmod(0o755)
    other = PrivateSbin(str(decoy), private_sbin.over)
    mnt = str(tmp / "mnt")
    try:
        r = other.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt, "-o", "cache_dir="])
        assert r.returncode != 0 and "decoy ran" in r.stderr, r.stdout + r.stderr
        r = private_sbin.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt,
                              "-o", "cache_dir="])
        assert r.returncode == 0, r.stdout + r.stderr
        pid = check_mounted_in_ns(mnt, data)
        assert not linked_on_host(private_sbin.over), "the run linked its binary on the host"
        umount_in_ns_and_wait(pid, mnt)
    finally:
        cleanup_daemon(mnt)
