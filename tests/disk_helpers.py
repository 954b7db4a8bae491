"""Helpers shared by the disk-tier suites (issue 5): a tree of files worth
several blocks, its checksums, waiting for write-behind to settle, and a
cache filesystem of a test's own."""
import contextlib
import glob
import hashlib
import os
import subprocess
import time

import pytest

from conftest import need_root
from gen import MiB, write_random

# 1 MiB blocks keep the trees small while crossing many block boundaries.
OPTS = ["block_size=1M", "ram_cache=64M"]


def make_model_tree(root, n=6, size=3 * MiB + 12345, seed=50):
    """n files of `size` bytes (plus a few small ones) under root; returns {rel: sha256}."""
    sums = {}
    for i in range(n):
        rel = os.path.join("model", "shard-%02d.bin" % i)
        data = write_random(os.path.join(root, rel), size + i * 4099, seed=seed + i)
        sums[rel] = hashlib.sha256(data).hexdigest()
    for i, sz in enumerate((0, 1, 4097)):
        rel = os.path.join("cfg", "small-%d" % i)
        data = write_random(os.path.join(root, rel), sz, seed=seed + 100 + i)
        sums[rel] = hashlib.sha256(data).hexdigest()
    return sums


def tree_sums(root, rels):
    out = {}
    for rel in rels:
        h = hashlib.sha256()
        with open(os.path.join(root, rel), "rb") as f:
            while True:
                b = f.read(4 * MiB)
                if not b:
                    break
                h.update(b)
        out[rel] = h.hexdigest()
    return out


def settle(m, timeout=20):
    """Waits until write-behind has nothing queued; returns the stats."""
    deadline = time.time() + timeout
    while True:
        st = m.stats()
        if st["disk_queued"] == 0 and st["inflight"] == 0 and st["disk_owed"] == 0:
            return st
        if time.time() > deadline:
            raise AssertionError("write-behind did not settle: %s" % st)
        time.sleep(0.05)


def store_dir(cache):
    """The one store's directory under cache_dir (cache/KIND-SLUG-HASH)."""
    dirs = glob.glob(os.path.join(glob.escape(cache), "*", "blocks"))
    assert len(dirs) == 1, "stores under %s: %s" % (cache, dirs)
    return os.path.dirname(dirs[0])


def version_files(cache):
    """The disk tier's files: one sparse file per file version, each block at
    its own offset (STORE_DIR/blocks/<path and version hashes>)."""
    blocks = os.path.join(store_dir(cache), "blocks")
    return sorted(os.path.join(blocks, n) for n in os.listdir(blocks))


def allocated(root):
    """Bytes allocated on disk (st_blocks * 512) by every file under root. A file
    the daemon removed between the listing and its lstat (an evicted version
    file) holds none."""
    total = 0
    for d, _, names in os.walk(root):
        for n in names:
            try:
                st = os.lstat(os.path.join(d, n))
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
    return total


def drop_page_cache():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


@contextlib.contextmanager
def loop_fs(tmp, size_mib=256):
    """An ext4 filesystem on a loop device, mounted at tmp/cachefs: a cache
    filesystem of the test's own, which no other process fills or freezes."""
    need_root()
    img, mnt = str(tmp / "cache.img"), str(tmp / "cachefs")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(size_mib * MiB)
    for cmd in (["mkfs.ext4", "-q", "-F", img], ["mount", "-o", "loop", img, mnt]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            pytest.skip("%s is not installed: no loop-mounted cache filesystem" % cmd[0])
        if r.returncode != 0:
            pytest.skip("%s failed (%s): no loop-mounted cache filesystem"
                        % (" ".join(cmd[:3]), r.stderr.strip()))
    try:
        yield mnt
    finally:
        subprocess.run(["fsfreeze", "-u", mnt], capture_output=True)
        subprocess.run(["umount", mnt], check=True)
