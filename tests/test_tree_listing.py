"""ls, stat, find and os.walk see the source tree, exactly.

The tree (gen.make_tree) has names with spaces, non-ASCII names (NFC and NFD
forms, CJK, emoji, one name that is not UTF-8), nested and empty dirs, a
directory of 300 entries (readdir in several calls), modes from 0444 to 0755,
mtimes with nanoseconds, at the epoch and in 2100, and symlinks inside the
store (relative, to a directory, dangling, absolute, self-loop) that must
appear as symlinks with the same target. The tree has one link that leaves the
store (absolute-outside -> /etc/hostname): the suites that compare the whole
tree mount with `symlinks=any`, which shows it; by default it is hidden
(test_store_symlinks.py).
"""
import os
import stat
import subprocess

from conftest import have, mcfs_mount
from gen import make_tree, tree_entries


def lines(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)
    return out.returncode, sorted(out.stdout.split(b"\n")), out.stderr


ANY = ["symlinks=any"]  # the whole tree, absolute-outside included


def test_walk_stat_readlink(tmp):
    src = str(tmp / "src")
    made = make_tree(src)
    want = tree_entries(src)
    with mcfs_mount(src, str(tmp / "mnt"), opts=ANY) as m:
        a, b = os.stat(src), os.stat(m.path)
        assert (stat.S_IMODE(b.st_mode), b.st_mtime_ns) == (stat.S_IMODE(a.st_mode),
                                                            a.st_mtime_ns), "the root"
        got = tree_entries(m.path)
        assert sorted(got) == sorted(want), \
            "names differ: only in source %s, only in mount %s" % (
                sorted(set(want) - set(got))[:10], sorted(set(got) - set(want))[:10])
        for rel in want:
            assert got[rel] == want[rel], "%r: mount %s, source %s" % (rel, got[rel], want[rel])
        for rel in made:
            assert os.path.lexists(m.p(rel)), rel
        # file contents of a few odd names
        for rel in ("with space.bin", "café.txt", "emoji 🙂 file", "one-byte",
                    os.path.join("dir with space", "nested", "ü-file")):
            with open(os.path.join(src, rel), "rb") as a, open(m.p(rel), "rb") as b:
                assert a.read() == b.read(), rel
        # listing order is not promised, but its content is, in every directory
        for dirpath, dirnames, filenames in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            assert sorted(os.listdir(m.p(rel))) == sorted(dirnames + filenames), rel


def test_symlinks_are_symlinks(tmp):
    src = str(tmp / "src")
    make_tree(src)
    with mcfs_mount(src, str(tmp / "mnt")) as m:
        # by default the link that leaves the store is hidden, the others are shown
        assert not os.path.lexists(m.p("absolute-outside"))
        for rel, target in [("link-to-small", "small.txt"), ("link to dir", "dir with space"),
                            ("dangling", "no/such/target"),
                            ("link-é", "café.txt"), ("link-loop", "link-loop"),
                            (os.path.join("dir with space", "up-link"), "../small.txt")]:
            st = os.lstat(m.p(rel))
            assert stat.S_ISLNK(st.st_mode), "%s is not a symlink: %o" % (rel, st.st_mode)
            assert os.readlink(m.p(rel)) == target, rel
            assert st.st_size == len(os.fsencode(target)), rel
        # following a relative link stays inside the mount
        with open(m.p("link-to-small"), "rb") as f:
            assert f.read() == open(os.path.join(src, "small.txt"), "rb").read()
        assert sorted(os.listdir(m.p("link to dir"))) == sorted(
            os.listdir(os.path.join(src, "dir with space")))
        assert not os.path.exists(m.p("dangling"))
        try:
            os.stat(m.p("link-loop"))
            raise AssertionError("stat of a self-loop symlink succeeded")
        except OSError as e:
            assert e.errno == 40, e  # ELOOP


def test_find_and_ls_match(tmp):
    src = str(tmp / "src")
    make_tree(src)
    with mcfs_mount(src, str(tmp / "mnt"), opts=ANY) as m:
        fmt = r"%y %m %s %T@ %P -> %l\n"
        rc1, a, e1 = lines(["find", ".", "-printf", fmt], src)
        rc2, b, e2 = lines(["find", ".", "-printf", fmt], m.path)
        assert rc2 == rc1 == 0, (e1, e2)
        # directory sizes are filesystem-specific: compare them without %s
        strip = lambda ls: sorted(l if not l.startswith(b"d ") else b" ".join(
            l.split(b" ")[:2] + l.split(b" ")[3:]) for l in ls)
        assert strip(b) == strip(a), set(strip(a)) ^ set(strip(b))

        rc1, a, _ = lines(["ls", "-AR1"], src)
        rc2, b, _ = lines(["ls", "-AR1"], m.path)
        assert rc1 == rc2 == 0 and a == b

        # ls -l: mode, size, mtime, name, target; not link counts or owners
        def ls_l(cwd):
            rc, out, err = lines(["ls", "-lAR", "--time-style=+%s.%N"], cwd)
            assert rc == 0, err
            rows = []
            for l in out:
                f = l.split(None, 5)
                if len(f) < 6 or f[0] == b"total":
                    continue
                if f[0].startswith(b"d"):
                    f[4] = b"-"
                rows.append((f[0], f[4], f[5]))
            return sorted(rows)
        assert ls_l(m.path) == ls_l(src)

        if have("stat"):
            names = [os.path.join(src, "café.txt"), os.path.join(src, "exec.sh"),
                     os.path.join(src, "precise-mtime"), os.path.join(src, "link to dir")]
            fmt = "%F|%a|%s|%y|%N"
            a = subprocess.run(["stat", "-c", fmt] + names, capture_output=True, cwd=src)
            b = subprocess.run(["stat", "-c", fmt] + [m.p(os.path.relpath(n, src))
                                                     for n in names],
                               capture_output=True)
            assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
            norm = lambda out, root: out.replace(os.fsencode(root), b"ROOT")
            assert norm(a.stdout, src) == norm(b.stdout, m.path)


def test_statfs(tmp):
    src = str(tmp / "src")
    os.makedirs(os.path.join(src, "d"))
    with mcfs_mount(src, str(tmp / "mnt")) as m:
        sv = os.statvfs(m.path)
        assert sv.f_bsize > 0 and sv.f_blocks > 0, sv
        assert sv.f_namemax >= 255, sv
        assert subprocess.run(["df", m.path], capture_output=True).returncode == 0


def test_readdir_while_store_changes(tmp):
    """A listing in progress while the store's directory changes lists every
    unchanged entry exactly once (attr_ttl=0, so the store is asked again)."""
    src = tmp / "src"
    d = src / "big"
    d.mkdir()
    # long names: the listing takes many getdents calls (glibc reads 32 KiB at a time)
    names = ["keep-%04d-%s" % (i, "y" * (150 + i % 50)) for i in range(1000)]
    for n in names:
        (d / n).write_bytes(b"")
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=["attr_ttl=0", "negative_ttl=0"]) as m:
        seen = []
        with os.scandir(m.p("big")) as it:
            for i, e in enumerate(it):
                seen.append(e.name)
                if i == 40:
                    # add entries and remove some that were not listed yet
                    for k in range(200):
                        (d / ("new-%04d" % k)).write_bytes(b"")
                    unlisted = sorted(set(names) - set(seen))
                    for n in unlisted[::7]:
                        (d / n).unlink()
                        names.remove(n)
        dups = sorted(n for n in set(seen) if seen.count(n) > 1)
        assert not dups, "listed twice: %s" % dups[:10]
        missing = sorted(set(names) - set(seen))
        assert not missing, "%d unchanged entries skipped, e.g. %s" % (len(missing), missing[:5])
        assert sorted(os.listdir(m.p("big"))) == sorted(os.listdir(str(d)))


def test_cp_a_copy_equals_source(tmp):
    """`cp -a` out of the mount gives the source tree back (names, bytes, modes,
    mtimes, symlinks)."""
    src = str(tmp / "src")
    make_tree(src)
    dst = str(tmp / "copy")
    with mcfs_mount(src, str(tmp / "mnt"), opts=ANY) as m:
        r = subprocess.run(["cp", "-a", m.path + "/.", dst], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    a, b = tree_entries(src), tree_entries(dst)
    assert sorted(a) == sorted(b)
    for rel in a:
        assert a[rel] == b[rel], rel
    r = subprocess.run(["diff", "-r", "--no-dereference", src, dst], capture_output=True)
    assert r.returncode == 0, r.stdout[:2000]


def test_deep_nesting_and_odd_bytes(tmp):
    """200 levels of directories, and names with a newline, a backslash, a tab,
    a colon and '\\x01': found, listed and read like the source."""
    src = tmp / "src"
    deep = src
    for i in range(200):
        deep = deep / ("d%d" % (i % 10))
    deep.mkdir(parents=True)
    (deep / "bottom.bin").write_bytes(b"bottom")
    odd = ["new\nline", "back\\slash", "tab\there", "co:lon", "ctl\x01char", "q?*[]{}"]
    for i, n in enumerate(odd):
        (src / n).write_bytes(b"%d" % i)
    with mcfs_mount(str(src), str(tmp / "mnt")) as m:
        rel = os.path.relpath(str(deep / "bottom.bin"), str(src))
        assert open(m.p(rel), "rb").read() == b"bottom"
        assert os.listdir(m.p(os.path.dirname(rel))) == ["bottom.bin"]
        assert sorted(os.listdir(m.path)) == sorted(os.listdir(str(src)))
        for i, n in enumerate(odd):
            assert open(m.p(n), "rb").read() == b"%d" % i, repr(n)
            assert os.stat(m.p(n)).st_size == len(b"%d" % i)
        assert tree_entries(m.path) == tree_entries(str(src))
