"""A long-lived daemon under a churning store keeps bounded state (issue 22, item 4).

A million distinct names are looked up through the mount, each a miss (the
store has no such file: the cheapest request that still makes the daemon
record an answer, in its inode table and in LMDB), with a 1 MiB metadata map
(meta_map_size), while files are read through the mount. Before, every name
kept a node for good (the `inodes` counter grew by one per name), and the map
filled after a few thousand names: LMDB's MDB_MAP_FULL became ENOSPC, and the
disk tier went off with "no space left on the cache filesystem".

Checked, exactly: the inode table stops growing once its idle nodes reach
their bound; the metadata store keeps its records under half its map by
dropping old generations of attributes (meta_prunes > 0), and never fails a
write; the disk tier stays on and its index keeps every block across a
restart (a second mount reads every block from disk, none from the store);
file identities are freed with their last block in the RAM tier; every byte
read matches the store.

Sanitizer builds (tests/run.sh in CI) look up 100 000 names instead: the same
assertions, exact either way, since the bounds are reached after 50 000.
"""
import os
import subprocess

from conftest import MCFS, mcfs_mount
from disk_helpers import settle
from gen import MiB, pread_direct, rss_kib, sanitized, write_random

NAMES = 1_000_000
NAMES_SANITIZED = 100_000
# More than the idle nodes the inode table keeps (IDLE_NODES, fs/inode_table.c):
# after this many misses the table is in its steady state.
WARM = 50_000
IDLE_NODES = 16384  # FS_IDLE_NODES
FILES = 24  # of 2 blocks each (1 MiB blocks): 48 blocks, the RAM tier holds 8


def miss(neg, lo, hi):
    for i in range(lo, hi):
        try:
            os.stat("%s/n%07d" % (neg, i))
        except FileNotFoundError:
            continue
        raise AssertionError("%s/n%07d exists" % (neg, i))


def read_all(m, want):
    for rel, data in sorted(want.items()):
        got = pread_direct(m.p(rel), 0, len(data) + 4096)
        assert got == data, "%s: %d bytes read, differ from the store's" % (rel, len(got))


def test_million_names_bounded_state(tmp):
    src, cache = str(tmp / "src"), str(tmp / "cache")
    os.makedirs(os.path.join(src, "neg"))
    want = {}
    for i in range(FILES):
        rel = os.path.join("data", "f%02d" % i)
        want[rel] = write_random(os.path.join(src, rel), MiB + 500_000 + i * 4099, seed=220 + i)
    # passthrough=off and O_DIRECT reads: every read reaches the daemon's tiers
    opts = ["cache_dir=" + cache, "meta_map_size=1M", "block_size=1M", "ram_cache=8M",
            "ram_prefault=false", "disk_cache=256M", "passthrough=off"]
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        pid = m.proc.pid
        san = sanitized(pid)  # ASan and TSan: more memory, and slower
        names = NAMES_SANITIZED if san else NAMES
        neg = m.p("neg")  # never listed: a fresh listing would answer misses itself
        rels = sorted(want)
        read_all(m, {rel: want[rel] for rel in rels[:FILES // 2]})
        for rel in rels:  # looked up: the kernel holds every file's inode from here on
            os.stat(m.p(rel))
        miss(neg, 0, WARM)
        st_a, rss_a = m.stats(), rss_kib(pid)
        # the other half's blocks go to disk among the misses, the map in use
        later = rels[FILES // 2:]
        step = (names - WARM) // len(later)
        for k, rel in enumerate(later):
            miss(neg, WARM + k * step, names if k == len(later) - 1 else WARM + (k + 1) * step)
            read_all(m, {rel: want[rel]})
        st_b, rss_b = m.stats(), rss_kib(pid)
        read_all(m, want)
        st = settle(m)
        status = subprocess.run([MCFS, "status", m.path], capture_output=True, text=True).stdout
        log = m.log()
    print("%d names; inodes %d -> %d, daemon RSS %d -> %d KiB; metadata %d of %d bytes, "
          "%d prunes; file identities %d; disk_state %d, %d blocks written" % (
              names, st_a["inodes"], st_b["inodes"], rss_a, rss_b, st["meta_used_bytes"],
              st["meta_map_bytes"], st["meta_prunes"], st["file_identities"], st["disk_state"],
              st["disk_writes"]))
    said = [w for w in ("no space", "full", "failed") if w in log.lower()]
    assert not said, "the log says %s:\n%s" % (said, log[-3000:])
    assert st["disk_state"] == 1, "disk tier off or full: %s\n%s" % (st, log[-3000:])
    assert st["disk_writes"] == 2 * FILES and st["disk_write_drops"] == 0, st
    # The kernel holds the root, the directories and the files it looked up;
    # the misses are idle nodes, at their bound since WARM: no more nodes now.
    # Exact bound, whenever the kernel's FORGETs come: the idle nodes kept plus
    # those the kernel or an open may hold (the root, neg/, data/ and the files).
    bound = IDLE_NODES + 3 + FILES
    assert st_a["inodes"] <= bound, st_a
    assert st_b["inodes"] <= bound, \
        "the inode table holds %d nodes after %d more names (it held %d), over the " \
        "%d that %d idle nodes and the held ones allow" % (
            st_b["inodes"], names - WARM, st_a["inodes"], bound, IDLE_NODES)
    assert san or rss_b - rss_a < 64 * 1024, \
        "daemon RSS grew by %d KiB over %d names" % (rss_b - rss_a, names - WARM)
    # Only blocks in the RAM tier keep a closed file's identity.
    assert st["file_identities"] <= st["slots"], st
    # The map is the one asked for (the index of 256 blocks needs far less)
    # and its records stay under half of it: old attributes went.
    assert st["meta_map_bytes"] == MiB, st
    assert st["meta_prunes"] > 0 and st["meta_used_bytes"] <= MiB // 2, st
    assert "tables:" in status and "metadata:" in status, status

    # The block index was never dropped: after a restart every block is on disk.
    with mcfs_mount(src, str(tmp / "mnt"), opts=opts) as m:
        read_all(m, want)
        st = m.stats()
        assert st["store_reads"] == 0 and st["disk_hits"] >= 2 * FILES, st
