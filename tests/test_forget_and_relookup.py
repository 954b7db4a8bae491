"""The kernel forgetting inodes (drop_caches) and looking them up again is harmless.

Walks a tree of ~1300 entries, drops dentries and inodes (FORGET requests
reach the daemon), walks again, with one file held open across the drops,
many times; opens and closes files thousands of times. Everything must still
match the source, the daemon's open descriptors and memory must not grow
with the churn, and it must exit 0 on SIGTERM (an ASan build reports leaks
there).
"""
import os
import signal

from conftest import fd_links, mcfs_mount
from gen import drop_caches, make_tree, rss_kib, sanitized, tree_entries


def fds_of(pid):
    """What the daemon's descriptors point at: /dev/fuse for the session's own
    and for each FUSE worker's clone of it (libfuse's clone_fd: a worker is
    started when the requests in flight need one and kept, idle_threads =
    max_threads, so their number follows the peak of concurrent requests,
    which a slower build reaches higher: the test mounts with one worker, so
    that it is there from the first request on), and the rest."""
    return fd_links(pid)


def others(fds):
    return [f for f in fds if f != "/dev/fuse"]


def test_forget_relookup_churn(tmp):
    src = str(tmp / "src")
    make_tree(src)
    for i in range(1000):
        d = os.path.join(src, "churn", "d%02d" % (i % 50))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%04d" % i), "wb") as f:
            f.write(b"%d" % i)
    want = tree_entries(src)
    # a small RAM tier, so that its pages (at most 16 MiB) can't hide a leak;
    # symlinks=any: the tree's link to /etc/hostname is compared like the rest
    with mcfs_mount(src, str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=16M", "symlinks=any",
                          "max_threads=1"]) as m:
        pid = m.proc.pid
        held = open(m.p("small.txt"), "rb")
        try:
            assert tree_entries(m.path) == want
            fds0 = fds_of(pid)
            for rnd in range(4):
                drop_caches()
                assert tree_entries(m.path) == want, "round %d" % rnd
                held.seek(0)
                assert held.read() == open(os.path.join(src, "small.txt"), "rb").read()
            rss0 = rss_kib(pid)
            for rnd in range(6):
                for i in range(0, 1000, 3):
                    p = m.p("churn", "d%02d" % (i % 50), "f%04d" % i)
                    with open(p, "rb") as f:
                        assert f.read() == b"%d" % i
                drop_caches()
            fds = fds_of(pid)
            # files, sockets, rings: no more than before, but for a fetch in flight
            assert len(others(fds)) <= len(others(fds0)) + 2, "daemon fds grew: %s -> %s" % (
                sorted(fds0), sorted(fds))
            # /dev/fuse: the session's and its one worker's, as before the churn
            assert fds.count("/dev/fuse") == fds0.count("/dev/fuse"), "%s -> %s" % (
                sorted(fds0), sorted(fds))
            grown = rss_kib(pid) - rss0
            assert sanitized(pid) or grown < 32 * 1024, "daemon RSS grew by %d KiB over 2000 open/close" % grown
        finally:
            held.close()
        m.proc.send_signal(signal.SIGTERM)
        rc = m.proc.wait(timeout=20)
        assert rc == 0, "exit status %d\n%s" % (rc, m.log()[-3000:])
