"""cold_whole (issue 23): an open of a file the disk tier does not hold whole
fetches it whole first, then the kernel reads it from its version file
(passthrough), with no FUSE READ; with cold_whole=model the other files of its
directory with its suffix (a checkpoint's shards) are fetched whole in the
background, so that their own opens wait for nothing.

Each test reads with the page cache dropped first and checks the bytes against
the store's, and the daemon's counters: whole_opens, whole_background,
whole_fallbacks, passthrough_opens and fuse_reads.
"""
import contextlib
import fcntl
import hashlib
import mmap
import os
import threading

import pytest

from conftest import fd_links, mcfs_mount, wait_for
from faultproxy import FaultProxy
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
        # where the one whole fetch spent its time: its waits lie within the fill
        fill = st["whole_fill_ns"] - before["whole_fill_ns"]
        waits = (st["whole_settle_ns"] + st["whole_pay_ns"]
                 - before["whole_settle_ns"] - before["whole_pay_ns"])
        assert 0 < waits <= fill, st
        assert st["fetch_busy_ns"] > before["fetch_busy_ns"], st
        assert st["whole_fetch_idle_ns"] - before["whole_fetch_idle_ns"] <= 16 * fill, st


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


def test_an_open_beside_one_through_the_page_cache_does_not_wait_for_the_whole_file(tmp):
    """The kernel switches only an inode's only open to passthrough: while an
    O_NONBLOCK open (a client's) reads the file through the cache, a loader's
    open of it could not switch, so it reads through the cache at once instead
    of waiting for a whole fetch that would change nothing (safetensors opens a
    shard twice with torch, and the second open found the first one there)."""
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=235)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=file")) as m:
        drop_caches()
        fd = os.open(m.p("m.bin"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.pread(fd, 4096, 0) == data[:4096]
            got = mmap_read(m.p("m.bin"))
        finally:
            os.close(fd)
        st = m.stats()
        assert sha(got) == sha(data)
        assert st["whole_opens"] == 0 and st["whole_fallbacks"] == 0, st
        assert st["passthrough_opens"] == 0 and st["passthrough_fallbacks"] == 0, st
        assert st["fuse_reads"] > 0, st
        # alone again: the next open (the file read whole by now) switches
        before = st
        drop_caches()
        assert sha(mmap_read(m.p("m.bin"))) == sha(data)
        st = m.stats()
        assert st["passthrough_opens"] == 1, st
        assert st["fuse_reads"] == before["fuse_reads"], st


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


def in_openat(t):
    """True while thread @t is inside openat(2) (x86-64's 257; aarch64's 56)."""
    try:
        with open("/proc/self/task/%d/syscall" % t.native_id) as f:
            return f.read().split()[0] in ("257", "56")
    except (OSError, IndexError):
        return False


class HeldOpens:
    """nginx behind the fault proxy, whose GETs of the files @names wait until
    release(), and a mount of it with cold_whole=file (and @more options). open(name)
    starts a thread that mmaps the file and keeps its sha in got[key]; waiting() is
    true once the GETs of every held file came and each thread sits in openat(2)."""

    def __init__(self, tmp, names, *more):
        self.tmp, self.names, self.more = tmp, names, more
        self.release, self.held, self.got, self.threads = threading.Event(), set(), {}, []

    def _hold(self, method, path, head):
        name = path.lstrip("/").split("?")[0]
        if method == "GET" and name in self.names and not self.release.is_set():
            self.held.add(name)
            self.release.wait(60)
        return None

    def __enter__(self):
        self.stack = contextlib.ExitStack()
        try:
            ng = self.stack.enter_context(
                Nginx(str(self.tmp / "src"), workdir=str(self.tmp / "nginx")))
            px = self.stack.enter_context(FaultProxy(ng.port))
            px.answer = self._hold
            self.stack.callback(self.end)  # before the proxy stops: no GET left held
            self.m = self.stack.enter_context(mcfs_mount(
                px.url, str(self.tmp / "mnt"), opts=opts(self.tmp, "cold_whole=file",
                                                         *self.more)))
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc):
        self.stack.close()

    def open(self, name, key=None):
        t = threading.Thread(target=lambda: self.got.__setitem__(
            name if key is None else key, sha(mmap_read(self.m.p(name)))))
        t.start()
        self.threads.append(t)
        return t

    def waiting(self):
        return self.held == set(self.names) and all(in_openat(t) for t in self.threads)

    def end(self):
        self.release.set()
        for t in self.threads:
            t.join(60)


def test_two_opens_of_one_cold_file_at_once_both_switch_to_passthrough(tmp):
    """vLLM's prefetch pattern opens each shard in a prefetch thread while its loop
    opens the same shard: both opens wait for the one whole fetch, and both must then
    read through passthrough. The kernel lets an inode switch only while no cached open
    holds it, and the two opens used to count each other as one: neither switched, and
    both read through FUSE."""
    need_passthrough()
    if not have_nginx():
        pytest.skip("nginx is not installed")
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=236)
    with HeldOpens(tmp, ["m.bin"]) as h:
        assert os.stat(h.m.p("m.bin")).st_size == SIZE
        h.open("m.bin", 0)
        h.open("m.bin", 1)
        assert wait_for(h.waiting, 10), "the two opens did not both wait: %s" % h.held
        h.end()
        st = h.m.stats()
        assert h.got == {0: sha(data), 1: sha(data)}, h.got
        assert st["whole_opens"] == 2, st
        assert st["passthrough_opens"] == 2, st
        assert st["passthrough_fallbacks"] == 0, st
        assert st["fuse_reads"] == 0, st
        assert st["store_bytes"] == SIZE, st


def test_opens_waiting_for_their_whole_fetch_hold_no_fuse_worker(tmp):
    """A whole fetch takes seconds for a large shard. The opens waiting for theirs
    used to wait in FUSE workers: with as many of them as max_threads, every other
    request of the mount (a listing, a read of another file) waited for a fetch. Two
    opens held with max_threads=2: a third file is listed, opened and read meanwhile."""
    need_passthrough()
    if not have_nginx():
        pytest.skip("nginx is not installed")
    datas = {n: write_random(str(tmp / "src" / n), SIZE + i * 4096, seed=237 + i)
             for i, n in enumerate(("a.bin", "b.bin", "c.bin"))}
    with HeldOpens(tmp, ["a.bin", "b.bin"], "max_threads=2") as h:
        for n in ("a.bin", "b.bin"):
            assert os.stat(h.m.p(n)).st_size == len(datas[n])
            h.open(n)
        assert wait_for(h.waiting, 10), "the two opens did not both wait: %s" % h.held
        third = threading.Thread(target=lambda: h.got.__setitem__(
            "c.bin", (sorted(os.listdir(h.m.p(""))), sha(mmap_read(h.m.p("c.bin"))))))
        third.start()
        third.join(30)
        done = not third.is_alive()
        h.end()
        third.join(60)
        assert done, "a listing and a read of c.bin waited for the held fetches"
        assert h.got["c.bin"] == (["a.bin", "b.bin", "c.bin"], sha(datas["c.bin"]))
        assert h.got["a.bin"] == sha(datas["a.bin"]), h.got
        assert h.got["b.bin"] == sha(datas["b.bin"]), h.got
        st = h.m.stats()
        assert st["whole_opens"] == 3 and st["passthrough_opens"] == 3, st
        assert st["fuse_reads"] == 0, st


def test_whole_mem_answers_the_open_from_a_copy_in_memory_and_fills_its_file_behind(tmp):
    """whole_mem: the open that waits gets a sealed copy of its file in memory,
    read through passthrough (no FUSE READ); the copy goes at the last close, and
    the file's version file fills behind, so that the next open reads that, and
    the store is read once."""
    need_passthrough()
    names = ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
    src = tmp / "src" / "llm"
    datas = [write_random(str(src / n), SIZE + i * 4096, seed=270 + i)
             for i, n in enumerate(names)]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model", "whole_mem=16M")) as m:
        drop_caches()
        with open(m.p("llm/" + names[0]), "rb") as f, \
                mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            st = m.stats()
            assert st["whole_mem_opens"] == 1 and st["whole_opens"] == 0, st
            assert st["whole_mem_bytes"] == len(datas[0]), st  # held while open
            assert sha(bytes(mm)) == sha(datas[0])
            # the copy: a nameless file on the daemon's own tmpfs (huge pages), or
            # a memfd where it may not mount one (the log says which)
            links = fd_links(st["pid"])
            memfds = [ln for ln in links if ln.startswith("/memfd:mcfs-whole-")]
            no_tmpfs = "no tmpfs of our own" in m.log()
            assert len(memfds) == (1 if no_tmpfs else 0), (links, no_tmpfs)
        assert wait_for(lambda: m.stats()["whole_mem_bytes"] == 0, timeout=60), \
            "the copy outlived its last close: %s" % m.stats()
        assert wait_for(lambda: m.stats()["whole_background"] == 2, timeout=60), m.stats()
        st0 = m.stats()
        assert st0["passthrough_opens"] == 1 and st0["fuse_reads"] == 0, st0
        drop_caches()
        for n, d in zip(names, datas):
            assert sha(mmap_read(m.p("llm/" + n))) == sha(d), n
        st = m.stats()
        # every open after the copy's found its file whole in cache_dir
        assert st["passthrough_opens"] == 4 and st["whole_mem_opens"] == 1, st
        assert st["whole_opens"] == 0 and st["fuse_reads"] == 0, st
        assert st["backing_files"] == 3, st
        assert st["store_bytes"] == sum(len(d) for d in datas), st


def test_whole_mem_a_file_larger_than_it_waits_for_its_version_file(tmp):
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=275)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model", "whole_mem=4M")) as m:
        drop_caches()
        assert sha(mmap_read(m.p("m.bin"))) == sha(data)
        st = m.stats()
        assert st["whole_mem_opens"] == 0 and st["whole_opens"] == 1, st
        assert st["passthrough_opens"] == 1 and st["fuse_reads"] == 0, st
        assert st["whole_mem_bytes"] == 0, st


@pytest.mark.parametrize("blocks, copied", [(1, True), (4, False)])
def test_whole_mem_no_copy_of_a_file_half_on_disk_already(tmp, blocks, copied):
    """A file the disk tier holds half of (here: 4 of its 7 blocks, read first
    through the cache by an O_NONBLOCK open) gets no copy in memory: its open
    waits for its version file, nearer whole than a copy that would read those
    blocks back. With 1 block of 7 on disk the open gets its copy."""
    need_passthrough()
    data = write_random(str(tmp / "src" / "m.bin"), SIZE, seed=276)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=opts(tmp, "cold_whole=model", "whole_mem=16M", "readahead_max=0",
                              "read_ahead_kb=128")) as m:
        fd = os.open(m.p("m.bin"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.pread(fd, blocks * MiB, 0) == data[:blocks * MiB]
        finally:
            os.close(fd)
        assert wait_for(lambda: m.stats()["disk_indexed"] >= blocks, timeout=30), m.stats()
        st0 = m.stats()
        assert st0["disk_indexed"] == blocks and st0["whole_opens"] == 0, st0
        drop_caches()
        assert sha(mmap_read(m.p("m.bin"))) == sha(data)
        st = m.stats()
        assert st["whole_mem_opens"] == (1 if copied else 0), st
        assert st["whole_opens"] == (0 if copied else 1), st
        # the mapping read the copy or the version file: no READ past the pread's
        assert st["passthrough_opens"] == 1 and st["fuse_reads"] == st0["fuse_reads"], st
        assert st["store_bytes"] == SIZE, st  # every block from the store once
