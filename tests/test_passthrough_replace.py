"""A file replaced in the store while open with passthrough (issue 14): the
next open serves the new bytes, never a mix, and the open files keep the old.

The kernel holds one backing file per inode and refuses any other open of an
inode that has passthrough opens, so the new version gets a new inode number
(`inode_renumbers`): the old inode keeps its opens, which read the old version
whole from its backing file, until the kernel forgets it and mcfs frees it
(`inodes_retired` back to 0). With attr_ttl=3600 (the default) the kernel's
dentry is still fresh when the file is replaced: the open reaches the old
inode, which answers ESTALE, and the VFS looks the name up again. With
attr_ttl=0 the LOOKUP itself finds the new version.

A read proves passthrough when the daemon's fuse_reads does not move during
it after the page cache was dropped: every byte came from a backing file.
"""
import mmap
import os

import pytest

from conftest import mcfs_mount, need_root, run_mcfs, wait_for
from disk_helpers import settle
from gen import MiB, drop_caches, rand_bytes
from test_passthrough import need_passthrough as need_passthrough_build, opts, read_all

SIZE_A = 10 * MiB + 12345
SIZE_B = 13 * MiB + 777   # another size: a mix would show at either end
SIZE_C = 7 * MiB + 4321   # smaller


def need_passthrough():
    need_passthrough_build("no passthrough open can hold the old version")


def replace(src, name, data):
    """Replaces src/name with `data` the way a model store does: a new file renamed over."""
    tmp = src / (".new-" + name)
    tmp.write_bytes(data)
    os.replace(str(tmp), str(src / name))


def whole(f, want, what, mapped=True):
    """Reads open file `f` from its start, with read() and (`mapped`) through mmap."""
    f.seek(0)
    got = f.read()
    assert len(got) == len(want) and got == want, "%s: read() gave %d bytes, not the %d "\
        "of its version%s" % (what, len(got), len(want), "" if got[:MiB] == want[:MiB]
                              else " (its first MiB differs)")
    if not mapped:
        return
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert len(mm) == len(want), "%s: mmap of %d bytes, not %d" % (what, len(mm), len(want))
        assert mm[:] == want, "%s: mmap bytes differ" % what


@pytest.mark.parametrize("ttl", ["3600", "0"])
def test_replaced_while_open_with_passthrough(tmp, ttl):
    need_passthrough()
    src = tmp / "src"
    a, b = rand_bytes(SIZE_A, 1401), rand_bytes(SIZE_B, 1402)
    (src / "m.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"),
                    opts=opts(tmp, "attr_ttl=%s" % ttl, "negative_ttl=%s" % ttl)) as m:
        p = m.p("m.bin")
        assert read_all(p) == a   # through the cache: now complete
        settle(m)
        assert os.listdir(m.path) == ["m.bin"]   # a listing that names a's inode
        old = open(p, "rb")
        try:
            st = m.stats()
            assert st["passthrough_opens"] == 1, st   # the old version, on its backing file
            ino_a = os.fstat(old.fileno()).st_ino
            replace(src, "m.bin", b)

            # the next open: the new version, whole, on a new inode
            new = open(p, "rb")
            try:
                st = m.stats()
                assert st["inode_renumbers"] == 1 and st["inodes_retired"] == 1, st
                assert st["passthrough_opens"] == 1, st   # b is not complete: through the cache
                ino_new = os.fstat(new.fileno()).st_ino
                assert ino_new != ino_a
                assert os.fstat(new.fileno()).st_size == SIZE_B
                assert os.stat(p).st_size == SIZE_B
                # a listing read again (readdirplus) names the new inode, not a's
                assert os.listdir(m.path) == ["m.bin"]
                st_p = os.stat(p)
                assert (st_p.st_ino, st_p.st_size) == (ino_new, SIZE_B)
                assert "changed in the store while open with passthrough" in m.log()
                r = run_mcfs("status", m.path)
                assert r.returncode == 0, r.stderr
                assert "renumbered: 1 files replaced in the store while open with " \
                    "passthrough (new inode numbers); 1 old inodes still held" in r.stdout, r.stdout
                whole(new, b, "new open")
            finally:
                new.close()

            # the old open reads the old version to its end, from its backing file
            assert os.fstat(old.fileno()).st_ino == ino_a
            assert os.fstat(old.fileno()).st_size == SIZE_A
            drop_caches()
            before = m.stats()["fuse_reads"]
            whole(old, a, "old open")
            assert m.stats()["fuse_reads"] == before, "the old open's reads reached the daemon"

            # b complete: an open of it is passthrough too, on its own backing file,
            # while the old inode still holds a's
            settle(m)
            new = open(p, "rb")
            try:
                st = m.stats()
                assert st["passthrough_opens"] == 2 and st["backing_builds"] == 2, st
                assert st["backing_files"] == 2, st
                drop_caches()
                before = m.stats()["fuse_reads"]
                whole(new, b, "passthrough open of the new version")
                whole(old, a, "old open, beside it")
                assert m.stats()["fuse_reads"] == before, "passthrough reads reached the daemon"
                ino_b = os.fstat(new.fileno()).st_ino
            finally:
                new.close()
        finally:
            old.close()

        # all closed: the kernel forgets the old inode (drop_caches evicts it) and
        # mcfs frees it; the name keeps the new inode
        drop_caches()
        assert wait_for(lambda: m.stats()["inodes_retired"] == 0, timeout=20), m.stats()
        with open(p, "rb") as f:
            assert os.fstat(f.fileno()).st_ino == ino_b
            whole(f, b, "open after the old inode was freed")
        st = m.stats()
        assert st["passthrough_opens"] == 3 and st["inode_renumbers"] == 1, st
        assert m.proc.poll() is None, m.log()


def test_replaced_twice_while_open(tmp):
    """Two replacements, each while the version before is open with passthrough:
    three inodes at once, each reading its own version."""
    need_passthrough()
    src = tmp / "src"
    vs = [rand_bytes(SIZE_A, 1403), rand_bytes(SIZE_B, 1404), rand_bytes(3 * MiB + 5, 1405)]
    (src / "m.bin").write_bytes(vs[0])
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=opts(tmp)) as m:
        p = m.p("m.bin")
        files = []
        try:
            for i, v in enumerate(vs):
                if i:
                    replace(src, "m.bin", v)
                assert read_all(p) == v, "version %d" % i   # new inode; completes v
                settle(m)
                files.append(open(p, "rb"))
                assert m.stats()["passthrough_opens"] == i + 1, m.stats()
            assert len({os.fstat(f.fileno()).st_ino for f in files}) == 3
            st = m.stats()
            assert st["inode_renumbers"] == 2 and st["inodes_retired"] == 2, st
            drop_caches()
            for i, (f, v) in enumerate(zip(files, vs)):
                whole(f, v, "open of version %d" % i)
        finally:
            for f in files:
                f.close()
        drop_caches()
        assert wait_for(lambda: m.stats()["inodes_retired"] == 0, timeout=20), m.stats()
        assert read_all(p) == vs[2]


def test_replaced_while_open_without_passthrough(tmp):
    """passthrough=off: the same as with it. The new version gets a new inode
    while the old one's page-cache opens last (one inode's page cache holds one
    version's pages), and its opens may mmap it; the old open keeps its inode,
    its size and its bytes. The new version is larger: the old open, whose
    inode keeps the old size, never reads past its own end."""
    need_root()
    src = tmp / "src"
    a, b = rand_bytes(SIZE_A, 1406), rand_bytes(SIZE_B, 1407)
    (src / "m.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"), opts=opts(tmp, "passthrough=off")) as m:
        p = m.p("m.bin")
        assert read_all(p) == a   # a's blocks are cached: the store no longer has them
        settle(m)
        old = open(p, "rb")
        try:
            ino = os.fstat(old.fileno()).st_ino
            replace(src, "m.bin", b)
            with open(p, "rb") as new:
                assert os.fstat(new.fileno()).st_ino != ino
                whole(new, b, "new open")
            whole(old, a, "old open")
            assert os.fstat(old.fileno()).st_size == SIZE_A
            st = m.stats()
            assert st["passthrough_opens"] == 0 and st["inode_renumbers"] == 1, st
        finally:
            old.close()
        assert read_all(p) == b
        drop_caches()  # the kernel forgets the old inode: mcfs frees its node
        assert wait_for(lambda: m.stats()["inodes_retired"] == 0), m.stats()


def test_removed_while_open_with_passthrough(tmp):
    """Removed from the store: the open file keeps its version and its attributes
    (as an unlinked local file does), the name is gone; a file put back under the
    name opens on a new inode."""
    need_passthrough()
    src = tmp / "src"
    a, c = rand_bytes(SIZE_A, 1408), rand_bytes(SIZE_B, 1409)
    (src / "m.bin").write_bytes(a)
    with mcfs_mount(str(src), str(tmp / "mnt"),
                    opts=opts(tmp, "attr_ttl=0", "negative_ttl=0")) as m:
        p = m.p("m.bin")
        assert read_all(p) == a
        settle(m)
        old = open(p, "rb")
        try:
            assert m.stats()["passthrough_opens"] == 1, m.stats()
            ino_a = os.fstat(old.fileno()).st_ino
            os.unlink(str(src / "m.bin"))
            with pytest.raises(FileNotFoundError):
                open(p, "rb")
            st = os.fstat(old.fileno())   # a GETATTR (attr_ttl=0) of the old inode
            assert (st.st_ino, st.st_size) == (ino_a, SIZE_A)
            drop_caches()
            whole(old, a, "open of the removed file")
            replace(src, "m.bin", c)
            with open(p, "rb") as new:
                assert os.fstat(new.fileno()).st_ino != ino_a
                whole(new, c, "open of the file put back")
            whole(old, a, "open of the removed file, after")
        finally:
            old.close()
        drop_caches()
        assert wait_for(lambda: m.stats()["inodes_retired"] == 0, timeout=20), m.stats()
