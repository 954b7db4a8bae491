"""A backing file that cannot be built is logged and counted once per file
version (issue 22, item 9).

The build is made to fail for good by putting a plain file where the store's
backing-file directory was (STORE_DIR/files): its temporary file cannot be
created (ENOTDIR). Every open of the complete version used to copy again,
fail again, and log another line, with no counter; now the first failure is
logged and counted in backing_build_errors, and later opens read through the
cache at once, with the right bytes. `mcfs evict` forgets the failure.
"""
import os

from conftest import mcfs_mount, run_mcfs
from disk_helpers import settle, store_dir
from gen import MiB, write_random
from test_passthrough import need_passthrough

SIZE = 3 * MiB + 4321


def read(m, rel):
    with open(m.p(rel), "rb") as f:
        return f.read()


def failure_lines(m, rel):
    return [ln for ln in m.log().splitlines() if "backing file for %s " % rel in ln]


def test_failed_build_logged_and_counted_once(tmp):
    need_passthrough()
    data = {rel: write_random(str(tmp / "src" / rel), SIZE + i, seed=90 + i)
            for i, rel in enumerate(("a.bin", "b.bin"))}
    opts = ["cache_dir=%s" % (tmp / "cache"), "block_size=1M", "ram_cache=64M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        files = os.path.join(store_dir(str(tmp / "cache")), "files")
        os.rmdir(files)
        with open(files, "w") as f:
            f.write("not a directory\n")
        for rel in data:  # the first open completes the file in the tiers
            assert read(m, rel) == data[rel]
        settle(m)
        for _ in range(4):  # each complete: the first of these tries a build
            for rel in data:
                assert read(m, rel) == data[rel]
        st = m.stats()
        assert st["backing_build_errors"] == 2, st
        assert st["backing_builds"] == 0 and st["passthrough_opens"] == 0, st
        for rel in data:
            lines = failure_lines(m, rel)
            assert len(lines) == 1, (rel, lines)
            assert "Not a directory" in lines[0], lines[0]
        r = run_mcfs("status", m.path)
        assert r.returncode == 0, r.stderr
        assert "2 FAILED to build" in r.stdout, r.stdout
        # mcfs evict forgets a.bin's failure: its next complete open tries again
        os.getxattr(m.p("a.bin"), "user.mcfs.evict")
        # The kernel's page cache may hold the file (a cold open's push puts it
        # there, cold_push): drop it, so that the reads reach the cache again.
        fd = os.open(m.p("a.bin"), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        assert read(m, "a.bin") == data["a.bin"]
        settle(m)
        assert read(m, "a.bin") == data["a.bin"]
        assert m.stats()["backing_build_errors"] == 3, m.stats()
        assert len(failure_lines(m, "a.bin")) == 2
        assert len(failure_lines(m, "b.bin")) == 1
