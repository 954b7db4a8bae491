"""What deploy/quickstart.sh installs (`cmake --install build --prefix
/usr/local`) is what mount(8), fstab and Python need (issue 13).

The build tree is installed under a scratch DESTDIR, not the machine's
/usr/local: bin/mcfs runs; it sits in a directory on /bin/sh's default PATH,
which is the PATH mount.fuse3 runs `mcfs SOURCE DIR -o ...` with
(mount(8) clears PATH for helpers; mount.fuse3 serves every fuse.TYPE through
the /sbin/mount.fuse link of Debian's fuse3); the Python package and the
switch's .pth land in the dist-packages directory the system's python3
reads.
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
    assert PREFIX + "/bin" in sh_path, sh_path
    if not have("mount.fuse3"):
        pytest.skip("mount.fuse3 is not installed (package fuse3)")
    # mount -t fuse.mcfs: mount(8) finds no mount.fuse.mcfs and runs mount.fuse
    assert not os.path.exists("/sbin/mount.fuse.mcfs")
    assert os.path.realpath("/sbin/mount.fuse") == os.path.realpath(
        subprocess.run(["sh", "-c", "command -v mount.fuse3"], capture_output=True,
                       text=True).stdout.strip())


def test_python_package_and_switch(installed):
    libs = os.path.join(installed, "lib")
    found = [os.path.join(libs, d, "dist-packages") for d in os.listdir(libs)
             if d.startswith("python3")]
    assert len(found) == 1, os.listdir(libs)
    site = found[0]
    assert os.path.exists(os.path.join(site, "mcfs", "__init__.py"))
    with open(os.path.join(site, "mcfs_switch.pth")) as f, \
            open(os.path.join(ROOT, "gpu", "python", "mcfs_switch.pth")) as g:
        assert f.read() == g.read()
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        pytest.skip("no system python3 at %s" % py)
    # the system python reads <prefix>/lib/python3.X/dist-packages (Debian)
    paths = subprocess.run([py, "-c", "import sys; print('\\n'.join(sys.path))"],
                           capture_output=True, text=True).stdout.split()
    assert site[len(installed) - len(PREFIX):] in paths, (site, paths)
