#!/usr/bin/env python3
"""Where vLLM's 1-thread loader spends its time, shard by shard, through a cold mount
(issue 23): one table.

    sudo tests/bench/bench_shards.py                                   # 1 GiB in 8 shards
    sudo tests/bench/bench_shards.py --size 4G cold_whole=model,disk_direct=false ""

The loop is bench_loaders.py's "1 thread" row (safe_open(f), get_tensor of each name,
each tensor copied into a preallocated buffer), timed per shard in two parts: the
open (safe_open: the open(2) and the header; under cold_whole the open waits for the
file to be whole) and the read (every tensor). With --threads 8 it is the 8-thread
row instead (one shard per thread, opened at once; one buffer per thread). Rows: the local files in page cache,
a peer (a curl process per shard, all started with the clock, downloading into local files
in the page cache; each shard read once its download ends: a fetch of whole files straight
into the page cache), then for each set of mcfs -o options given (default: "" and
"cold_whole=model,disk_direct=false") a cold pass (a fresh daemon, empty cache_dir,
drop_caches, the store's files re-read so that nginx serves them from its page cache)
and, once its write-behind is done, the warm pass. The last column is the pass's GB/s and its ratio to
the local row. The counters under the table are the cold pass's (whole_*, fetch_*, fuse_*,
passthrough_*, store_*, backing_*, disk_*).

With --profile DIR, each cold pass is also recorded, to find where its time goes: `perf
record -a -g` (when perf is installed) into DIR/coldN.perf.data, and a sample of the
daemon's threads every 5 ms (name, state, and what a sleeping one waits in: /proc's wchan)
into DIR/coldN-threads.txt, as the share of samples in each; the profile starts before the
pass's clock, and perf's own start is waited for.

Needs root and nginx. Method as bench_loaders.py's (RAM pretouched before each mcfs
pass, DAMON paused); every mount and server it starts is stopped on exit.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import bench_loaders as L  # noqa: E402
import safetensors  # noqa: E402
from bench_mount import drop_caches, wait_started  # noqa: E402
from bench_remote import pretouch, warm  # noqa: E402
from bench_shared import parse_size  # noqa: E402
from conftest import MCFS, damon_paused, mcfs_mount  # noqa: E402
from servers import Nginx, have_nginx  # noqa: E402

BUFS = []
DOWNLOADS = {}  # a local path: the curl process downloading it (the curl row)
COUNTERS = ("whole", "fetch", "fuse", "passthrough", "store", "backing", "disk", "cold")


@contextmanager
def cold_mount(work, url, files, opts, size):
    """A fresh daemon over @url (an empty cache_dir under @work, drop_caches, the store's
    @files read again so that nginx serves them from its page cache) with mcfs -o @opts,
    started up and RAM pretouched: yields (the mount, the files' paths in it)."""
    cache, mnt = os.path.join(work, "cache"), os.path.join(work, "mnt")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    drop_caches()
    for f in files:
        warm(f)
    o = ["cache_dir=" + cache] + [x for x in opts.split(",")
                                  if x and not x.startswith(("bin=", "env:"))]
    binary = ([x[4:] for x in opts.split(",") if x.startswith("bin=")] or [None])[-1]
    env = dict(x[4:].split("=", 1) for x in opts.split(",") if x.startswith("env:"))
    with mcfs_mount(url, mnt, opts=o, timeout=120, binary=binary, env=env) as m:
        mf = [os.path.join(mnt, os.path.basename(f)) for f in files]
        wait_started(m, mf[0])
        pretouch(max(3072, size // (1 << 20) + 1024))
        yield m, mf


@contextmanager
def profiled(outdir, label, pid):
    """Records what runs inside the block (see the module's doc) when @outdir is set."""
    if not outdir:
        yield
        return
    os.makedirs(outdir, exist_ok=True)
    perf = None
    if shutil.which("perf"):
        perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "997", "-o",
                                 os.path.join(outdir, label + ".perf.data")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # perf's own start, before the pass's clock
    sampler = subprocess.Popen([sys.executable, os.path.join(HERE, "thread_sampler.py"), str(pid),
                                os.path.join(outdir, label + "-threads.txt")],
                               stdout=subprocess.PIPE, text=True)
    sampler.stdout.readline()  # it takes SIGTERM now
    try:
        yield
    finally:
        for p in (sampler, perf):
            if p:
                p.send_signal(signal.SIGTERM if p is sampler else signal.SIGINT)
                p.communicate()


def one_shard(f, buf):
    """(open s, read s, bytes) of shard @f, each tensor copied into @buf. A shard in
    DOWNLOADS (its curl) is opened once its download ended: the wait counts as open."""
    t0 = time.perf_counter()
    if f in DOWNLOADS and DOWNLOADS[f].wait() != 0:
        raise RuntimeError("curl failed on %s" % f)
    sf = safetensors.safe_open(f, framework=L.FW)
    t1 = time.perf_counter()
    n = sum(L.copy_in(sf.get_tensor(name), buf) for name in sf.keys())
    return t1 - t0, time.perf_counter() - t1, n


def one_pass(paths, threads=1):
    """The loop: (seconds in all, [(open s, read s, bytes) per shard]); with
    @threads > 1, that many threads take the shards in turn, opening at once
    (bench_loaders.py's 8-thread row, one buffer per thread)."""
    t00 = time.perf_counter()
    if threads == 1:
        shards = [one_shard(f, L.BUF) for f in paths]
    else:
        with ThreadPoolExecutor(threads) as ex:
            shards = list(ex.map(one_shard, paths,
                                 [BUFS[i % threads] for i in range(len(paths))]))
    return time.perf_counter() - t00, shards


def curl_pass(work, url, files, threads):
    """The loop over local copies that one curl per shard downloads from @url, all
    started with the pass's clock (page cache dropped, the store's files re-read):
    what fetching each file whole straight into the page cache, then reading it, costs."""
    dst = os.path.join(work, "curl")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    drop_caches()
    for f in files:
        warm(f)
    pretouch(max(3072, sum(os.path.getsize(f) for f in files) // (1 << 20) + 1024))
    out = [os.path.join(dst, os.path.basename(f)) for f in files]
    t0 = time.perf_counter()
    for f, o in zip(files, out):
        DOWNLOADS[o] = subprocess.Popen(["curl", "-sf", "-o", o,
                                         url + "/" + os.path.basename(f)])
    try:
        tot, shards = one_pass(out, threads)
        return time.perf_counter() - t0, shards
    finally:
        for p in DOWNLOADS.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        DOWNLOADS.clear()
        shutil.rmtree(dst, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=parse_size, default=1 << 30)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads taking the shards in turn (8: bench_loaders' 8-thread row)")
    ap.add_argument("--profile", metavar="DIR",
                    help="record each cold pass into DIR (perf, the daemon's threads)")
    ap.add_argument("opts", nargs="*", default=None,
                    help='mcfs -o options, one argument per mount ("" for the defaults); '
                    'bin=PATH among them runs that mcfs binary (a build to compare), env:NAME=VALUE '
                    'sets its environment')
    a = ap.parse_args()
    optsets = a.opts if a.opts else ["", "cold_whole=model,disk_direct=false"]
    if os.geteuid() != 0 or not have_nginx() or not os.access(MCFS, os.X_OK):
        sys.exit("bench_shards: needs root, nginx and the mcfs binary (%s)" % MCFS)
    work = tempfile.mkdtemp(prefix="mcfs-bench-shards.", dir="/var/tmp")
    src = os.path.join(work, "src")
    os.makedirs(src)
    rows, notes = [], []
    ng = None
    try:
        files, _, largest, want = L.make_checkpoint(src, a.size, a.shards)
        L.BUF = (L.torch.empty(largest, dtype=L.torch.uint8) if L.torch is not None
                 else L.np.empty(largest, dtype=L.np.uint8))
        L.BUF[:] = 1
        for _ in range(a.threads):
            BUFS.append(L.BUF.clone() if L.torch is not None else L.BUF.copy())
        if L.torch is not None:
            L.torch.set_num_threads(1)
        ng = Nginx(src, workdir=os.path.join(work, "nginx"), workers="auto").start()
        with damon_paused():
            for f in files:
                warm(f)
            rows.append(("local file in page cache", one_pass(files, a.threads)))
            rows.append(("peer: a curl per shard into local files, all at once; each "
                         "shard read once its download ends", curl_pass(work, ng.url, files,
                                                                        a.threads)))
            for opts in optsets:
                with cold_mount(work, ng.url, files, opts, a.size) as (m, mf):
                    s0 = m.stats()
                    with profiled(a.profile, "cold%d" % (len(notes) + 1), m.proc.pid):
                        cold = one_pass(mf, a.threads)
                    rows.append(("mcfs cold, %s" % (opts or "defaults"), cold))
                    s1 = m.stats()
                    notes.append("%s: %s" % (opts or "defaults", ", ".join(
                        "%s %d" % (k, s1[k] - s0[k]) for k in sorted(s1)
                        if isinstance(s1[k], int) and k.split("_")[0] in COUNTERS
                        and s1[k] != s0[k])))
                    L.settle(m)  # write-behind done, as bench_loaders waits
                    pretouch(max(3072, a.size // (1 << 20) + 1024))
                    rows.append(("mcfs warm, %s" % (opts or "defaults"), one_pass(mf, a.threads)))
    finally:
        if ng:
            ng.stop()
        shutil.rmtree(work, ignore_errors=True)
    local = rows[0][1][0]
    out = ["The %d-thread loop, shard by shard: %.2f GB in %d shards, %d CPUs, framework %r; "
           "ms per shard as open / read" % (a.threads, want / 1e9, a.shards, os.cpu_count(),
                                            L.FW), "",
           "| pass | " + " | ".join("shard %d" % (i + 1) for i in range(a.shards))
           + " | GB/s (ratio to local) |",
           "|---" * (a.shards + 2) + "|"]
    for label, (tot, shards) in rows:
        if sum(s[2] for s in shards) != want:
            raise RuntimeError("%s copied %d bytes of %d" % (label, sum(s[2] for s in shards),
                                                            want))
        out.append("| %s | " % label + " | ".join("%d / %d" % (s[0] * 1e3, s[1] * 1e3)
                                                  for s in shards)
                   + " | %.2f (%.2f) |" % (want / tot / 1e9, local / tot))
    out += [""] + ["- cold counters, " + n for n in notes]
    print("\n".join(out))


if __name__ == "__main__":
    main()
