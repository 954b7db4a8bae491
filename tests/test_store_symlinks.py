"""Symlinks of the store that point outside the mount (issue 16, item 3).

A store's symlink is followed by the kernel on the node, so a link to
/etc/passwd, or one that climbs above the store's root
(../../../../etc/hostname), would let a model loader read the node's own
files as if they were the model's. By default (`symlinks=contained`) mcfs
hides such links: they are not listed, a lookup gives ENOENT, and the daemon
logs each one once. Links that stay inside (the Hugging Face cache's
snapshots/REV/x -> ../../blobs/HASH) work as before. `symlinks=any` shows
every link as the store has it, `symlinks=none` hides all of them.

Run over the posix store and over the http store's manifest (nginx).
"""
import errno
import os
import stat
import subprocess

import pytest

from conftest import MCFS, mcfs_mount, need_root
from servers import Nginx, have_nginx

# link (relative to the store) -> target; True if it stays inside the store
LINKS = {
    "to-model": ("model.bin", True),
    "snapshots/rev1/model.safetensors": ("../../blobs/0a1b2c", True),
    "snapshots/rev1/here": (".", True),
    "passwd": ("/etc/passwd", False),
    "hostname": ("../../../../etc/hostname", False),
    "snapshots/rev1/up": ("../../../etc", False),
    "snapshots/sneaky": ("rev1/../../../etc/hostname", False),  # '..' after a name
}
OUTSIDE = sorted(k for k, (_, inside) in LINKS.items() if not inside)
INSIDE = sorted(k for k, (_, inside) in LINKS.items() if inside)


def make_store(root):
    os.makedirs(os.path.join(root, "blobs"))
    os.makedirs(os.path.join(root, "snapshots", "rev1"))
    data = {"model.bin": os.urandom(70000), "blobs/0a1b2c": os.urandom(5000)}
    for rel, b in data.items():
        with open(os.path.join(root, rel), "wb") as f:
            f.write(b)
    for rel, (target, _) in LINKS.items():
        os.symlink(target, os.path.join(root, rel))
    return data


def names_under(top):
    out = set()
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), top))
    return out


def check_contained(m, data):
    """The default: links that stay inside work; those that leave are gone."""
    seen = names_under(m.path)
    for rel in INSIDE:
        assert rel in seen, (rel, sorted(seen))
        assert stat.S_ISLNK(os.lstat(m.p(rel)).st_mode), rel
        assert os.readlink(m.p(rel)) == LINKS[rel][0], rel
    for rel in OUTSIDE:
        assert rel not in seen, (rel, sorted(seen))
        with pytest.raises(FileNotFoundError):
            os.lstat(m.p(rel))
        with pytest.raises(FileNotFoundError):
            os.readlink(m.p(rel))
        with pytest.raises(FileNotFoundError):
            open(m.p(rel), "rb")
    # following a contained link reads the store's bytes
    with open(m.p("to-model"), "rb") as f:
        assert f.read() == data["model.bin"]
    with open(m.p("snapshots", "rev1", "model.safetensors"), "rb") as f:
        assert f.read() == data["blobs/0a1b2c"]
    # ls -lR again: each refused link is logged once, not at every listing
    for _ in range(3):
        r = subprocess.run(["ls", "-lR", m.path], capture_output=True)
        assert r.returncode == 0, r.stderr
        for rel in OUTSIDE:
            with pytest.raises(FileNotFoundError):
                os.lstat(m.p(rel))
    log = m.log()
    for rel in OUTSIDE:
        lines = [ln for ln in log.splitlines() if "symlink '%s'" % rel in ln]
        assert len(lines) == 1, (rel, lines, log)
        assert "hidden" in lines[0] and LINKS[rel][0] in lines[0], lines[0]
    for rel in INSIDE:
        assert "symlink '%s'" % rel not in log, log


def check_any(m):
    seen = names_under(m.path)
    for rel, (target, _) in LINKS.items():
        assert rel in seen, rel
        assert os.readlink(m.p(rel)) == target, rel
    assert "hidden" not in m.log()


def check_none(m, data):
    seen = names_under(m.path)
    assert not (set(LINKS) & seen), sorted(set(LINKS) & seen)
    with open(m.p("model.bin"), "rb") as f:
        assert f.read() == data["model.bin"]
    with pytest.raises(FileNotFoundError):
        os.readlink(m.p("to-model"))
    assert "symlinks=none" in m.log()


def test_posix_store(tmp):
    src = str(tmp / "src")
    data = make_store(src)
    with mcfs_mount(src, str(tmp / "mnt")) as m:
        check_contained(m, data)
    with mcfs_mount(src, str(tmp / "mnt"), opts=["symlinks=any"]) as m:
        check_any(m)
    with mcfs_mount(src, str(tmp / "mnt"), opts=["symlinks=none"]) as m:
        check_none(m, data)


@pytest.mark.skipif(not have_nginx(), reason="nginx not installed "
                    "(deploy/install-deps.sh test installs nginx-light)")
def test_http_manifest(tmp_path):
    need_root()
    root = tmp_path / "data"
    data = make_store(str(root))
    r = subprocess.run([MCFS, "manifest", str(root)], capture_output=True)
    assert r.returncode == 0, r.stderr
    (root / ".mcfs-manifest.json").write_bytes(r.stdout)
    for rel in OUTSIDE:  # the manifest lists them as they are
        assert LINKS[rel][0].encode() in r.stdout, rel
    with Nginx(str(root), workdir=str(tmp_path / "nginx")) as ng:
        with mcfs_mount(ng.url, str(tmp_path / "mnt")) as m:
            check_contained(m, data)
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=["symlinks=any"]) as m:
            check_any(m)
        with mcfs_mount(ng.url, str(tmp_path / "mnt"), opts=["symlinks=none"]) as m:
            check_none(m, data)


def test_bad_setting_is_refused(tmp):
    with pytest.raises(RuntimeError) as ei:
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["symlinks=outside"]):
            pass
    assert "symlinks" in str(ei.value) and "contained, any or none" in str(ei.value)
    assert errno.ENOENT  # (errno imported for the readers' FileNotFoundError)
