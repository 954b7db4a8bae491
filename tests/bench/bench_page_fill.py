#!/usr/bin/env python3
"""How fast one file's page cache fills (issue 23): one table.

    tests/bench/bench_page_fill.py [--size 4G] [--dir DIR] [--threads 1,4,8]

A cold open under cold_whole waits until its file is whole in the cache directory,
and the loader then reads it from the page cache: the rate at which one file's page
cache fills bounds that wait. page_fill.c (built here with cc) fills one file of
--size in 8 MiB blocks from 1, 4 and 8 threads, by pwrite (what mcfs's buffered disk
writes do), by memcpy into one shared mapping of the file, and by a mapping per
block; on a file in --dir (default: tests/bench/, the cache directory's file system
on most machines) and on a memfd (shmem). Each row: the fill's GB/s, then one
thread's 16 MiB preads of the whole file right after (the page cache), every byte
compared. The limit row is one thread's memcpy between two buffers of 8 MiB. The
"N files" rows split --size over N files filled side by side, one thread each, by
pwrite (a model's shards fetched whole at once: one file's writes share its lock).
Rows "source from memory" copy each block from its own place in a buffer of --size
written beforehand (mcfs copies from the RAM tier, not from a buffer the CPU's cache
holds, as the other rows do).

With --net N, the "N files, source from memory" rows run twice more: alone, and beside N
curl processes that download a 1 GiB file from nginx on loopback to /dev/null over and over
for the whole fill (a cold fetch's receive, without mcfs), with a column for what the
loopback carried during that fill (GB/s, from /proc/net/dev). It asks whether the network's
receive beside the writes is what holds a whole fetch's fill below the kernel's rate.

Needs a C compiler (and nginx and curl for --net). Leaves nothing: the file is unlinked, the binary's directory
removed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_shared import parse_size  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))
from servers import Nginx, have_nginx  # noqa: E402

MEMCPY = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(void)
{
	size_t n = 8ul << 20, total = 0;
	char *a = malloc(n), *b = malloc(n);
	struct timespec t0, t1;
	memset(a, 1, n);
	memset(b, 2, n);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		memcpy(total / n % 2 ? a : b, total / n % 2 ? b : a, n);
		total += n;
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while (t1.tv_sec - t0.tv_sec < 2);
	printf("%.2f\n", total / ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9) / 1e9);
	volatile char sink = (char)(a[n - 1] ^ b[n - 1]); /* the copies are used */
	(void)sink;
	return 0;
}
"""


def compiler():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("%s: no C compiler (cc or gcc) on PATH" % os.path.basename(sys.argv[0]))
    return cc


def build_page_fill(tmp):
    """page_fill.c built into @tmp: its path."""
    fill = os.path.join(tmp, "page_fill")
    subprocess.run([compiler(), "-O2", "-o", fill, os.path.join(HERE, "page_fill.c"),
                    "-lpthread"], check=True)
    return fill


def build(tmp):
    cc = compiler()
    fill = build_page_fill(tmp)
    with open(os.path.join(tmp, "memcpy.c"), "w") as f:
        f.write(MEMCPY)
    mc = os.path.join(tmp, "memcpy")
    subprocess.run([cc, "-O2", "-o", mc, os.path.join(tmp, "memcpy.c")], check=True)
    return fill, mc


def one(fill, target, size, t, method, nf, cold):
    """One run of page_fill: (fill GB/s, read back GB/s) as text."""
    r = subprocess.run([fill, target, str(size), str(t), method, str(nf)] + cold,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("bench_page_fill: %s %s %d: %s" % (target, method, t, r.stderr.strip()))
    f, rb = r.stdout.split()
    return f, rb


def lo_bytes():
    """Bytes the loopback has received so far (/proc/net/dev)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])
    raise RuntimeError("no lo in /proc/net/dev")


@contextmanager
def net_busy(tmp, n):
    """n curl processes downloading a 1 GiB file from nginx on loopback to /dev/null, over
    and over, until the block ends (each transfer's bytes read from the page cache)."""
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    with open(os.path.join(root, "blob"), "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(1024):
            f.write(chunk)
    ng = Nginx(root, workdir=os.path.join(tmp, "nginx"), workers="auto").start()
    ps = []
    try:
        url = ng.url + "/blob"
        ps = [subprocess.Popen(["curl", "-sf"] + ["-o", "/dev/null", url] * 1000)
              for _ in range(n)]
        time.sleep(1.0)  # every curl at speed before the first fill
        yield
    finally:
        for p in ps:
            p.kill()
            p.wait()
        ng.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="4G")
    ap.add_argument("--dir", default=HERE)
    ap.add_argument("--threads", default="1,4,8")
    ap.add_argument("--net", type=int, default=0, metavar="N",
                    help="also fill the N-files rows beside N curls on loopback (see above)")
    a = ap.parse_args()
    if a.net and not (have_nginx() and shutil.which("curl")):
        sys.exit("bench_page_fill: --net needs nginx and curl")
    size = parse_size(a.size)
    threads = [int(t) for t in a.threads.split(",")]
    tmp = tempfile.mkdtemp(prefix="page_fill.")
    try:
        fill, mc = build(tmp)
        fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", a.dir], capture_output=True,
                            text=True).stdout.strip() or "?"
        print("File: %.2f GiB in 8 MiB blocks; %s (%s) and a memfd; kernel %s, %d CPUs"
              % (size / 2**30, a.dir, fs, os.uname().release, os.cpu_count()))
        print()
        print("| target | method | threads | fill GB/s | read back GB/s (1 thread) "
              "| loopback GB/s beside |")
        print("|---|---|---|---|---|---|")
        lim = subprocess.run([mc], capture_output=True, text=True, check=True).stdout.split()[0]
        print("| limit: one thread's memcpy, 8 MiB | - | 1 | %s | - | - |" % lim)
        runs = []
        for target in (os.path.join(a.dir, ".page_fill.%d" % os.getpid()), "memfd"):
            name = "memfd (shmem)" if target == "memfd" else "file (%s)" % fs
            runs += [(name, target, m, t, 1) for m in ("pwrite", "map", "mapblk") for t in threads]
            runs += [("%d %s" % (t, "memfds" if target == "memfd" else "files (%s)" % fs),
                      target, "pwrite", t, t) for t in threads if t > 1]
            if target != "memfd":  # the source in memory, as the RAM tier's blocks are
                runs += [("%s, source from memory" % n, target, "pwrite", t, nf, "cold")
                         for n, t, nf in [("file (%s)" % fs, threads[-1], 1)]
                         + [("%d files (%s)" % (t, fs), t, t) for t in threads if t > 1]]
        for name, target, method, t, nf, *cold in runs:
            print("| %s | %s | %d | %s | %s | - |" % ((name, method, t)
                                                    + one(fill, target, size, t, method, nf, cold)))
        if a.net:
            fr = [(t, os.path.join(a.dir, ".page_fill.%d" % os.getpid())) for t in threads if t > 1]
            for busy in (False, True):
                with net_busy(tmp, a.net) if busy else nullcontext():
                    for t, target in fr:
                        b0, t0 = lo_bytes(), time.perf_counter()
                        f, rb = one(fill, target, size, t, "pwrite", t, ["cold"])
                        net = "%.2f (%d curls)" % ((lo_bytes() - b0) / (time.perf_counter() - t0)
                                                   / 1e9, a.net) if busy else "0 (quiet)"
                        print("| %d files (%s), source from memory | pwrite | %d | %s | %s | %s |"
                              % (t, fs, t, f, rb, net))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
