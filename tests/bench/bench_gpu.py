#!/usr/bin/env python3
"""GPU load table: mcfs's ioctl fast path beside safetensors and the PCIe limit,
all measured in one run on one machine (needs a CUDA GPU, torch and root).

Rows (GB/s = 1e9 bytes/s of the data section; medians of --runs):
  pinned H2D limit        torch copy from a pinned 1 GiB host buffer
  pageable H2D            same from pageable memory
  safetensors, page cache safetensors.torch.load_file(local file, device="cuda"), warm
  safetensors via mcfs    the same through the mount (FUSE read path)
  mcfs cold, posix store  mcfs.load_file, first load, source page cache dropped
  mcfs RAM tier           mcfs.load_file again (blocks in the pinned RAM tier)
  mcfs RAM tier, ioctl    one MCFS_IOC_LOAD into a preallocated buffer (daemon time)
  mcfs cold, http store   nginx on loopback serving the same file (if nginx exists)
  mcfs disk tier          mcfs.load_file after a restart on the same cache_dir: each run
                          a fresh mount (RAM tier empty, pinned), page cache dropped;
                          the note gives the store reads of all runs (0: all from disk)
  first                   a fresh daemon's first mcfs.load_file into the last GPU (the
                          file already in the RAM tier, loaded into cuda:0) beside its
                          next load there, for each --first-ram size, with gpu_prepare
                          off and on (on: after `mcfs status` says every GPU is ready)
  ranks                   each rank of world 2 alone into cuda:0 from the RAM tier: whole
                          tensors, slices along dim 0 and along dim 1 (strided), beside the
                          pinned limit, with the dim-1 rows that block ends cut
  multi                   every GPU at once (2 or more): the pinned H2D limit of each
                          GPU alone and of all together; replicas, ranks with whole
                          tensors and ranks with slices of every tensor (dim 0 and,
                          strided, dim 1), warm from the RAM tier and cold from nginx
                          beside the network's limit (tests/bench/gpu_rows.py)
  switch                  safetensors load_file, transformers and diffusers from_pretrained
                          through the mount with the safetensors switch off and on
                          (tests/bench/switch_rows.py)

    sudo MCFS_BIN=build/fs/mcfs python3 tests/bench/bench_gpu.py --size-gib 8 --out table.md
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import torch  # noqa: E402
import mcfs  # noqa: E402
from mcfs import _abi  # noqa: E402
from mcfs._loader import bind_tensor  # noqa: E402
from conftest import mcfs_mount  # noqa: E402
import gpu_rows  # noqa: E402
import switch_rows  # noqa: E402

SECTIONS = ["basic", "concurrent", "network", "disk", "peers", "switch", "first", "ranks",
            "multi"]


def log(*a):
    print(*a, flush=True)


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def pretouch():
    # benchmarking.md: first touch of freed RAM is slow on these VMs
    subprocess.run(["dd", "if=/dev/zero", "of=/dev/shm/pretouch", "bs=1M", "count=3072"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.unlink("/dev/shm/pretouch")


def make_file(path, size):
    """bf16 safetensors of ~size bytes: 64 tensors of random bits, made on the GPU."""
    n = 64
    per = (size // n) // 2 * 2
    header = {"__metadata__": {"format": "pt"}}
    for i in range(n):
        header["layer.%02d.weight" % i] = {"dtype": "BF16", "shape": [per // 2],
                                          "data_offsets": [i * per, (i + 1) * per]}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    g = torch.Generator(device="cuda").manual_seed(7)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i in range(n):
            t = torch.randint(0, 256, (per,), dtype=torch.uint8, device="cuda", generator=g)
            f.write(t.cpu().numpy().tobytes())
    return n * per


def cuda_time(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def h2d_limit(runs, pinned):
    n = 1 << 30
    host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(1)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    ts = [cuda_time(lambda: dev.copy_(host, non_blocking=True)) for _ in range(runs)]
    return n / statistics.median(ts) / 1e9, ts


def wait_pinned(path, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        i = mcfs.info(path)
        if i["pinned_bytes"] >= i["ram_bytes"]:
            return i
        time.sleep(0.2)
    raise RuntimeError("RAM tier not pinned after %ds: %s" % (timeout, i))


def ioctl_load(path, buf, nbytes):
    fd = os.open(path, os.O_RDONLY)
    try:
        db = bind_tensor(torch, fd, buf)
        r = _abi.LoadReq(abi_version=_abi.ABI, device=db.device, dst_offset=db.offset,
                         dst_size=nbytes)
        r.ipc_handle[:] = db.handle
        r.device_uuid[:] = db.uuid
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _abi.ioctl(fd, _abi.IOC_LOAD, r)
        return time.perf_counter() - t0, r
    finally:
        os.close(fd)


def timed_load(fn, path):
    out = {}

    def run():
        out["t"] = fn(path, device="cuda:0")
    gpu_rows.settle_device()
    t = cuda_time(run)
    n = sum(x.numel() * x.element_size() for x in out["t"].values())
    del out["t"]
    torch.cuda.empty_cache()
    return t, n


def settle(m, timeout=300):
    """Waits until the disk tier's write-behind is idle; returns the stats."""
    deadline = time.time() + timeout
    while True:
        st = m.stats()
        if not any(st.get(k, 0) for k in ("disk_queued", "inflight", "disk_owed")):
            return st
        if time.time() > deadline:
            raise RuntimeError("write-behind did not settle in %ds: %s" % (timeout, st))
        time.sleep(0.1)


def fs_of(path):
    r = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", path],
                       capture_output=True, text=True)
    return " ".join(r.stdout.split()) or "unknown fs"


def disk_tier_row(a, src, mnt, opts, fsize, data_len, row):
    """mcfs.load_file from the disk tier after a restart (fresh daemon, same cache_dir)."""
    cache = os.path.join(a.dir, "cache")
    dopts = opts + ["cache_dir=" + cache, "disk_cache=%dG" % (fsize // (1 << 30) + 2)]
    mp = os.path.join(mnt, "model.safetensors")
    # Fill the disk tier. Write-behind may drop blocks when the disk is slower than
    # the store; a later mount fetches (and writes) only those, so repeat until
    # every block read from the store was written.
    for i in range(4):
        with mcfs_mount(src, mnt, opts=dopts, timeout=60) as m:
            wait_pinned(mp)
            t0 = time.perf_counter()
            timed_load(mcfs.load_file, mp)
            st = settle(m)
            log("disk tier fill pass %d: load + write-behind %.1f s; store_reads %d "
                "disk_hits %d disk_writes %d disk_write_drops %d"
                % (i, time.perf_counter() - t0, st["store_reads"], st["disk_hits"],
                   st["disk_writes"], st["disk_write_drops"]))
            if i == 0:
                log("daemon log:\n%s" % m.log())
            if st["store_reads"] == 0 or (st["disk_write_drops"] == 0
                                          and st["disk_writes"] >= st["store_reads"]):
                break  # every block fetched is on disk
    ts, store_reads, hits = [], 0, []
    for _ in range(a.runs):
        with mcfs_mount(src, mnt, opts=dopts, timeout=60) as m:
            wait_pinned(mp)
            drop_caches()
            pretouch()
            s0 = m.stats()
            t, n = timed_load(mcfs.load_file, mp)
            st = m.stats()
            assert n == data_len, (n, data_len)
            ts.append(t)
            store_reads += st["store_reads"] - s0["store_reads"]
            hits.append(st["disk_hits"] - s0["disk_hits"])
            log("disk tier run: %.3f s, store_reads %d disk_hits %d disk_read_bytes %d "
                "csum_errors %d" % (t, st["store_reads"], st["disk_hits"],
                                    st["disk_read_bytes"], st["disk_csum_errors"]))
    row("mcfs disk tier after restart", ts, data_len,
        "fresh mount per run, page cache dropped; store reads %d, disk hits %s; "
        "cache_dir on %s" % (store_reads, "/".join(map(str, sorted(set(hits)))),
                             fs_of(cache)))


def basic_rows(a, src, mnt, opts, fpath, data_len, row):
    """The posix store: cold, RAM tier, the ioctl alone, safetensors through FUSE."""
    from safetensors.torch import load_file as st_load
    with mcfs_mount(src, mnt, opts=opts, timeout=60) as m:
        mp = os.path.join(mnt, "model.safetensors")
        t0 = time.time()
        info = wait_pinned(mp)
        log("pinned %.1f GiB RAM tier (waited %.1f s after mount); daemon log:\n%s"
            % (info["ram_bytes"] / (1 << 30), time.time() - t0, m.log()))
        drop_caches()
        pretouch()
        t, n = timed_load(mcfs.load_file, mp)
        row("mcfs cold, posix store (local disk)", [t], n, "page cache dropped")
        ts = [timed_load(mcfs.load_file, mp)[0] for _ in range(a.runs)]
        row("mcfs RAM tier, mcfs.load_file", ts, data_len)
        buf = torch.empty(data_len, dtype=torch.uint8, device="cuda")
        ts, daemon = [], []
        for _ in range(a.runs):
            t, r = ioctl_load(mp, buf, data_len)
            assert r.bytes == data_len and r.unpinned == 0, (r.bytes, r.unpinned)
            ts.append(t)
            daemon.append(r.ns / 1e9)
        row("mcfs RAM tier, ioctl only", ts, data_len,
            "daemon time %.3f s" % statistics.median(daemon))
        # check the bytes once
        want = st_load(fpath, device="cuda:0")
        got = mcfs.load_file(mp, device="cuda:0")
        same = all(torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8))
                   for k in want)
        log("bitwise equal to safetensors: %s" % same)
        del want, got, buf
        torch.cuda.empty_cache()
        ts = [timed_load(st_load, mp)[0] for _ in range(2)]
        row("safetensors via mcfs mount (FUSE)", ts, data_len, "runs: %s"
            % ", ".join("%.2f s" % t for t in ts))
        log("daemon stats: %s" % m.stats())


def wait_ready(m, timeout=600):
    """Waits until the daemon says every GPU is prepared; returns the seconds waited."""
    t0 = time.time()
    while True:
        st = m.stats()
        if st["gpu_devices"] and st["gpu_ready"] == st["gpu_devices"]:
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise RuntimeError("GPUs not ready after %ds: %s" % (timeout, st))
        time.sleep(0.05)


def first_load_rows(a, src, mnt, opts, data_len, row):
    """Issue 24: the first load into a GPU other than the first, from the RAM tier."""
    last = "cuda:%d" % (torch.cuda.device_count() - 1)
    mp = os.path.join(mnt, "model.safetensors")

    def load_into(dev):
        out = {}

        def run():
            out["t"] = mcfs.load_file(mp, device=dev)
        t = cuda_time(run)
        del out["t"]
        torch.cuda.empty_cache()
        return t

    for ram in a.first_ram:
        for prepare in ("false", "true"):
            firsts, nexts, waits = [], [], []
            for _ in range(a.cold_runs):
                o = [x for x in opts if not x.startswith("ram_cache=")]
                o += ["ram_cache=%dG" % ram, "gpu_prepare=" + prepare]
                with mcfs_mount(src, mnt, opts=o, timeout=120) as m:
                    wait_pinned(mp, timeout=900)
                    if prepare == "true":
                        waits.append(wait_ready(m))
                    load_into("cuda:0")  # the file into the RAM tier
                    firsts.append(load_into(last))
                    nexts.append(load_into(last))
            note = "ram_cache %d GiB, gpu_prepare=%s" % (ram, prepare)
            if waits:
                note += "; ready %.1f s after pinning (median)" % statistics.median(waits)
            row("first load into %s, fresh daemon" % last, firsts, data_len, note)
            row("next load into %s" % last, nexts, data_len,
                note + "; first/next %.2f" % (statistics.median(nexts) /
                                              statistics.median(firsts)))


def concurrent_rows(a, src, mnt, opts, data_len, limit, row):
    gpu_rows.ram_tier_concurrent(row, a, src, mnt, opts, data_len, limit, timed_load,
                                 wait_pinned)
    for kv in a.daemon_env:
        k, _, v = kv.partition("=")
        gpu_rows.ram_tier_concurrent(row, a, src, mnt, opts, data_len, limit, timed_load,
                                     wait_pinned, daemon_env={k: v})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gib", type=float, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/mcfs-bench-gpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="sections to run, of %s" % ",".join(SECTIONS))
    ap.add_argument("--conc", type=int, default=4, help="loaders of the concurrent rows")
    ap.add_argument("--curl", type=lambda v: [int(x) for x in v.split(",")], default=[16],
                    help="curl process counts of the raw nginx rows")
    ap.add_argument("--connections", type=lambda v: v.split(";"), default=["16"],
                    help="the cold http rows' mounts, ';'-separated: connections, and "
                    "after ':' more mount options (16;32;16:block_size=16M)")
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--first-ram", type=lambda v: [int(x) for x in v.split(",")],
                    default=[4, 24, 48], help="GiB of RAM tier of the first-load rows")
    ap.add_argument("--nginx-workers", default="auto",
                    help="nginx worker processes of the network rows (auto: one per CPU)")
    ap.add_argument("--peers", type=lambda v: v.split(","), default=gpu_rows.PEERS)
    ap.add_argument("--peer-runs", type=int, default=None, help="runs of each peer row "
                    "(default: --runs)")
    ap.add_argument("--switch-runs", type=int, default=2,
                    help="runs of each framework row of the switch section, off and on")
    ap.add_argument("--daemon-env", action="append", default=[],
                    help="K=V for the daemon of extra concurrent RAM-tier rows")
    a = ap.parse_args()
    only = set(a.only.split(","))
    from safetensors.torch import load_file as st_load

    shutil.rmtree(a.dir, ignore_errors=True)
    src, mnt = os.path.join(a.dir, "src"), os.path.join(a.dir, "mnt")
    os.makedirs(src)
    os.makedirs(mnt)
    fpath = os.path.join(src, "model.safetensors")
    size = int(a.size_gib * (1 << 30))
    t0 = time.time()
    data_len = make_file(fpath, size)
    fsize = os.path.getsize(fpath)
    log("made %s: %.2f GiB in %.1f s" % (fpath, fsize / (1 << 30), time.time() - t0))
    rows = []

    def row(name, secs, nbytes, note=""):
        med = statistics.median(secs)
        rows.append((name, nbytes / med / 1e9, med, len(secs), note))
        log("%-34s %7.2f GB/s  median %.3f s of %d  %s" % (name, nbytes / med / 1e9, med,
                                                           len(secs), note))

    pretouch()
    gbs, ts = h2d_limit(a.runs, True)
    row("pinned H2D limit (torch, 1 GiB)", ts, 1 << 30)
    limit = gbs
    gbs, ts = h2d_limit(a.runs, False)
    row("pageable H2D (torch, 1 GiB)", ts, 1 << 30)

    ram = (fsize // (1 << 30) + 2) << 30
    opts = ["ram_cache=%d" % ram, "readahead_max=256M"]
    want_sums = None
    if "basic" in only or "peers" in only:
        ts = []
        for _ in range(a.runs):
            subprocess.run(["cat", fpath], stdout=subprocess.DEVNULL)  # warm right before
            t, n = timed_load(st_load, fpath)
            ts.append(t)
        row("safetensors, local page cache", ts, data_len)
        want = st_load(fpath, device="cuda:0")
        want_sums = {k: int(torch.sum(v.reshape(-1).view(torch.uint8), dtype=torch.int64))
                     for k, v in want.items() if v.numel()}
        del want
        torch.cuda.empty_cache()
    from servers import have_nginx
    sections = {
        "basic": lambda: basic_rows(a, src, mnt, opts, fpath, data_len, row),
        "concurrent": lambda: concurrent_rows(a, src, mnt, opts, data_len, limit, row),
        "network": lambda: gpu_rows.network(row, a, src, fpath, mnt, opts, fsize, data_len,
                                            limit, timed_load, wait_pinned, pretouch),
        "disk": lambda: disk_tier_row(a, src, mnt, opts, fsize, data_len, row),
        "peers": lambda: gpu_rows.peers(row, a, fpath, data_len, want_sums, fs_of),
        "switch": lambda: switch_rows.rows(row, a, src, timed_load, wait_pinned, drop_caches),
        "first": lambda: first_load_rows(a, src, mnt, opts, data_len, row),
        "ranks": lambda: gpu_rows.ranks_alone(row, a, src, mnt, opts, wait_pinned, wait_ready,
                                              limit),
        "multi": lambda: gpu_rows.multi(row, a, src, mnt, opts, wait_pinned, wait_ready,
                                        pretouch),
    }
    failed = []
    for name in SECTIONS:
        if name not in only:
            continue
        if name == "network" and not have_nginx():
            log("not run: http store (nginx not installed)")
            continue
        try:
            sections[name]()
        except Exception:  # the rows measured so far still make a table
            traceback.print_exc()
            failed.append(name)
            torch.cuda.empty_cache()

    dev = torch.cuda.get_device_name(0)
    lines = ["GPU load, %s, %.2f GiB bf16 safetensors (%d tensors), medians" %
             (dev, fsize / (1 << 30), 64), "",
             "| path | GB/s | median s | runs | note |", "|---|---|---|---|---|"]
    for name, g, med, n, note in rows:
        lines.append("| %s | %.2f | %.3f | %d | %s |" % (name, g, med, n, note))
    if failed:
        lines += ["", "sections that failed (tracebacks in the log): " + ", ".join(failed)]
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    shutil.rmtree(a.dir, ignore_errors=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
