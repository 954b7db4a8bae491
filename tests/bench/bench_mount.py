#!/usr/bin/env python3
"""Reads of a file held by mcfs, through the mount, beside the same reads of a
local file in page cache, in one run (issue 14). One table per run.

    tests/bench/bench_mount.py                      # 2 GiB model, RUNS=3
    MODEL_MIB=8192 RUNS=5 tests/bench/bench_mount.py

Environment (all optional): MODEL_MIB (2048), RUNS (3: each figure is the
median), MCFS_BIN, DATA (a directory for the model and the cache directories;
default a new one under /var/tmp, removed at the end unless KEEP=1).

Columns: "local" reads the store's own file (a plain local file) from page
cache; "passthrough" reads it through an mcfs mount (posix store, cache_dir)
after one cold read made it complete, so every open after it is passthrough;
"cached" is the same with passthrough=off, the file in the RAM tier and the
mount's page cache. Every column is warm: read once before it is timed.

Rows: dd to /dev/null with bs=1M and bs=8M, one reader; dd bs=1M, 4 readers
on the 4 quarters at once; a vLLM-style loop (safe_open, get_tensor of each
tensor) and safetensors' load_file, on the CPU with numpy (each tensor is a
copy, so every byte is read: torch's CPU tensors are views of an mmap that
nothing would touch). Where torch sees a GPU: the same loop with each tensor
`.to("cuda")`, load_file(device="cuda"), and, with transformers installed,
`from_pretrained(..., device_map="cuda")` of a multi-shard Llama (about
2 GB in bf16, 4 shards, random weights) saved beside the model. The
safetensors rows are skipped, saying so, where the package is missing (the
model is then a plain file of random bytes).

Cold rows (a second table): the model served by nginx on loopback, read
through a fresh mount of the http store (RAM tier only, empty; with the
default cold_direct_io=auto and with cold_direct_io=off; timed once
the daemon's start-up work is done: the tier faulted in, and pinned on a GPU
machine) by dd bs=1M,
1 reader and 4 readers on quarters, beside N curl processes of parallel
ranged GETs to /dev/null (N = the CPU count, at least 8) and the same dd
readers on the local file in page cache (the warm table's figures). COLD=0
skips them; they need nginx.

Memory: after the reads, the RAM tier's bytes in use plus the page cache of
the file's copies (fincore: the backing file; without passthrough the mount's
own pages), beside the file's size: 1.0x means the model is held in RAM once.
The growth of /proc/meminfo's Cached since the mount (caches dropped before
it) is shown beside: the store is read and the disk tier written with
O_DIRECT, so on a quiet machine that growth is the mount's copies.

Needs root (FUSE mounts, and passthrough's CAP_SYS_ADMIN). Unmounts on exit.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
from servers import Nginx, have_nginx  # noqa: E402
MCFS = os.environ.get("MCFS_BIN", os.path.join(ROOT, "build", "fs", "mcfs"))
MiB = 1 << 20
RUNS = int(os.environ.get("RUNS", "3"))
MODEL_MIB = int(os.environ.get("MODEL_MIB", "2048"))

try:
    import numpy as np
except ImportError:
    np = None
try:
    import safetensors
    from safetensors.numpy import save_file
except ImportError:
    safetensors = None
try:
    import torch
except ImportError:
    torch = None
CUDA = bool(torch is not None and torch.cuda.is_available())
try:
    import transformers
except ImportError:
    transformers = None
LLAMA = "llama"  # the multi-shard model's directory beside the model file


def make_model(path, size):
    """A safetensors file of about `size` bytes (64 MiB float16 tensors), or
    random bytes when safetensors or numpy is missing."""
    if safetensors and np is not None:
        rng = np.random.default_rng(14)
        n = max(1, size // (64 * MiB))
        tensors = {"layer.%d.weight" % i: rng.integers(0, 65535, (4096, 8192), dtype=np.uint16)
                   .view(np.float16) for i in range(n)}
        save_file(tensors, path)
        return
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 64 * MiB)
            f.write(os.urandom(n))
            left -= n


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Mount:
    def __init__(self, src, mnt, cache, opts):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        self.cache = cache
        self.log = open(os.path.join(os.path.dirname(mnt), os.path.basename(mnt) + ".log"), "w")
        self.proc = subprocess.Popen([MCFS, "mount", src, mnt, "-f", "-o",
                                      ",".join(["cache_dir=" + cache] + opts)],
                                     stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while not self.mounted():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("mcfs did not mount: " + open(self.log.name).read())
            time.sleep(0.05)

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(ln.split()[1] == self.mnt for ln in f)

    def stats(self):
        raw = os.getxattr(self.mnt, "user.mcfs.stats").decode()
        return dict((k, int(v)) for k, v in (ln.split() for ln in raw.splitlines()))

    def settle(self):
        for _ in range(1200):
            s = self.stats()
            if s["disk_queued"] == 0 and s["inflight"] == 0 and s["disk_owed"] == 0:
                return
            time.sleep(0.05)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def dd(path, bs, skip=0, count=None):
    cmd = ["dd", "if=" + path, "of=/dev/null", "bs=%d" % bs, "status=none"]
    if skip:
        cmd.append("skip=%d" % skip)
    if count is not None:
        cmd.append("count=%d" % count)
    return subprocess.Popen(cmd)


def dd_one(path, bs):
    return lambda: dd(path, bs).wait()


def dd_four(path, size):
    quarter = (size + 4 * MiB - 1) // (4 * MiB)   # in 1 MiB blocks

    def go():
        ps = [dd(path, MiB, skip=i * quarter, count=quarter) for i in range(4)]
        for p in ps:
            p.wait()
    return go


def st_loop(path):
    def go():
        with safetensors.safe_open(path, framework="np") as f:
            for k in f.keys():
                f.get_tensor(k)
    return go


def st_load(path):
    def go():
        from safetensors.numpy import load_file
        load_file(path)
    return go


def st_loop_cuda(path):
    def go():
        with safetensors.safe_open(path, framework="pt") as f:
            for k in f.keys():
                f.get_tensor(k).to("cuda:0")
        torch.cuda.synchronize()
    return go


def st_load_cuda(path):
    def go():
        from safetensors.torch import load_file
        load_file(path, device="cuda:0")
        torch.cuda.synchronize()
    return go


def hf_load(path):
    """from_pretrained of the Llama directory beside `path` (the model file)."""
    d = os.path.join(os.path.dirname(path), LLAMA)

    def go():
        m = transformers.AutoModelForCausalLM.from_pretrained(d, device_map="cuda:0",
                                                              dtype=torch.bfloat16)
        torch.cuda.synchronize()
        del m
        torch.cuda.empty_cache()
    return go


def rows(size, llama_size):
    """[(name, make(path) -> fn, bytes read)]."""
    out = [("dd bs=1M, 1 reader", lambda p: dd_one(p, MiB), size),
           ("dd bs=8M, 1 reader", lambda p: dd_one(p, 8 * MiB), size),
           ("dd bs=1M, 4 readers on quarters", lambda p: dd_four(p, size), size)]
    if safetensors and np is not None:
        out += [("safe_open + get_tensor loop (numpy, CPU)", st_loop, size),
                ("safetensors load_file (numpy, CPU)", st_load, size)]
    if safetensors and CUDA:
        out += [("safe_open + get_tensor loop, .to(\"cuda\")", st_loop_cuda, size),
                ("safetensors.torch load_file(device=\"cuda\")", st_load_cuda, size)]
    if llama_size:
        out += [("transformers from_pretrained, 4 shards, device_map=\"cuda\"", hf_load,
                 llama_size)]
    return out


def make_llama(d):
    """A Llama of about 2 GB in bf16, saved as 4 shards of random weights with
    its index and config: what transformers' from_pretrained reads. Returns
    the shards' bytes."""
    from safetensors.torch import save_file
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                                   num_attention_heads=16, num_key_value_heads=16,
                                   vocab_size=32000, tie_word_embeddings=False)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in transformers.LlamaForCausalLM(cfg).state_dict().items()}
    os.makedirs(d, exist_ok=True)
    names = sorted(shapes)
    shards = [names[i::4] for i in range(4)]
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    g = torch.Generator().manual_seed(14)
    for i, keys in enumerate(shards):
        fn = "model-%05d-of-00004.safetensors" % (i + 1)
        ts = {k: (torch.randn(shapes[k], generator=g) * 0.02).to(torch.bfloat16) for k in keys}
        save_file(ts, os.path.join(d, fn), metadata={"format": "pt"})
        for k in keys:
            index["weight_map"][k] = fn
            index["metadata"]["total_size"] += ts[k].numel() * 2
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    cfg.save_pretrained(d)
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
               if n.endswith(".safetensors"))


def read_all(top):
    """Reads every file under `top` once (through a mount: makes each one complete)."""
    for dp, _, fns in os.walk(top):
        for fn in fns:
            dd(os.path.join(dp, fn), 8 * MiB).wait()


def measure(fn, size):
    fn()   # warm: the page cache (or the backing file's) holds it now
    secs = [timed(fn) for _ in range(RUNS)]
    return size / statistics.median(secs) / 1e9


def curl_ranged(url, size, n):
    """n curl processes, each a ranged GET of its part, to /dev/null: seconds."""
    part = (size + n - 1) // n
    t = time.perf_counter()
    ps = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", "-r",
                            "%d-%d" % (i * part, min(size, (i + 1) * part) - 1), url])
          for i in range(n) if i * part < size]
    for p in ps:
        if p.wait() != 0:
            raise RuntimeError("curl failed: " + url)
    return time.perf_counter() - t


def wait_pinned(path, timeout=600):
    """On a GPU machine the RAM tier is pinned in the background after the
    mount: wait for it, so that pinning is not timed with the reads."""
    import mcfs
    t0 = time.time()
    while time.time() - t0 < timeout:
        i = mcfs.info(path)
        if not i or not i["gpu_ok"] or i["pinned_bytes"] >= i["ram_bytes"]:
            return
        time.sleep(0.2)
    raise RuntimeError("the RAM tier was not pinned after %d s" % timeout)


def wait_started(m, path, timeout=600):
    """A fresh daemon's start-up work: the RAM tier faulted in (ram_prefault,
    in the background) and, on a GPU machine, pinned. The cold rows time a
    running daemon's first read of a file, as a node that switches models
    sees it, not the daemon's first seconds, where the fetch threads fault
    (and the kernel zeroes) the tier's pages themselves."""
    t0 = time.time()
    while m.stats().get("ram_prefault") == 1:  # 1: running (cache/counters.h)
        if time.time() - t0 > timeout:
            raise RuntimeError("the RAM tier was not faulted in after %d s" % timeout)
        time.sleep(0.1)
    wait_pinned(path, timeout)


def cold(data, src, size, local):
    """The cold table's rows: {name: (mcfs GB/s, curl GB/s, local GB/s, mcfs GB/s
    with cold_direct_io=off)}."""
    n = max(8, os.cpu_count())
    out = {}
    with Nginx(src, workdir=os.path.join(data, "nginx"), workers="auto") as ng:
        url = ng.url + "/model.safetensors"
        curl_ranged(url, size, n)  # warm nginx's page cache
        gbs_curl = size / statistics.median([curl_ranged(url, size, n) for _ in range(RUNS)]) / 1e9
        for name, mk in (("cold dd bs=1M, 1 reader", lambda p: dd_one(p, MiB)),
                         ("cold dd bs=1M, 4 readers on quarters", lambda p: dd_four(p, size))):
            gbs = []
            for extra in ([], ["cold_direct_io=off"]):
                secs = []
                for _ in range(RUNS):
                    m = Mount(ng.url, os.path.join(data, "mnt-cold"), "",
                              ["ram_cache=%dM" % (size // MiB + 512), "open_check=ttl"] + extra)
                    try:
                        mpath = os.path.join(m.mnt, "model.safetensors")
                        wait_started(m, mpath)
                        secs.append(timed(mk(mpath)))
                    finally:
                        m.close()
                gbs.append(size / statistics.median(secs) / 1e9)
            out[name] = (gbs[0], gbs_curl, local[name.replace("cold ", "")]["local"], gbs[1])
    return n, out


def cached_bytes(path):
    """Page-cache bytes of `path` (fincore), or None without fincore."""
    if not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.split() else None


def backing_files(cache):
    """The disk tier's version files: a complete one is its file's backing file."""
    out = []
    for d in os.listdir(cache):
        fd = os.path.join(cache, d, "blocks")
        if os.path.isdir(fd):
            out += [os.path.join(fd, n) for n in os.listdir(fd)]
    return out


def meminfo_cached():
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith("Cached:"):
                return int(ln.split()[1]) * 1024
    return 0


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def held(m, cached0, mpath, passthrough, size):
    """RAM tier in use + the page cache of the file's copies: the backing file's
    (fincore), and without passthrough the mount's own pages (fincore through the
    mount; with passthrough an mmap of the mount maps the backing file, so it is not
    counted twice). The growth of /proc/meminfo's Cached since the mount is shown
    too: it also catches the mount's pages under passthrough, but counts every
    other process's page cache as well (noisy on a shared machine)."""
    ram = m.stats()["ram_bytes_used"]
    pc_backing = sum(cached_bytes(p) or 0 for p in backing_files(m.cache))
    pc_mount = 0 if passthrough else (cached_bytes(mpath) or 0)
    grown = meminfo_cached() - cached0
    return ("RAM tier %.2f GB + page cache %.2f GB (backing file %.2f, mount %.2f) = %.2fx the "
            "file; Cached grew %.2f GB since the mount"
            % (ram / 1e9, (pc_backing + pc_mount) / 1e9, pc_backing / 1e9, pc_mount / 1e9,
               (ram + pc_backing + pc_mount) / size, grown / 1e9))


def main():
    if os.geteuid() != 0:
        sys.exit("bench_mount.py needs root (FUSE mounts, passthrough)")
    data = os.environ.get("DATA") or tempfile.mkdtemp(prefix="mcfs-bench-mount-", dir="/var/tmp")
    src = os.path.join(data, "src")
    os.makedirs(src, exist_ok=True)
    model = os.path.join(src, "model.safetensors")
    if not os.path.exists(model):
        make_model(model, MODEL_MIB * MiB)
    size = os.path.getsize(model)
    llama_size = 0
    if CUDA and transformers and safetensors:
        llama_dir = os.path.join(src, LLAMA)
        if not os.path.isdir(llama_dir):
            make_llama(llama_dir)
        llama_size = sum(os.path.getsize(os.path.join(llama_dir, n)) for n in os.listdir(llama_dir)
                         if n.endswith(".safetensors"))
    ram = "%dM" % ((size + llama_size) // MiB + 512)
    table = {}
    notes = []
    mounts = []
    all_rows = rows(size, llama_size)
    try:
        for label, extra in (("passthrough", []), ("cached", ["passthrough=off"])):
            cache = os.path.join(data, "cache-" + label)
            shutil.rmtree(cache, ignore_errors=True)
            drop_caches()
            cached0 = meminfo_cached()
            m = Mount(src, os.path.join(data, "mnt-" + label), cache,
                      ["ram_cache=" + ram, "keep_cache=true"] + extra)
            mounts.append(m)
            mpath = os.path.join(m.mnt, "model.safetensors")
            dd(mpath, 8 * MiB).wait()  # cold: through the cache, completes the file
            m.settle()
            for name, mk, nbytes in all_rows:
                if mk is hf_load:
                    continue
                table.setdefault(name, {})[label] = measure(mk(mpath), nbytes)
            s = m.stats()
            # memory before the Llama's shards are read too: the model file's copies
            notes.append("%s: %s; passthrough_opens %d, backing_builds %d, fuse_reads %d"
                         % (label, held(m, cached0, mpath, label == "passthrough", size),
                            s["passthrough_opens"], s["backing_builds"], s["fuse_reads"]))
            if llama_size:
                read_all(os.path.join(m.mnt, LLAMA))  # cold: completes each shard
                m.settle()
                for name, mk, nbytes in all_rows:
                    if mk is hf_load:
                        table.setdefault(name, {})[label] = measure(mk(mpath), nbytes)
            m.close()
            mounts.remove(m)
        for name, mk, nbytes in all_rows:
            table[name]["local"] = measure(mk(model), nbytes)
        cold_n, cold_rows = (0, {})
        if os.environ.get("COLD", "1") != "0":
            if have_nginx():
                cold_n, cold_rows = cold(data, src, size, table)
            else:
                notes.append("cold rows skipped: nginx is not installed")
    finally:
        for m in mounts:
            m.close()
        if not os.environ.get("KEEP") and not os.environ.get("DATA"):
            shutil.rmtree(data, ignore_errors=True)

    print("mcfs mount vs local page cache: %.2f GB file, %d cores, median of %d, GB/s"
          % (size / 1e9, os.cpu_count(), RUNS))
    if not safetensors:
        print("(safetensors rows skipped: the safetensors package is not installed)")
    elif not CUDA:
        print("(no GPU that torch can use: the .to(\"cuda\") and from_pretrained rows are skipped)")
    elif not transformers:
        print("(transformers is not installed: the from_pretrained row is skipped)")
    print("| read | local page cache | mcfs passthrough | ratio | mcfs passthrough=off | ratio |")
    print("|---|---|---|---|---|---|")
    for name, v in table.items():
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |"
              % (name, v["local"], v["passthrough"], v["passthrough"] / v["local"],
                 v["cached"], v["cached"] / v["local"]))
    for n in notes:
        print("- " + n)
    if cold_rows:
        print()
        print("cold reads through a fresh mount of nginx on loopback (http store, RAM tier "
              "only), GB/s; the bar is the lesser of %d curl processes and the local page cache"
              % cold_n)
        print("| read | %d curl processes, ranged GETs | local page cache | mcfs cold | "
              "mcfs / lesser | mcfs cold, cold_direct_io=off | mcfs / lesser |" % cold_n)
        print("|---|---|---|---|---|---|---|")
        for name, (gbs, gbs_curl, gbs_local, gbs_pc) in cold_rows.items():
            bar = min(gbs_curl, gbs_local)
            print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |"
                  % (name, gbs_curl, gbs_local, gbs, gbs / bar, gbs_pc, gbs_pc / bar))
    print(json.dumps({"size": size, "llama_size": llama_size, "runs": RUNS, "table": table,
                      "cold": cold_rows}))


if __name__ == "__main__":
    main()
