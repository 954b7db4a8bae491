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
import shutil
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


# Issue 22, item 5: a directory of the store that becomes a symlink after it
# was listed. The kernel keeps it as the directory it saw, so the next open of
# a/secret reaches the store as the path "a/secret": the store must resolve it
# beneath its root, never through a link that leaves it. MCFS_POSIX_FAULT=
# no-openat2 runs the same checks on the fallback for kernels without openat2.
OPENAT2_MODES = [pytest.param({}, id="openat2"),
                 pytest.param({"MCFS_POSIX_FAULT": "no-openat2"}, id="fallback")]


def swap_dir_for_link(src, name, target):
    """Replaces the directory src/name by a symlink to target."""
    shutil.rmtree(os.path.join(src, name))
    os.symlink(target, os.path.join(src, name))


@pytest.mark.parametrize("env", OPENAT2_MODES)
def test_listed_dir_swapped_for_link_outside(tmp, env):
    src, outside = str(tmp / "src"), str(tmp / "outside")
    os.makedirs(os.path.join(src, "a"))
    os.makedirs(outside)
    inside = os.urandom(5000)
    secret = b"outside the store: " + os.urandom(4000)
    with open(os.path.join(src, "a", "secret"), "wb") as f:
        f.write(inside)
    with open(os.path.join(outside, "secret"), "wb") as f:
        f.write(secret)
    with open(os.path.join(outside, "only-outside"), "wb") as f:
        f.write(secret)
    with mcfs_mount(src, str(tmp / "mnt"), env=env) as m:
        assert os.listdir(m.p("a")) == ["secret"]
        assert os.stat(m.p("a", "secret")).st_size == len(inside)
        swap_dir_for_link(src, "a", outside)
        with pytest.raises(OSError) as ei:
            with open(m.p("a", "secret"), "rb") as f:
                got = f.read()
                assert got != secret, "served the bytes of a file outside the store"
        assert ei.value.errno in (errno.ENOENT, errno.EACCES, errno.ELOOP), ei.value
        with pytest.raises(FileNotFoundError):
            os.stat(m.p("a", "only-outside"))
        try:
            names = os.listdir(m.p("a"))
        except OSError as e:
            assert e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP), e
        else:
            assert "only-outside" not in names, names
        # the same through a relative link that climbs out of the root
        os.unlink(os.path.join(src, "a"))
        os.symlink(os.path.relpath(outside, src), os.path.join(src, "a"))
        with pytest.raises(OSError) as ei:
            open(m.p("a", "secret"), "rb").read()
        assert ei.value.errno in (errno.ENOENT, errno.EACCES, errno.ELOOP), ei.value
        assert "leaves the store" in m.log() or "through a symlink" in m.log(), m.log()


@pytest.mark.parametrize("setting,env,follows", [
    ("contained", {}, True),
    ("any", {}, True),
    ("none", {}, False),
    ("contained", {"MCFS_POSIX_FAULT": "no-openat2"}, False),
])
def test_listed_dir_swapped_for_link_inside(tmp, setting, env, follows):
    """A link that stays inside is followed where the setting allows links
    (contained, any) and openat2 can keep the walk inside the root."""
    src = str(tmp / "src")
    os.makedirs(os.path.join(src, "a"))
    os.makedirs(os.path.join(src, "b"))
    old, new = os.urandom(3000), os.urandom(3000)
    with open(os.path.join(src, "a", "secret"), "wb") as f:
        f.write(old)
    with open(os.path.join(src, "b", "secret"), "wb") as f:
        f.write(new)
    with mcfs_mount(src, str(tmp / "mnt"), opts=["symlinks=" + setting], env=env) as m:
        assert os.listdir(m.p("a")) == ["secret"]
        swap_dir_for_link(src, "a", "b")
        if follows:
            with open(m.p("a", "secret"), "rb") as f:
                assert f.read() == new
        else:
            with pytest.raises(OSError) as ei:
                open(m.p("a", "secret"), "rb").read()
            assert ei.value.errno in (errno.ENOENT, errno.ELOOP), ei.value


def test_bad_setting_is_refused(tmp):
    with pytest.raises(RuntimeError) as ei:
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["symlinks=outside"]):
            pass
    assert "symlinks" in str(ei.value) and "contained, any or none" in str(ei.value)
    assert errno.ENOENT  # (errno imported for the readers' FileNotFoundError)
