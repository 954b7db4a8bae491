"""A store file replaced again and again while readers reopen it: every read of
one open is all of one version, or fails with EIO; never a mix.

Two versions of equal size (so size can't tell them apart) are swapped in by
atomic rename for 3 seconds while 6 readers (buffered and O_DIRECT) open the
file and read it whole. attr_ttl=0 so each open looks at the store again.
Blocks are keyed by version in the daemon; an open of another version than
the one the inode's open files read gets a new inode, so that no page cache
holds two versions. An open that meets two changes (the VFS looks the name up
once more after the first, ESTALE, and the file changed again before its
open) fails with ESTALE: an error, never bytes of another version.
"""
import errno
import os
import threading
import time

from conftest import mcfs_mount
from gen import MiB, pread_direct_fd, rand_bytes
from test_concurrent_readers import run_readers

SIZE = 4 * MiB


def test_no_mixed_versions(tmp):
    src = tmp / "src"
    versions = [rand_bytes(SIZE, 1), rand_bytes(SIZE, 2)]
    staged = []
    for i, v in enumerate(versions):
        p = src / (".v%d" % i)
        p.write_bytes(v)
        staged.append(p)
    path = src / "model.bin"
    path.write_bytes(versions[0])
    stop = threading.Event()
    swaps = [0]

    def writer():
        i = 0
        while not stop.is_set():
            i ^= 1
            tmpname = src / (".swap%d" % (swaps[0] % 2))
            os.link(str(staged[i]), str(tmpname))  # a new name for a whole version
            os.replace(str(tmpname), str(path))
            swaps[0] += 1
            time.sleep(0.005)

    with mcfs_mount(str(src), str(tmp / "mnt"),
                    opts=["block_size=1M", "attr_ttl=0", "negative_ttl=0"]) as m:
        mp = m.p("model.bin")
        w = threading.Thread(target=writer, daemon=True)
        w.start()
        results = {"whole": 0, "eio": 0, "estale": 0}
        lock = threading.Lock()

        def reader(i):
            direct = i % 2 == 1
            deadline = time.time() + 3
            while time.time() < deadline:
                try:
                    fd = os.open(mp, os.O_RDONLY | (os.O_DIRECT if direct else 0))
                except FileNotFoundError:
                    continue  # between unlink and rename on some filesystems
                except OSError as e:
                    assert e.errno == errno.ESTALE, e
                    with lock:
                        results["estale"] += 1
                    continue
                try:
                    # read to EOF: a direct read may come back short when a
                    # later part of it failed; the next read then reports it
                    parts, off = [], 0
                    while True:
                        b = pread_direct_fd(fd, off, 3 * MiB) if direct else \
                            os.pread(fd, 3 * MiB, off)
                        if not b:
                            break
                        parts.append(b)
                        off += len(b)
                    got = b"".join(parts)
                except OSError as e:
                    assert e.errno == errno.EIO, e
                    with lock:
                        results["eio"] += 1
                    continue
                finally:
                    os.close(fd)
                if got in versions:
                    with lock:
                        results["whole"] += 1
                    continue
                # describe the mix block by block
                desc = []
                for b in range(0, max(len(got), 1), MiB):
                    blk = got[b:b + MiB]
                    who = [k for k, v in enumerate(versions) if v[b:b + MiB] == blk]
                    desc.append("block %d: %s" % (b // MiB, who or "neither"))
                raise AssertionError("reader %d (direct=%s) got %d bytes mixing versions: %s"
                                     % (i, direct, len(got), "; ".join(desc)))

        try:
            run_readers(6, reader, timeout=60)
        finally:
            stop.set()
            w.join(10)
        print("swaps", swaps[0], results)
        assert swaps[0] > 20 and results["whole"] > 10, (swaps[0], results)
