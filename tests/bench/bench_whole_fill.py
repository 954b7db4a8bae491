#!/usr/bin/env python3
"""How fast cold_whole=model fills a checkpoint's shards, as a timeline (issue 23).

    sudo tests/bench/bench_whole_fill.py [--size 4G] [--shards 8] [OPTS ...]

For each set of mcfs -o options (default: cold_whole=model,disk_direct=false), a fresh
daemon over nginx on loopback (its files in page cache), an empty cache_dir: one thread
opens shard 1 (the open waits for it whole; the other shards are queued behind it) while
the daemon's counters are read every 25 ms until every shard is whole. Prints when the
open returned, when the last shard was whole (and the GB/s of the whole fill), and the
timeline: bytes fetched from the store, bytes written to the disk tier, blocks owed to
the writer (waiting in RAM for room in its queue), and the counts of files made whole.
Alongside, every daemon thread's state and kernel stack top are sampled every 2 ms
(/proc/PID/task/*/stack): the table under the timeline counts them, leaving out threads
idle in a poll or a futex (but the disk writers).

The limits, measured first in the same run: the network (8 curl processes of ranged 8 MiB
GETs from the same nginx, bench_loaders.py's) and the kernel's fill of as many files of the
same sizes side by side in the cache directory's file system, one thread each, by pwrite
from a source in memory (bench_page_fill.py's page_fill.c, built here with cc; the better of
two runs).

Needs root and nginx; every mount and server it starts is stopped on exit.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import bench_loaders as L  # noqa: E402
from bench_page_fill import build_page_fill  # noqa: E402
from bench_remote import warm  # noqa: E402
from bench_shards import cold_mount  # noqa: E402
from bench_shared import parse_size  # noqa: E402
from conftest import MCFS, damon_paused  # noqa: E402
from servers import Nginx, have_nginx  # noqa: E402

KEYS = ("store_bytes", "disk_written_bytes", "disk_owed", "whole_background", "whole_opens")
IDLE = ("futex", "ep_poll", "do_sys_poll", "io_cqring_wait", "hrtimer", "sigtimedwait",
        "fuse_dev_do_read")


def sample_threads(pid, counts, stop):
    """Counts (thread name, state, kernel stack top) of @pid's threads until @stop."""
    tdir = "/proc/%d/task" % pid
    while not stop:
        for tid in os.listdir(tdir):
            try:
                with open("%s/%s/comm" % (tdir, tid)) as f:
                    comm = f.read().strip()
                with open("%s/%s/stat" % (tdir, tid)) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open("%s/%s/stack" % (tdir, tid)) as f:
                    top = [ln.split()[1].split("+")[0] for ln in f.read().splitlines()[:3]]
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
            if comm.startswith("iou-wrk"):
                comm = "iou-wrk"  # io_uring's workers, one name
            k = (comm, state, " < ".join(top))
            counts[k] = counts.get(k, 0) + 1
        time.sleep(0.002)


def one(m, path, shards):
    """Opens @path (the first of @shards); returns (open s, [(t, counter deltas...)], thread samples)."""
    s0 = m.stats()
    done, counts, stop = {}, {}, []

    def opener():
        fd = os.open(path, os.O_RDONLY)
        done["t"] = time.perf_counter()
        os.close(fd)
    smp = threading.Thread(target=sample_threads, args=(s0["pid"], counts, stop))
    smp.start()
    t0 = time.perf_counter()
    th = threading.Thread(target=opener)
    th.start()
    rows = []
    try:
        while True:
            s, t = m.stats(), time.perf_counter() - t0
            rows.append((t,) + tuple(s.get(k, 0) - s0.get(k, 0) for k in KEYS))
            if rows[-1][4] + rows[-1][5] >= shards and "t" in done:
                break  # every shard whole: by its own open, or in the background
            if t > 120:
                raise RuntimeError("the shards were not whole after 120 s: %r" % (rows[-1],))
            time.sleep(0.025)
    finally:
        th.join()
        stop.append(1)
        smp.join()
    return done["t"] - t0, rows, counts


def kernel_fill(work, size, shards):
    """GB/s of page_fill.c filling @shards files of @size bytes in all, side by side, in
    @work's file system (a source in memory)."""
    exe = build_page_fill(work)
    best = 0.0
    for _ in range(2):  # the first fill of a while runs slow on some machines (a VM: 1.7 then 9)
        r = subprocess.run([exe, os.path.join(work, "fill"), str(size), str(shards), "pwrite",
                            str(shards), "cold"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("bench_whole_fill: page_fill: " + r.stderr.strip())
        best = max(best, float(r.stdout.split()[0]))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=parse_size, default=4 << 30)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("opts", nargs="*", help="mcfs -o options, one argument per mount")
    a = ap.parse_args()
    optsets = a.opts or ["cold_whole=model,disk_direct=false"]
    if os.geteuid() != 0 or not have_nginx() or not os.access(MCFS, os.X_OK):
        sys.exit("bench_whole_fill: needs root, nginx and the mcfs binary (%s)" % MCFS)
    work = tempfile.mkdtemp(prefix="mcfs-bench-fill.", dir="/var/tmp")
    src = os.path.join(work, "src")
    os.makedirs(src)
    ng = None
    try:
        files, _, _, want = L.make_checkpoint(src, a.size, a.shards)
        rels = [os.path.basename(f) for f in files]
        sizes = [os.path.getsize(f) for f in files]
        ng = Nginx(src, workdir=os.path.join(work, "nginx"), workers="auto").start()
        print("cold_whole fill: %.2f GB in %d shards, %d CPUs, kernel %s"
              % (want / 1e9, a.shards, os.cpu_count(), os.uname().release))
        with damon_paused():
            for f in files:
                warm(f)
            net = L.curl_limit([ng.url + "/" + r for r in rels], sizes, work)
            fill = kernel_fill(work, sum(sizes), a.shards)
            print("\n| limit | GB/s |\n|---|---|")
            print("| network: %d curl processes, ranged 8 MiB GETs from the same nginx | %.2f |"
                  % (L.THREADS, net))
            print("| the kernel: %d files of the shards' sizes filled side by side (pwrite, "
                  "one thread each) | %.2f |" % (a.shards, fill))
            for opts in optsets:
                with cold_mount(work, ng.url, files, opts, a.size) as (m, mf):
                    topen, rows, counts = one(m, mf[0], a.shards)
                end = rows[-1][0]
                print("\n## %s\n\nopen of shard 1 returned at %.3f s; every shard whole at "
                      "%.3f s (%.2f GB/s)\n" % (opts, topen, end, want / end / 1e9))
                print("| t s | fetched GB | written GB | owed blocks | whole: background / "
                      "opens |")
                print("|---|---|---|---|---|")
                last = -1.0
                for r in rows:
                    if r[0] - last >= 0.1 or r is rows[-1]:
                        print("| %.3f | %.2f | %.2f | %d | %d / %d |"
                              % (r[0], r[1] / 1e9, r[2] / 1e9, r[3], r[4], r[5]))
                        last = r[0]
                print("\n| samples | thread | state | kernel stack top |\n|---|---|---|---|")
                for (comm, st, top), v in sorted(counts.items(), key=lambda kv: -kv[1])[:24]:
                    if st == "S" and comm != "mcfs-diskwr" and any(i in top for i in IDLE):
                        continue
                    print("| %d | %s | %s | %s |" % (v, comm, st, top or "(user)"))
    finally:
        if ng:
            ng.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
