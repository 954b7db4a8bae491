#!/usr/bin/env python3
"""The CPU safetensors loaders of vLLM and SGLang through an mcfs mount (issue 23),
beside the same loaders on the local files and the network's limit: one run, one table.

    sudo tests/bench/bench_loaders.py                           # 1 GiB in 4 shards, 3 runs
    sudo tests/bench/bench_loaders.py --size 8900M --shards 8 --out loaders.md   # GPU machine

The checkpoint is Llama-like (Llama-2's tensor names and shapes: hidden size 4096 from
4 GiB up, 2048 below, with as many layers as fit), random bits, written with safetensors
in --shards shards of about equal size: bf16 with torch, fp16 without it.

Beside the shards, the checkpoint holds config.json and model.safetensors.index.json: each
pass reads config.json first (a server's start, untimed), then, timed, the index (vLLM's
filter_duplicate_safetensors_files) and the shards. Rows, each loader as the servers' code
runs it (vLLM's weight_utils.py, SGLang's weight_loader_disable_mmap), then each tensor copied into a preallocated buffer as vLLM
copies it into the parameter (one reusable buffer of the largest tensor; torch copies in
one thread: torch.set_num_threads(1)):
  1 thread    for each shard in order: safe_open(f, "pt"), get_tensor of each name
  8 threads   vLLM's enable_multithread_load: load_file(f, device="cpu") in a
              ThreadPoolExecutor(8), one shard per task, tensors consumed as_completed
  prefetch    vLLM's --safetensors-load-strategy prefetch: a background thread runs
              ThreadPoolExecutor(8), one file per task read with f.read(16 MiB) to its end,
              while the 1-thread loop runs at once (as vLLM does: it does not wait for it);
              timed to the loop's end
  read()      SGLang's weight_loader_disable_mmap: load(f.read()) of each shard
  mcfs.load_file (torch with CUDA only): each shard to cuda:0 through the mount; its local
              column is safetensors.torch.load_file(f, device="cuda:0")
Without torch the same loops use safetensors' numpy framework (safe_open(f, "np") mmaps
too, but its get_tensor returns a copy, so each byte is copied twice); the header says so.

Columns (GB/s = 1e9 bytes of tensor data per second; median of --runs; in brackets the
ratio to the local file):
  local       the shards in the local directory, in page cache (read right before)
  mcfs cold   a fresh daemon, empty cache_dir, drop_caches (3) before; the store's files
              are then read once, so nginx serves them from its page cache as for curl
  next pass   the same daemon after the cold pass and its write-behind: the page cache
              dropped again (echo 1 > drop_caches, then the store's files re-read); the
              opens of complete files build their backing files here
  warm        right after: opens with passthrough (counters: passthrough_opens grew and
              fuse_reads did not; a cell with FUSE reads is marked *)
and `cold / lesser` = mcfs cold over the lesser of local and the network limit: 8 curl
processes of ranged 8 MiB GETs over every shard from the same nginx (http store only).
The last row: allocated bytes of the cache directory (du) per model byte, after the cold
pass and after all passes. Notes under the table: the daemon's counters of each pass and
the CPU seconds of reader, daemon and nginx in the cold pass.

Method (../shared/notes/benchmarking.md): RAM is pretouched before each timed pass; the
kernel's proactive reclaim (DAMON), where it runs, is paused for the passes; the load
average is printed. Needs root (FUSE, passthrough, drop_caches) and, for --store
http, nginx. Every mount and server it starts is stopped on exit, Ctrl-C included.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
from conftest import MCFS, damon_paused, mcfs_mount  # noqa: E402
from servers import Nginx, have_nginx  # noqa: E402
from bench_mount import drop_caches, wait_started  # noqa: E402
from bench_remote import pretouch, revision, warm  # noqa: E402
from bench_shared import cpu_seconds, parse_size  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
CUDA = bool(torch is not None and torch.cuda.is_available())
MiB = 1 << 20
PREFETCH_BLOCK = 16 * MiB  # vLLM's DEFAULT_SAFETENSORS_PREFETCH_BLOCK_SIZE
THREADS = 8                # vLLM's prefetch threads and multithread-load workers
INDEX = "model.safetensors.index.json"  # the shards' index, as transformers names it
if torch is not None:
    from safetensors.torch import load as st_load, load_file as _load_file, save_file
    FW = "pt"

    def load_file(path):
        return _load_file(path, device="cpu")
else:
    from safetensors.numpy import load as st_load, load_file, save_file
    FW = "np"


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# ---- the checkpoint ------------------------------------------------------------------

def llama_tensors(size):
    """[(name, shape)] of a Llama-2-like checkpoint of at most about `size` bytes (2-byte
    dtype): hidden 4096 and MLP 11008 (Llama-2-7B) from 4 GiB, half of both below."""
    h = 4096 if size >= 4 << 30 else 2048
    inter, vocab = h * 11008 // 4096, 32000
    layer = [("self_attn.%s_proj.weight" % p, (h, h)) for p in "qkvo"]
    layer += [("mlp.gate_proj.weight", (inter, h)), ("mlp.up_proj.weight", (inter, h)),
              ("mlp.down_proj.weight", (h, inter)), ("input_layernorm.weight", (h,)),
              ("post_attention_layernorm.weight", (h,))]
    per_layer = sum(2 * math.prod(s) for _, s in layer)
    n = max(1, (size - 2 * 2 * vocab * h) // per_layer)
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(n):
        out += [("model.layers.%d.%s" % (i, k), s) for k, s in layer]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (vocab, h))]


def make_checkpoint(d, size, shards):
    """Writes the shards under `d` (random bits); returns their paths in order."""
    tensors = llama_tensors(size)
    total = sum(2 * math.prod(s) for _, s in tensors)
    groups, at = [[] for _ in range(shards)], 0
    for name, shape in tensors:  # each tensor to the shard where its middle falls
        sz = 2 * math.prod(shape)
        groups[(at + sz // 2) * shards // total].append((name, shape))
        at += sz
    if not all(groups):
        sys.exit("bench_loaders: %d shards of a %d-tensor checkpoint leave one empty"
                 % (shards, len(tensors)))
    rng = np.random.default_rng(23)
    paths = []
    for i, g in enumerate(groups):
        arrays = {n: rng.integers(0, 1 << 16, s, dtype=np.uint16) for n, s in g}
        if torch is not None:
            arrays = {n: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
                      for n, a in arrays.items()}
        else:
            arrays = {n: a.view(np.float16) for n, a in arrays.items()}
        paths.append(os.path.join(d, "model-%05d-of-%05d.safetensors" % (i + 1, shards)))
        save_file(arrays, paths[-1], metadata={"format": FW})
    # what a server reads before the shards: the model's config, and the shards' index
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": dict(tensors)["model.embed_tokens.weight"][1],
                   "num_hidden_layers": sum(n.endswith(".input_layernorm.weight")
                                            for n, _ in tensors),
                   "torch_dtype": "bfloat16" if torch is not None else "float16"}, f)
    with open(os.path.join(d, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": {n: os.path.basename(paths[i])
                                  for i, g in enumerate(groups) for n, _ in g}}, f)
    return paths, len(tensors), max(2 * math.prod(s) for _, s in tensors), total


def read_config(files):
    """The server's start, long before its loader: config.json of the shards' directory."""
    with open(os.path.join(os.path.dirname(files[0]), "config.json"), "rb") as f:
        return json.load(f)


def read_index(files):
    """vLLM's filter_duplicate_safetensors_files, right before its loader: the index."""
    with open(os.path.join(os.path.dirname(files[0]), INDEX), "rb") as f:
        return set(json.load(f)["weight_map"].values())


# ---- the loaders: each takes the shard paths and returns the tensor bytes it copied ----

BUF = None          # the "parameters": one reusable buffer of the largest tensor's bytes
BACKGROUND = []     # prefetch threads left running by a pass: joined after its timing


def copy_in(t, buf=None):
    buf = BUF if buf is None else buf
    if torch is not None:
        b = t.reshape(-1).view(torch.uint8)
        buf[:b.numel()].copy_(b)
        return b.numel()
    b = t.reshape(-1).view(np.uint8)
    np.copyto(buf[:b.size], b)
    return b.size


def copy_all(sd):
    n = 0
    for k in list(sd):
        n += copy_in(sd.pop(k))
    return n


def one_thread(files):
    n = 0
    for f in files:
        with safetensors.safe_open(f, framework=FW) as sf:
            for name in sf.keys():
                n += copy_in(sf.get_tensor(name))
    return n


def eight_threads(files):
    n = 0
    with cf.ThreadPoolExecutor(max_workers=THREADS) as ex:
        for fut in cf.as_completed(ex.submit(load_file, f) for f in files):
            n += copy_all(fut.result())
    return n


def prefetch_read(path):
    with open(path, "rb") as f:
        while f.read(PREFETCH_BLOCK):
            pass


def prefetch(files):
    def run():
        with cf.ThreadPoolExecutor(max_workers=THREADS) as ex:
            list(ex.map(prefetch_read, files))
    th = threading.Thread(target=run, daemon=True)
    th.start()
    BACKGROUND.append(th)
    return one_thread(files)


def read_whole(files):
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += copy_all(st_load(fh.read()))
    return n


def to_cuda(load):
    def go(files):
        n = 0
        for f in files:
            sd = load(f, device="cuda:0")
            n += sum(t.numel() * t.element_size() for t in sd.values())
            del sd
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return n
    return go


def rows(shards):
    """[(key, label, local loader, mount loader)]."""
    out = [("1t", "1 thread over the %d shards (safe_open, get_tensor)" % shards,
            one_thread, one_thread),
           ("8t", "8 threads, one shard each (load_file)", eight_threads, eight_threads),
           ("pf", "prefetch pattern (8 threads of 16 MiB reads beside the 1-thread loop)",
            prefetch, prefetch),
           ("rd", "read() pattern (load(f.read()) per shard)", read_whole, read_whole)]
    if CUDA:
        import mcfs
        from safetensors.torch import load_file as st_cuda
        out.append(("gpu", "mcfs.load_file to cuda:0 (local: safetensors load_file to cuda:0)",
                    to_cuda(st_cuda), to_cuda(mcfs.load_file)))
    return out


def timed(fn, files, want):
    """GB/s of one pass of `fn` over `files`, checked to copy `want` bytes: config.json
    read first (untimed), then, timed, the index and the loader, in the servers' order."""
    read_config(files)
    t0 = time.perf_counter()
    try:
        if read_index(files) != {os.path.basename(f) for f in files}:
            raise RuntimeError("the index names other shards than %s" % files)
        n = fn(files)
        dt = time.perf_counter() - t0
    finally:
        late = sum(th.is_alive() for th in BACKGROUND)
        for th in BACKGROUND:
            th.join()
        BACKGROUND.clear()
    if n != want:
        raise RuntimeError("%s copied %d bytes of %d" % (fn.__name__, n, want))
    return want / dt / 1e9, late


# ---- around the passes -----------------------------------------------------------------

def drop_page_cache():
    """echo 1 > drop_caches: clean page cache only (not dentries and inodes)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def allocated(d):
    r = subprocess.run(["du", "--block-size=1", "-s", d], check=True, capture_output=True,
                       text=True)
    return int(r.stdout.split()[0])


def settle(m, timeout=600):
    """Waits until the daemon's fetches and write-behind are idle."""
    deadline = time.time() + timeout
    while any(m.stats().get(k, 0) for k in ("disk_queued", "inflight", "disk_owed")):
        if time.time() > deadline:
            raise RuntimeError("write-behind did not settle in %d s: %s" % (timeout, m.stats()))
        time.sleep(0.05)


def curl_limit(urls, sizes, work, n=THREADS, chunk=8 * MiB):
    """GB/s of n curl processes sharing ranged `chunk` GETs over every file (one
    keep-alive connection each, ranges dealt round-robin)."""
    ranges = [(u, o, min(s, o + chunk) - 1) for u, s in zip(urls, sizes)
              for o in range(0, s, chunk)]
    cfgs = []
    for i in range(n):
        cfgs.append(os.path.join(work, "curl-%d.cfg" % i))
        with open(cfgs[-1], "w") as f:
            f.write("next\n".join('url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"\nfail\n'
                                  % r for r in ranges[i::n]))
    t0 = time.perf_counter()
    ps = [subprocess.Popen(["curl", "-s", "-K", c]) for c in cfgs]
    if any(p.wait() for p in ps):
        raise RuntimeError("curl failed on a ranged GET of %s" % urls[0])
    return sum(sizes) / (time.perf_counter() - t0) / 1e9


COUNTERS = ("fuse_reads", "fuse_read_bytes", "store_bytes", "passthrough_opens",
            "backing_builds", "cold_direct_opens", "passthrough_fallbacks", "push_files",
            "push_bytes")


def delta(s0, s1):
    return {k: s1.get(k, 0) - s0.get(k, 0) for k in COUNTERS}


def mcfs_passes(a, row, source, files, rels, work, want, ng, res, notes):
    """Cold, next and warm passes of one loader through a fresh daemon."""
    key, _, _, loader = row
    cache, mnt = os.path.join(work, "cache"), os.path.join(work, "mnt")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    drop_caches()
    if ng:
        for f in files:
            warm(f)
    opts = ["cache_dir=" + cache] + a.opts
    with mcfs_mount(source, mnt, opts=opts, timeout=120) as m:
        mfiles = [os.path.join(mnt, r) for r in rels]
        wait_started(m, mfiles[0])
        for col in ("cold", "next", "warm"):
            if col == "next":
                drop_page_cache()
                if ng:
                    for f in files:
                        warm(f)
            pretouch(a.pretouch)
            s0 = m.stats()
            cpu0 = (os.times(), cpu_seconds(lambda p, pp, sid: p == m.proc.pid),
                    cpu_seconds(lambda p, pp, sid: ng is not None and ng.pid in (p, pp)))
            gbs, late = timed(loader, mfiles, want)
            s1 = m.stats()
            d = delta(s0, s1)
            if col == "cold":
                t = os.times()
                d["cpu"] = (t.user + t.system - cpu0[0].user - cpu0[0].system,
                            cpu_seconds(lambda p, pp, sid: p == m.proc.pid) - cpu0[1],
                            cpu_seconds(lambda p, pp, sid: ng is not None and ng.pid in (p, pp))
                            - cpu0[2], want / gbs / 1e9)
            d["late"] = late
            res.setdefault((key, col), []).append(gbs)
            notes.setdefault((key, col), []).append(d)
            settle(m)
            if col == "cold":
                res.setdefault((key, "alloc_cold"), []).append(allocated(cache))
        res.setdefault((key, "alloc"), []).append(allocated(cache))
        log("%s: cold %.2f, next %.2f, warm %.2f GB/s; cache dir %.2f GB"
            % (key, res[(key, "cold")][-1], res[(key, "next")][-1], res[(key, "warm")][-1],
               res[(key, "alloc")][-1] / 1e9))
    shutil.rmtree(cache, ignore_errors=True)


# ---- the table -------------------------------------------------------------------------

def med(v):
    return statistics.median(v) if v else None


def report(a, rws, res, notes, info):
    local = {k: med(res.get((k, "local"))) for k, _, _, _ in rws}
    net = med(res.get(("net", "net")))
    model = info["model_bytes"]

    def cell(k, col):
        v = med(res.get((k, col)))
        if v is None:
            return "–"
        s = "%.2f" % v
        if col != "local" and local[k]:
            s += " (%.2f)" % (v / local[k])
        if col == "warm" and any(d["fuse_reads"] for d in notes.get((k, col), [])):
            s += "*"
        return s

    lines = [
        "Loaders through the mount: mcfs %s, %d CPUs, kernel %s, %s store, median of %d runs; "
        "load average %.2f at start, %.2f at end; %.1f min"
        % (info["rev"], os.cpu_count(), os.uname().release, a.store, a.runs, info["load0"],
           os.getloadavg()[0], (time.time() - info["t0"]) / 60),
        "Checkpoint: %.2f GB in %d shards, %d tensors (%s, random bits, largest %d MiB); %s; "
        "mcfs -o cache_dir=DIR%s" % (
            model / 1e9, a.shards, info["tensors"], "bf16" if torch is not None else "fp16",
            info["largest"] // MiB,
            "torch %s (framework=\"pt\")" % torch.__version__ if torch is not None else
            "no torch: numpy's framework (safe_open(f, framework=\"np\"), which mmaps too; "
            "get_tensor copies, so each byte is copied twice)",
            "".join("," + o for o in a.opts)),
        "Each tensor is copied into a preallocated buffer (vLLM's copy into the parameter). "
        "Cold: a fresh daemon, empty cache_dir, drop_caches 3%s; next pass: the same daemon, "
        "echo 1 > drop_caches%s; warm: right after it. RAM pretouched before each pass."
        % ((", then the store's files read once (nginx serves from page cache)",
            ", the store's files read again") if net else ("", "")),
        "",
        "| loader, GB/s (ratio to local) | local file in page cache | mcfs cold (%s) | "
        "cold / lesser of local and network | mcfs next pass | mcfs warm (passthrough) |"
        % a.store, "|---|---|---|---|---|---|"]
    for k, label, _, _ in rws:
        cold = med(res.get((k, "cold")))
        bar = min(x for x in (local[k], net) if x) if local[k] else None
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            label, cell(k, "local"), cell(k, "cold"),
            "%.2f" % (cold / bar) if cold and bar else "–", cell(k, "next"), cell(k, "warm")))
    if net:
        lines.append("| network limit: %d curl processes, ranged 8 MiB GETs from the same nginx "
                     "| – | %.2f | – | – | – |" % (THREADS, net))
    ac = [x / model for k, _, _, _ in rws for x in res.get((k, "alloc_cold"), [])]
    al = [x / model for k, _, _, _ in rws for x in res.get((k, "alloc"), [])]
    if al:
        lines.append("| cache directory, allocated bytes (du) per model byte | – | %.2f after "
                     "the cold pass | – | – | %.2f after all passes (%.2f-%.2f) |"
                     % (med(ac), med(al), min(al), max(al)))
    lines.append("")
    for k, label, _, _ in rws:
        parts = []
        for col in ("cold", "next", "warm"):
            ds = notes.get((k, col), [])
            if not ds:
                continue
            m = {c: med([d[c] for d in ds]) for c in COUNTERS}
            s = "%s: fuse_reads %d" % (col, m["fuse_reads"])
            if m["fuse_reads"]:
                s += " (%.0f KiB each)" % (m["fuse_read_bytes"] / m["fuse_reads"] / 1024)
            s += ", store %.2fx, passthrough_opens %d, backing_builds %d" % (
                m["store_bytes"] / model, m["passthrough_opens"], m["backing_builds"])
            if col == "cold":
                cpu = [med([d["cpu"][i] for d in ds]) for i in range(4)]
                s += ", cold_direct_opens %d, pushed %d files %.2fx" % (
                    m["cold_direct_opens"], m["push_files"], m["push_bytes"] / model)
                s += "; CPU s: reader %.2f, daemon %.2f" % (cpu[0], cpu[1])
                s += "%s in %.2f s" % (", nginx %.2f" % cpu[2] if net else "", cpu[3])
            if m["passthrough_fallbacks"]:
                s += ", passthrough_fallbacks %d" % m["passthrough_fallbacks"]
            late = sum(d["late"] for d in ds)
            if late:
                s += ", prefetch still running at the loop's end in %d pass(es)" % late
            parts.append(s)
        lines.append("- %s (medians): %s" % (k, "; ".join(parts)))
    lines.append("- raw: " + json.dumps({"%s.%s" % kc: [round(x, 3) for x in v]
                                         for kc, v in sorted(res.items())}))
    return "\n".join(lines)


def interrupted(signum, frame):
    raise KeyboardInterrupt()


def main():
    global BUF
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=parse_size, default=1 << 30,
                    help="checkpoint size, like 1G or 8900M (default 1G)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3, help="each cell is the median of these")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--store", choices=("http", "posix"), default="http")
    ap.add_argument("--opts", type=lambda v: [o for o in v.split(",") if o], default=[],
                    help="more mcfs -o options, comma-separated")
    ap.add_argument("--dir", help="work directory (default: a new one under /var/tmp)")
    ap.add_argument("--loops", type=lambda v: [o for o in v.split(",") if o], default=[],
                    help="only these rows, comma-separated keys: 1t,8t,pf,rd,gpu "
                         "(default: all)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_loaders: needs root (FUSE mounts, passthrough, drop_caches)")
    if not os.access(MCFS, os.X_OK):
        sys.exit("bench_loaders: no mcfs binary at %s (set MCFS_BIN)" % MCFS)
    if a.store == "http" and not have_nginx():
        sys.exit("bench_loaders: --store http needs nginx")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: `&` ignores it
        signal.signal(sig, interrupted)
    if torch is not None:
        torch.set_num_threads(1)
    info = {"t0": time.time(), "load0": os.getloadavg()[0],
            "rev": revision()}
    work = a.dir or tempfile.mkdtemp(prefix="mcfs-bench-loaders.", dir="/var/tmp")
    src = os.path.join(work, "src")
    os.makedirs(src, exist_ok=True)
    ng = None
    res, notes = {}, {}
    try:
        log("writing the checkpoint under %s" % src)
        files, info["tensors"], info["largest"], want = make_checkpoint(src, a.size, a.shards)
        rels = [os.path.basename(f) for f in files]
        sizes = [os.path.getsize(f) for f in files]
        info["model_bytes"] = sum(sizes)
        a.pretouch = max(3072, info["model_bytes"] // MiB + 1024)
        BUF = (torch.empty(info["largest"], dtype=torch.uint8) if torch is not None
               else np.empty(info["largest"], dtype=np.uint8))
        BUF[:] = 1  # its pages faulted in before any pass
        if a.store == "http":
            ng = Nginx(src, workdir=os.path.join(work, "nginx"), workers="auto").start()
        source = ng.url if ng else src
        rws = [r for r in rows(a.shards) if not a.loops or r[0] in a.loops]
        if not rws:
            sys.exit("bench_loaders: --loops %s names no row (1t, 8t, pf, rd, gpu)"
                     % ",".join(a.loops))
        with damon_paused():  # the passes' page cache stays (conftest.damon_paused)
            for run in range(a.runs):
                log("run %d/%d, load %.2f" % (run + 1, a.runs, os.getloadavg()[0]))
                if ng:
                    for f in files:
                        warm(f)
                    pretouch(a.pretouch)
                    res.setdefault(("net", "net"), []).append(
                        curl_limit([ng.url + "/" + r for r in rels], sizes, work))
                for row in rws:
                    for f in files:
                        warm(f)
                    pretouch(a.pretouch)
                    res.setdefault((row[0], "local"), []).append(timed(row[2], files, want)[0])
                    mcfs_passes(a, row, source, files, rels, work, want, ng, res, notes)
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        raise
    finally:
        if ng:
            ng.stop()
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    table = report(a, rws, res, notes, info)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
