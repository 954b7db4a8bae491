"""cache_dir (issue 5): each store has its own directory under it, so two
stores mounted one after the other on one cache_dir never see each other's
attributes, listings or blocks, and a store remounted finds its own again.
The built-in default is /var/cache/mcfs (mode 0700); an empty value, on the
command line or in a config file, means RAM only."""
import glob
import os
import re
import shutil

from conftest import mcfs_mount, need_root, run_mcfs
from disk_helpers import OPTS, settle
from gen import MiB, write_random

DEFAULT = "/var/cache/mcfs"


def make_store(root, seed, extra):
    """A store with the same names as its twin: a 3 MiB file (bytes differ, size and
    mtime the same), a small file whose size differs, and one name of its own."""
    os.makedirs(os.path.join(root, "model"))
    big = write_random(os.path.join(root, "model", "w.bin"), 3 * MiB + 100, seed=seed)
    small = write_random(os.path.join(root, "model", "config.json"), 10 + seed, seed=seed)
    with open(os.path.join(root, "model", extra), "w") as f:
        f.write(extra)
    for rel in ("model/w.bin", "model/config.json", "model/" + extra, "model"):
        os.utime(os.path.join(root, rel), ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    return big, small


def check_store(m, big, small, extra):
    assert sorted(os.listdir(m.p("model"))) == sorted(["w.bin", "config.json", extra])
    assert os.stat(m.p("model", "config.json")).st_size == len(small)
    with open(m.p("model", "config.json"), "rb") as f:
        assert f.read() == small
    with open(m.p("model", "w.bin"), "rb") as f:
        assert f.read() == big


def test_two_stores_one_cache_dir(tmp):
    a_big, a_small = make_store(str(tmp / "a"), 1, "only-a.txt")
    b_big, b_small = make_store(str(tmp / "b"), 2, "only-b.txt")
    assert len(a_big) == len(b_big) and a_big != b_big
    cache = str(tmp / "cache")
    opts = OPTS + ["cache_dir=" + cache]
    with mcfs_mount(str(tmp / "a"), str(tmp / "mnt"), opts=opts) as m:
        check_store(m, a_big, a_small, "only-a.txt")
        assert settle(m)["disk_writes"] >= 4
    with mcfs_mount(str(tmp / "b"), str(tmp / "mnt"), opts=opts) as m:
        check_store(m, b_big, b_small, "only-b.txt")  # never a's
        st = settle(m)
        assert st["disk_hits"] == 0 and st["store_reads"] >= 4, st
        log = m.log()
    stores = sorted(os.listdir(cache))
    assert len(stores) == 2 and all(s.startswith("posix-") for s in stores), stores
    b_dir = [s for s in stores if re.match(r"posix-.*_b-[0-9a-f]{16}$", s)]
    assert len(b_dir) == 1, stores
    assert "disk tier in %s/%s (" % (cache, b_dir[0]) in log, log
    assert all(os.stat(os.path.join(cache, s)).st_mode & 0o777 == 0o700 for s in stores)
    # a, remounted (as file://, with a trailing '/'), finds its own blocks again
    with mcfs_mount("file://%s/" % (tmp / "a"), str(tmp / "mnt"), opts=opts) as m:
        check_store(m, a_big, a_small, "only-a.txt")
        st = m.stats()
        assert st["store_reads"] == 0, st
        # from disk: through the cache, or complete files by passthrough
        assert st["disk_hits"] >= 4 or st["passthrough_opens"] >= 2, st
    assert sorted(os.listdir(cache)) == stores


def test_old_layout_is_reported(tmp):
    """blocks/ straight under cache_dir (mcfs before per-store directories) is named
    in a warning, and left alone."""
    data = write_random(str(tmp / "src" / "f.bin"), MiB + 1, seed=5)
    cache = tmp / "cache"
    (cache / "blocks").mkdir(parents=True)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=OPTS + ["cache_dir=%s" % cache]) as m:
        with open(m.p("f.bin"), "rb") as f:
            assert f.read() == data
        assert m.stats()["disk_state"] == 1
        assert "older mcfs" in m.log()
    assert (cache / "blocks").is_dir()


def test_default_cache_dir(tmp):
    """No cache_dir anywhere: the disk tier is in /var/cache/mcfs/posix-..."""
    need_root()
    data = write_random(str(tmp / "src" / "f.bin"), 2 * MiB + 3, seed=6)
    existed = os.path.isdir(DEFAULT)
    store = None
    try:
        with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=OPTS,
                        builtin_cache_dir=True) as m:
            with open(m.p("f.bin"), "rb") as f:
                assert f.read() == data
            assert settle(m)["disk_writes"] == 3
            log = m.log()
            found = re.findall(r"disk tier in (%s/posix-\S+) \(" % re.escape(DEFAULT), log)
            assert len(found) == 1, log
            store = found[0]
            assert os.path.dirname(store) == DEFAULT
            assert os.stat(store).st_mode & 0o777 == 0o700
            assert len(os.listdir(os.path.join(store, "blocks"))) == 1  # f.bin's version
            if not existed:
                assert os.stat(DEFAULT).st_mode & 0o777 == 0o700
    finally:
        if store and os.path.basename(store).startswith("posix-"):
            shutil.rmtree(store, ignore_errors=True)
        if not existed:
            try:
                os.rmdir(DEFAULT)  # only if the test made it and nothing else is there
            except OSError:
                pass


def test_empty_cache_dir_in_config_file_is_ram_only(tmp):
    data = write_random(str(tmp / "src" / "f.bin"), MiB + 7, seed=7)
    conf = tmp / "mcfs.conf"
    conf.write_text("[mcfs]\nblock_size = 1M\nram_cache = 64M\ncache_dir =\n")
    before = set(glob.glob(DEFAULT + "/*"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), extra_args=["-c", str(conf)]) as m:
        with open(m.p("f.bin"), "rb") as f:
            assert f.read() == data
        st = m.stats()
        assert st["disk_state"] == 0, st
        r = run_mcfs("status", m.path)
        assert r.returncode == 0 and "disk tier:  off" in r.stdout, r.stdout
        log = m.log()
    assert "disk tier in" not in log and "warning" not in log, log
    assert set(glob.glob(DEFAULT + "/*")) == before
