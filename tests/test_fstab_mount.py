"""mount(8) mounts mcfs: `mount -t fuse.mcfs SOURCE DIR -o ...` and an fstab line.

mount.fuse3 runs `/bin/sh -c 'mcfs SOURCE DIR -o OPTIONS'`, so `mcfs` must be
found on PATH:
- test_mount_fuse3_helper runs mount.fuse3 itself with an `mcfs` symlink in a
  temporary directory on PATH;
- mount(8) removes PATH from the helper's environment (util-linux does, even
  for root), so /bin/sh searches its default PATH. The mount(8) tests put a
  temporary symlink /usr/local/sbin/mcfs -> the built binary (only if that
  name is free, removed afterwards) and skip, saying why, otherwise.
Options include the ones mount(8) and fstab add (ro, nodev, nosuid, _netdev,
dev, suid, ...), which mcfs must ignore.
"""
import os
import subprocess

import pytest

from conftest import MCFS, cleanup_daemon, daemon_pids, fuse_mounted, have, wait_for
from gen import MiB, write_random


SBIN_LINK = "/usr/local/sbin/mcfs"


@pytest.fixture
def sbin_link():
    """/usr/local/sbin/mcfs -> the binary under test, for the life of one test."""
    if not have("mount.fuse3"):
        pytest.skip("mount.fuse3 is not installed (package fuse3)")
    target = os.path.abspath(MCFS)
    made = False
    if os.path.lexists(SBIN_LINK):
        if os.path.realpath(SBIN_LINK) != os.path.realpath(target):
            pytest.skip("%s exists and is not the binary under test; mount(8) would run it"
                        % SBIN_LINK)
    else:
        try:
            os.makedirs(os.path.dirname(SBIN_LINK), exist_ok=True)
            os.symlink(target, SBIN_LINK)
            made = True
        except OSError as e:
            pytest.skip("cannot create %s for mount(8): %s" % (SBIN_LINK, e))
    yield
    if made and os.path.islink(SBIN_LINK) and os.readlink(SBIN_LINK) == target:
        os.unlink(SBIN_LINK)


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


def test_mount_t_fuse_mcfs(tmp, path_env, sbin_link):
    data = write_random(str(tmp / "src" / "w.bin"), 2 * MiB + 3, seed=1)
    mnt = str(tmp / "mnt")
    try:
        r = subprocess.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt,
                            "-o", "ro,nodev,nosuid,block_size=1M,ram_cache=16M,cache_dir="],
                           env=path_env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        check_mounted(mnt, data)
        umount_and_wait(mnt)
    finally:
        cleanup_daemon(mnt)


def test_fstab_line(tmp, path_env, sbin_link):
    data = write_random(str(tmp / "src" / "w.bin"), 1000, seed=2)
    mnt = str(tmp / "mnt")
    fstab = tmp / "fstab"
    src = "file://" + str(tmp / "src")
    fstab.write_text("# test fstab\n%s %s fuse.mcfs ro,_netdev,nofail,block_size=2M,"
                     "attr_ttl=60,allow_other,cache_dir= 0 0\n" % (src, mnt))
    try:
        r = subprocess.run(["mount", "-T", str(fstab), mnt], env=path_env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        check_mounted(mnt, data)
        umount_and_wait(mnt)
    finally:
        cleanup_daemon(mnt)


def test_mount_t_bad_option_fails(tmp, path_env, sbin_link):
    mnt = str(tmp / "mnt")
    try:
        r = subprocess.run(["mount", "-t", "fuse.mcfs", str(tmp / "src"), mnt,
                            "-o", "block_size=7M"],
                           env=path_env, capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "block_size" in r.stdout + r.stderr, r.stdout + r.stderr
        assert not fuse_mounted(mnt)
    finally:
        cleanup_daemon(mnt)
