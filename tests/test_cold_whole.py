"""cold_whole (issue 23): an open of a file the disk tier does not hold whole
fetches it whole first, then the kernel reads it from its version file
(passthrough), with no FUSE READ; with cold_whole=model the other files of its
directory with its suffix (a checkpoint's shards) are fetched whole in the
background, so that their own opens wait for nothing.

Each test reads with the page cache dropped first and checks the bytes against
the store's, and the daemon's counters: whole_opens, whole_background,
whole_fallbacks, passthrough_opens and fuse_reads.
"""
import fcntl
import hashlib
import mmap
import os

import pytest

from conftest import mcfs_mount, wait_for
from servers import Nginx, have_nginx
from gen import MiB, drop_caches, write_random
from test_passthrough import need_passthrough

SIZE = 6 * MiB + 4321


def opts(tmp, *more):
    return ["cache_dir=%s" % (tmp / "cache"), "block_size=1M", "ram_cache=64M",
            "disk_cache=256M", *more]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def mmap_read(path):
    """Reads a file as safetensors does: through a shared read-only mapping."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        return bytes(mm)


def test_a_cold_open_fetches_the_file_whole_then_reads_through_passthrough(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=231)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=file")) as m:
        drop_caches()
        before = m.stats()
        got = mmap_read(m.p("m.bin"))
        st = m.stats()
        assert sha(got) == sha(data)
        assert st["whole_opens"] - before["whole_opens"] == 1, st
        assert st["passthrough_opens"] - before["passthrough_opens"] == 1, st
        # every byte came from the version file: the daemon answered no READ
        assert st["fuse_reads"] == before["fuse_reads"], st
        assert st["store_bytes"] == SIZE, st
        assert st["whole_background"] == 0, st  # cold_whole=file: no siblings


def test_model_fetches_the_other_shards_in_the_background(tmp):
    need_passthrough()
    names = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
    src = tmp / "src" / "llm"
    datas = [write_random(str(src / n), SIZE + i * 4096, seed=240 + i)
             for i, n in enumerate(names)]
    write_random(str(src / "notes.txt"), 3 * MiB, seed=249)  # another suffix: left alone
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model")) as m:
        drop_caches()
        assert sha(mmap_read(m.p("llm/" + names[0]))) == sha(datas[0])
        assert wait_for(lambda: m.stats()["whole_background"] == 2, timeout=60), \
            "the other two shards were not fetched whole: %s" % m.stats()
        st0 = m.stats()
        assert st0["whole_opens"] == 1, st0
        for n, d in zip(names[1:], datas[1:]):
            assert sha(mmap_read(m.p("llm/" + n))) == sha(d)
        st = m.stats()
        # the later opens found their files whole: passthrough, nothing fetched
        assert st["passthrough_opens"] - st0["passthrough_opens"] == 2, st
        assert st["fuse_reads"] == st0["fuse_reads"], st
        assert st["store_bytes"] == st0["store_bytes"], st
        assert st["whole_opens"] == 1, st
        assert st["store_bytes"] == sum(len(d) for d in datas), st  # not notes.txt


def test_model_shards_follow_after_the_json_files_a_server_reads_first(tmp):
    """vLLM and SGLang read config.json, the tokenizer's files and the shard index
    before the first shard: those opens queue the directory's other .json files, and
    must not keep the shards' own open from queueing the other shards."""
    need_passthrough()
    names = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
    src = tmp / "src" / "llm"
    datas = [write_random(str(src / n), SIZE + i * 4096, seed=250 + i)
             for i, n in enumerate(names)]
    jsons = ["config.json", "model.safetensors.index.json", "tokenizer.json"]
    jdatas = [write_random(str(src / n), 4096 + i, seed=260 + i) for i, n in enumerate(jsons)]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model")) as m:
        drop_caches()
        with open(m.p("llm/config.json"), "rb") as f:
            assert f.read() == jdatas[0]
        # the other two .json files, then the first shard's: 4 in the background
        assert sha(mmap_read(m.p("llm/" + names[0]))) == sha(datas[0])
        assert wait_for(lambda: m.stats()["whole_background"] == 4, timeout=60), \
            "the other shards were not fetched whole after config.json: %s" % m.stats()
        st0 = m.stats()
        assert st0["whole_opens"] == 2, st0
        for n, d in zip(jsons[1:] + names[1:], jdatas[1:] + datas[1:]):
            assert sha(mmap_read(m.p("llm/" + n))) == sha(d), n
        st = m.stats()
        assert st["passthrough_opens"] - st0["passthrough_opens"] == 4, st
        assert st["fuse_reads"] == st0["fuse_reads"], st
        assert st["store_bytes"] == st0["store_bytes"], st
        assert st["store_bytes"] == sum(map(len, datas + jdatas)), st


def test_an_open_with_o_nonblock_does_not_wait_for_the_whole_file(tmp):
    """The mcfs clients (libmcfs, the Python package, `mcfs prefetch`) open with
    O_NONBLOCK: they read through the RAM tier's ioctls, and a part of a file
    stays a part."""
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=232)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model", "readahead_max=0",
                                   "read_ahead_kb=128")) as m:
        fd = os.open(m.p("m.bin"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
            assert os.pread(fd, 4096, 0) == data[:4096]
        finally:
            os.close(fd)
        st = m.stats()
        assert st["whole_opens"] == 0 and st["passthrough_opens"] == 0, st
        assert st["store_bytes"] <= 2 * MiB, st  # a block or two, not the file


def test_a_file_larger_than_half_the_disk_tier_reads_through_the_cache(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "big.bin"), 20 * MiB, seed=233)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model", "disk_cache=32M")) as m:
        drop_caches()
        assert sha(mmap_read(m.p("big.bin"))) == sha(data)
        st = m.stats()
        assert st["whole_opens"] == 0 and st["passthrough_opens"] == 0, st
        assert st["fuse_reads"] > 0, st


def test_off_the_default_keeps_cold_opens_as_they_were(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=234)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts(tmp)) as m:
        drop_caches()
        assert sha(mmap_read(m.p("m.bin"))) == sha(data)
        st = m.stats()
        assert st["whole_opens"] == 0 and st["passthrough_opens"] == 0, st
        assert st["fuse_reads"] > 0, st


def test_http_a_listed_file_is_fetched_in_the_version_its_open_confirms(tmp):
    """An http listing's version (mtime and size) is not the version a HEAD
    gives (the ETag): the whole fetch takes the open's, so the open finds it
    whole and is passthrough, and the bytes are fetched once. Before, a
    listing before the open made the whole fetch fetch the listing's version:
    no passthrough, and every byte fetched twice."""
    need_passthrough()
    if not have_nginx():
        pytest.skip("nginx is not installed")
    names = ["model-%05d-of-00002.safetensors" % i for i in (1, 2)]
    src = tmp / "src"
    datas = [write_random(str(src / n), SIZE + i * 8192, seed=250 + i)
             for i, n in enumerate(names)]
    with Nginx(str(src), workdir=str(tmp / "nginx")) as ng, \
            mcfs_mount(ng.url, str(tmp / "mnt"), opts=opts(tmp, "cold_whole=model")) as m:
        assert sorted(os.listdir(m.p(""))) == names  # the listing first
        assert sha(mmap_read(m.p(names[0]))) == sha(datas[0])
        assert wait_for(lambda: m.stats()["whole_background"] == 1, timeout=60), m.stats()
        assert sha(mmap_read(m.p(names[1]))) == sha(datas[1])
        st = m.stats()
        assert st["whole_opens"] == 1 and st["passthrough_opens"] == 2, st
        assert st["fuse_reads"] == 0, st
        assert st["store_bytes"] == sum(len(d) for d in datas), st
