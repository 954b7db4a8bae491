"""The libfuse mcfs runs with (issue 14).

deploy/build-libfuse.sh builds libfuse 3.18 into a private prefix on Debian 12
and mcfs links it with an rpath, leaving the system's libfuse 3.14 and its
setuid fusermount3 in place. These tests check that `mcfs --version` names
the library really loaded, and that a daemon that is not root mounts and
unmounts through the system's fusermount3 (the private prefix has none: the
library runs the one in PATH) and serves the source's bytes.
"""
import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import MCFS, cleanup_daemon, daemon_pids, fuse_mounted, need_root, wait_for
from fuse_knobs import features
from gen import MiB, write_random

NOBODY = 65534


def loaded_libfuse():
    """Path of the libfuse3 the dynamic linker picks for mcfs (ldd)."""
    out = subprocess.run(["ldd", MCFS], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s*libfuse3\.so\.\d+ => (\S+)", out, re.M)
    assert m, out
    return os.path.realpath(m.group(1))


def test_version_names_the_loaded_libfuse():
    feats = features()
    lib = loaded_libfuse()
    m = re.search(r"libfuse3\.so\.(\d+\.\d+\.\d+)$", lib)
    assert m, lib
    assert feats["libfuse"] == m.group(1), (feats, lib)
    assert feats["libfuse"].startswith(feats["built"] + "."), feats
    # what the build detected follows the version
    minor = int(feats["built"].split(".")[1])
    assert feats["passthrough"] == (minor >= 17), feats
    assert feats["io_uring"] <= (minor >= 18), feats
    out = subprocess.run(["readelf", "-d", MCFS], capture_output=True, text=True).stdout
    for path in re.findall(r"(?:RUNPATH|RPATH).*\[(.*)\]", out):
        # an empty entry would make the current directory a library directory
        assert "" not in path.split(":"), path
        assert os.path.dirname(lib) in path.split(":"), (path, lib)


@contextlib.contextmanager
def dev_fuse_for_users():
    """/dev/fuse readable and writable by other users for the block.

    fusermount3 opens it with the user's rights. Debian's udev rule makes it
    0666; some containers leave it 0600, which stops every FUSE mount by a
    user, with or without mcfs: then it is opened up for the test and put back.
    """
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    if mode & 0o006 == 0o006:
        yield
        return
    os.chmod("/dev/fuse", mode | 0o006)
    try:
        yield
    finally:
        os.chmod("/dev/fuse", mode)


def as_nobody(*cmd, **kw):
    return subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                           "--clear-groups", *cmd], capture_output=True, text=True,
                          timeout=60, **kw)


def need_user_mounts():
    """Root (to drop to nobody with setpriv), a setuid fusermount3 and setpriv."""
    need_root()
    fm = shutil.which("fusermount3")
    if not fm or not os.stat(fm).st_mode & stat.S_ISUID:
        pytest.skip("no setuid fusermount3 (Debian's fuse3 package installs one)")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is missing")


def test_user_daemon_mounts_through_the_system_fusermount3():
    need_user_mounts()
    top = tempfile.mkdtemp(prefix="mcfs-user-")
    os.chmod(top, 0o755)   # pytest's tmp is 0700: nobody could not reach it
    src, mnt = os.path.join(top, "src"), os.path.join(top, "mnt")
    data = write_random(os.path.join(src, "m.bin"), 9 * MiB + 99, seed=3)
    os.makedirs(mnt)
    for p in (top, src, mnt, os.path.join(src, "m.bin")):
        os.chown(p, NOBODY, NOBODY)
    try:
        with dev_fuse_for_users():
            # daemon mode: returns once the mount answers
            r = as_nobody(MCFS, "mount", src, mnt, "-o", "cache_dir=,ram_cache=32M,block_size=1M",
                          cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr
            assert fuse_mounted(mnt)
            with open("/proc/mounts") as f:
                line = [ln for ln in f if ln.split()[1] == mnt][0]
            assert "user_id=%d" % NOBODY in line, line   # mounted for the user, not root
            # without allow_other only the user reads the mount
            r = as_nobody("sha256sum", os.path.join(mnt, "m.bin"))
            assert r.returncode == 0, r.stderr
            assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
            r = as_nobody(MCFS, "umount", mnt, cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr
            assert wait_for(lambda: not fuse_mounted(mnt), timeout=10)
            assert wait_for(lambda: not daemon_pids(mnt), timeout=10), "the daemon lives on"
    finally:
        cleanup_daemon(mnt)
        shutil.rmtree(top, ignore_errors=True)
