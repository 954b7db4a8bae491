"""What `cmake --install` puts in place (the .deb of deploy/quickstart.sh is
made from it: tests/test_packages.py) is what mount(8) and fstab need (issues
13 and 25).

The build tree is installed under a scratch DESTDIR, not the machine's
/usr/local: bin/mcfs runs there, with the libfuse installed beside it when it
links the private one (its rpath is relative to the binary); bin/ is on
/bin/sh's default PATH, for /usr/local as for the package's /usr, which is the
PATH mount.fuse3 runs `mcfs SOURCE DIR -o ...` with (mount(8) clears PATH for
helpers; mount.fuse3 serves every fuse.TYPE through the /sbin/mount.fuse link
of Debian's fuse3). The Python package is not installed: pip alone installs
it (gpu/python), so that pip can remove it.
"""
import os
import subprocess

import pytest

from conftest import MCFS, ROOT, have

PREFIX = "/usr/local"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    build = os.path.dirname(os.path.dirname(os.path.abspath(MCFS)))
    if not os.path.exists(os.path.join(build, "cmake_install.cmake")):
        pytest.skip("no CMake build tree at %s" % build)
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["cmake", "--install", build, "--prefix", PREFIX],
                       env=dict(os.environ, DESTDIR=str(dest)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(dest) + PREFIX


def test_binary_on_the_helpers_path(installed):
    exe = os.path.join(installed, "bin", "mcfs")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("mcfs "), out.stdout + out.stderr
    sh_path = subprocess.run(["env", "-i", "/bin/sh", "-c", "echo $PATH"], capture_output=True,
                             text=True).stdout.strip().split(":")
    assert PREFIX + "/bin" in sh_path and "/usr/bin" in sh_path, sh_path
    if not have("mount.fuse3"):
        pytest.skip("mount.fuse3 is not installed (package fuse3)")
    # mount -t fuse.mcfs: mount(8) finds no mount.fuse.mcfs and runs mount.fuse
    assert not os.path.exists("/sbin/mount.fuse.mcfs")
    assert os.path.realpath("/sbin/mount.fuse") == os.path.realpath(
        subprocess.run(["sh", "-c", "command -v mount.fuse3"], capture_output=True,
                       text=True).stdout.strip())


def test_no_python_outside_pip(installed):
    """Before, the package and its .pth went into dist-packages with no pip metadata: pip
    could neither list nor remove them."""
    found = []
    for d, _, files in os.walk(installed):
        found += [os.path.join(d, f) for f in files if f.endswith((".py", ".pth"))]
    assert not found, found
