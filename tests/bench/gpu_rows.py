"""Rows of tests/bench/bench_gpu.py that run loaders in processes of their own
(tests/bench/gpu_loader.py): several mcfs loaders at once, the raw network
beside cold mcfs loads, and the peer libraries (InstantTensor,
fastsafetensors, Run:ai streamer) from tmpfs and from local disk.

Every function takes the bench's `row(name, secs, nbytes, note)` and adds
its rows; times are medians of runs unless a note says otherwise.
"""
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LOADER = os.path.join(HERE, "gpu_loader.py")
sys.path.insert(0, os.path.dirname(HERE))

from conftest import mcfs_mount  # noqa: E402


def log(*a):
    print(*a, flush=True)


# After device memory is freed (torch.cuda.empty_cache()), the driver works on
# it in the background for a while, and host-to-device copies into a new
# allocation made meanwhile run slower (docs/benchmarks.md, "Device memory freed
# just before a load"). A load timed right after the previous run's free pays
# that, a large load more than the 1 GiB limit rows: every timed run waits it out.
SETTLE_S = 0.2


def settle_device():
    """Frees the caching allocator's memory and waits out the driver's work on it, so
    that a timed load starts as the first load of a process does. Needs torch."""
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    time.sleep(SETTLE_S)


class Loaders:
    """n loader processes started together (tests/bench/gpu_loader.py) for
    `runs` rounds; each round starts when every process is ready. `extra`:
    arguments of every process; `each`: a list of more arguments per process."""

    def __init__(self, loader, path, n, runs, extra=(), each=None):
        self.dir = tempfile.mkdtemp(prefix="mcfs-bench-go-")
        self.runs = runs
        self.errs = [tempfile.TemporaryFile(mode="w+") for _ in range(n)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.procs = [subprocess.Popen([sys.executable, LOADER, loader, path, "--runs",
                                        str(runs), "--barrier", self.dir] + list(extra)
                                       + list(each[i] if each else []),
                                       stdout=subprocess.PIPE, stderr=e, text=True, env=env)
                      for i, e in enumerate(self.errs)]

    def _line(self, i, want):
        line = self.procs[i].stdout.readline()
        if not line.startswith(want):
            self.procs[i].wait()
            self.errs[i].seek(0)
            raise RuntimeError("loader %d: expected %r, got %r; stderr:\n%s"
                               % (i, want, line, self.errs[i].read()[-3000:]))
        return line[len(want):].strip()

    def rounds(self):
        """Yields each round's results (one dict per process)."""
        try:
            for k in range(self.runs):
                for i in range(len(self.procs)):
                    self._line(i, "ready %d" % k)
                open(os.path.join(self.dir, "go.%d" % k), "w").close()
                yield [json.loads(self._line(i, "result ")) for i in range(len(self.procs))]
            for p in self.procs:
                p.wait(timeout=120)
        finally:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for e in self.errs:
                e.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def aggregate(res):
    """(seconds from the first start to the last end, bytes of all processes)."""
    return (max(r["t1"] for r in res) - min(r["t0"] for r in res),
            sum(r["bytes"] for r in res))


def concurrent(row, label, path, n, runs, data_len, limit):
    """n mcfs loaders at once into GPU 0; one row of their aggregate."""
    ts, per = [], []
    for res in Loaders("mcfs", path, n, runs).rounds():
        t, nbytes = aggregate(res)
        assert nbytes == n * data_len, (nbytes, n * data_len)
        ts.append(t)
        per.append(["%.2f" % (r["t1"] - r["t0"]) for r in res])
        log("%s: round of %d loaders %.3f s, each %s" % (label, n, t, " ".join(per[-1])))
    med = statistics.median(ts)
    gbs = n * data_len / med / 1e9
    row(label, ts, n * data_len, "%.2f of the pinned limit; each load took %s s (median round)"
        % (gbs / limit, "/".join(per[ts.index(sorted(ts)[len(ts) // 2])])))
    return gbs


def load_lines(log_text, k):
    return [ln for ln in log_text.splitlines() if "ioctl: loaded" in ln][-k:]


def ram_tier_concurrent(row, a, src, mnt, opts, data_len, limit, timed_load, wait_pinned,
                        daemon_env=None):
    import mcfs
    with mcfs_mount(src, mnt, opts=opts + ["log_level=debug"], env=daemon_env,
                    timeout=60) as m:
        mp = os.path.join(mnt, "model.safetensors")
        wait_pinned(mp)
        timed_load(mcfs.load_file, mp)  # fills the RAM tier
        for n in sorted({1, a.conc}):
            concurrent(row, "%d concurrent mcfs.load_file, RAM tier%s"
                       % (n, " (%s)" % daemon_env if daemon_env else ""), mp, n, a.runs,
                       data_len, limit)
            log("daemon, last loads:\n  " + "\n  ".join(load_lines(m.log(), n)))


def warm(path):
    subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=8M", "status=none"], check=True)


def curls():
    """The curl programs to measure with: the system's (with its own libcurl) and
    the one on PATH (tests/gpu/device_bundle.sh carries Debian's, with the
    libcurl that mcfs links). Returns [(label, argv0, env)] of those that run."""
    out, seen = [], set()
    plain = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for exe, env in (("/usr/bin/curl", plain), (shutil.which("curl"), dict(os.environ))):
        if not exe:
            continue
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            continue
        ver = r.stdout.split()[1]
        if ver not in seen:
            seen.add(ver)
            out.append(("curl %s" % ver, exe, env))
    return out


def curl_parallel(exe, env, url, size, n):
    part = (size + n - 1) // n
    t = time.perf_counter()
    ps = [subprocess.Popen([exe, "-sf", "-o", "/dev/null", "-r",
                            "%d-%d" % (i * part, min(size, (i + 1) * part) - 1), url], env=env)
          for i in range(n) if i * part < size]
    for p in ps:
        if p.wait() != 0:
            raise RuntimeError("curl failed: " + url)
    return time.perf_counter() - t


def network(row, a, src, fpath, mnt, opts, fsize, data_len, limit, timed_load, wait_pinned,
            pretouch):
    """Raw nginx (parallel curl to /dev/null) beside cold mcfs loads from it.

    nginx's copy of the file stays in its page cache for both (read right
    before each run), so the rows compare the client paths, as
    tests/bench/bench_remote.py does."""
    import mcfs
    from servers import Nginx
    url_of = lambda ng: ng.url + "/model.safetensors"  # noqa: E731
    with Nginx(src, workers=a.nginx_workers) as ng:
        curl = {}
        for label, exe, env in curls():
            for n in a.curl:
                ts = []
                for _ in range(a.runs):
                    warm(fpath)
                    ts.append(curl_parallel(exe, env, url_of(ng), fsize, n))
                row("raw nginx: %d processes of %s, ranged GETs to /dev/null" % (n, label), ts,
                    fsize, "nginx on loopback (%s workers), its file in the page cache"
                    % a.nginx_workers)
                curl[n] = max(curl.get(n, 0), fsize / statistics.median(ts) / 1e9)
        for spec in a.connections:
            conns, _, more = spec.partition(":")
            conns = int(conns)
            more = [o for o in more.split(",") if o]
            ts = []
            for _ in range(a.cold_runs):
                with mcfs_mount(ng.url, mnt, opts=opts + ["connections=%d" % conns,
                                                          "log_level=debug"] + more,
                                timeout=60) as m:
                    mp = os.path.join(mnt, "model.safetensors")
                    wait_pinned(mp)
                    pretouch()
                    warm(fpath)
                    t, n = timed_load(mcfs.load_file, mp)
                    assert n == data_len
                    ts.append(t)
                    log("daemon: " + " ".join(load_lines(m.log(), 1)))
            gbs = data_len / statistics.median(ts) / 1e9
            vs = min(curl) if curl else None
            row("mcfs cold, http store, %d connections%s"
                % (conns, "".join(", " + o for o in more)), ts, data_len,
                "fresh mount per run; %s" % ("%.2f of %d curl processes (the faster curl)"
                                             % (gbs / curl[vs], vs) if vs else "no curl row"))
        for _ in range(a.cold_runs):
            first = a.connections[0].split(":")[0]
            with mcfs_mount(ng.url, mnt, opts=opts + ["connections=" + first, "log_level=debug"],
                            timeout=60) as m:
                mp = os.path.join(mnt, "model.safetensors")
                wait_pinned(mp)
                pretouch()
                warm(fpath)
                concurrent(row, "%d concurrent mcfs.load_file, cold, http store" % a.conc, mp,
                           a.conc, 1, data_len, limit)
                st = m.stats()
                log("daemon: store reads %d for %d blocks; last loads:\n  %s"
                    % (st["store_reads"], (fsize + (8 << 20) - 1) // (8 << 20),
                       "\n  ".join(load_lines(m.log(), a.conc))))


PEERS = ["instanttensor", "fastsafetensors", "runai"]
DISTS = {"instanttensor": ("InstantTensor", "instanttensor"),
         "fastsafetensors": ("fastsafetensors", "fastsafetensors"),
         "runai": ("Run:ai streamer", "runai-model-streamer")}


def peer_name(peer):
    from importlib.metadata import PackageNotFoundError, version
    name, dist = DISTS[peer]
    try:
        return "%s %s" % (name, version(dist))
    except PackageNotFoundError:
        return name


def peers(row, a, fpath, data_len, want_sums, fs_of):
    """Each peer library loading the same file from tmpfs and from local disk
    (page cache dropped before each run), in a process of its own."""
    shm = "/dev/shm/mcfs-bench-model.safetensors"
    shutil.copyfile(fpath, shm)
    try:
        for peer in a.peers:
            for where, path, drop in (("tmpfs", shm, False),
                                      ("local disk (%s)" % fs_of(fpath), fpath, True)):
                extra = ["--sums"] + (["--drop-caches"] if drop else [])
                try:
                    res = [r[0] for r in Loaders(peer, path, 1, a.peer_runs or a.runs,
                                                 extra).rounds()]
                except RuntimeError as e:
                    log("not run: %s from %s: %s" % (peer, where, e))
                    continue
                same = res[0].get("sums") == want_sums
                ts = [r["t1"] - r["t0"] for r in res]
                assert all(r["bytes"] == data_len for r in res), res
                row("%s, %s" % (peer_name(peer), where), ts, data_len,
                    "bytes %s safetensors'%s" % ("equal to" if same else "DIFFER from",
                                                 "; page cache dropped" if drop else ""))
    finally:
        os.unlink(shm)


def make_file_2d(path, size, cols=4096):
    """bf16 safetensors of ~size bytes: 64 tensors of [rows, cols], random bits,
    so that slices along dim 1 are strided (a row-parallel weight)."""
    import torch
    n = 64
    rows = max(1, size // n // 2 // cols)
    per = rows * cols * 2
    header = {"__metadata__": {"format": "pt"}}
    for i in range(n):
        header["layer.%02d.weight" % i] = {"dtype": "BF16", "shape": [rows, cols],
                                          "data_offsets": [i * per, (i + 1) * per]}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    g = torch.Generator(device="cuda").manual_seed(11)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for i in range(n):
            t = torch.randint(0, 256, (per,), dtype=torch.uint8, device="cuda", generator=g)
            f.write(t.cpu().numpy().tobytes())
    return [k for k in sorted(header) if k != "__metadata__"], n * per


def together(devs, args, path, runs):
    """len(devs) mcfs loaders at once, loader i into devs[i] with args[i], for
    `runs` rounds: [(seconds from the first start to the last end, bytes as
    loaded, each rank's seconds)]."""
    out = []
    each = [["--device", d] + list(x) for d, x in zip(devs, args)]
    for res in Loaders("mcfs", path, len(devs), runs, each=each).rounds():
        t, nb = aggregate(res)
        out.append((t, nb, ["%.3f" % (r["t1"] - r["t0"]) for r in res]))
    return out


def together_row(row, label, rounds, ref, ref_name):
    """One row of together()'s rounds: the aggregate, its ratio to `ref` GB/s,
    and each rank's time in the median round."""
    ts = [r[0] for r in rounds]
    mid = rounds[ts.index(sorted(ts)[len(ts) // 2])]
    for t, _, per in rounds:
        log("%s: round %.3f s, each %s" % (label, t, " ".join(per)))
    gbs = mid[1] / mid[0] / 1e9
    row(label, ts, mid[1], "%.2f of %s; each rank's s (median round): %s"
        % (gbs / ref, ref_name, "/".join(mid[2])))


def rank_modes(names, n):
    """(label, per-rank loader arguments) of the tensor-parallel modes."""
    return [("ranks, whole tensors (1/%d of them each)" % n,
             [["--tensors"] + names[i::n] for i in range(n)]),
            ("ranks, slices of every tensor along dim 0",
             [["--rank", str(i), "--world", str(n), "--split-dim", "0"] for i in range(n)]),
            ("ranks, slices of every tensor along dim 1 (strided)",
             [["--rank", str(i), "--world", str(n), "--split-dim", "1"] for i in range(n)])]


@contextlib.contextmanager
def warm_mount(src, mnt, opts, name, wait_pinned, wait_ready):
    """A mount of src with `name` loaded once (into the RAM tier, pinned) and
    every GPU ready: yields (the mount, the file's path on it)."""
    import mcfs
    with mcfs_mount(src, mnt, opts=opts, timeout=60) as m:
        mp = os.path.join(mnt, name)
        wait_pinned(mp)
        wait_ready(m)
        mcfs.load_file(mp, device="cuda:0")
        settle_device()
        yield m, mp


def cut_rows(fpath, rank, world, block=8 << 20):
    """How many rows of rank's dim-1 slices of every tensor of `fpath` (2-D)
    a block's end cuts: each such row is copied in two parts, one from each
    block."""
    with open(fpath, "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(hlen))
    n = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        rows, cols = t["shape"]
        item = (t["data_offsets"][1] - t["data_offsets"][0]) // (rows * cols)
        part = cols // world * item
        start = 8 + hlen + t["data_offsets"][0] + rank * part
        n += sum((start + r * cols * item) // block != (start + r * cols * item + part - 1)
                 // block for r in range(rows))
    return n


def ranks_alone(row, a, src, mnt, opts, wait_pinned, wait_ready, limit):
    """Each rank of world 2 alone into cuda:0, from the RAM tier: whole
    tensors, slices along dim 0 and along dim 1 (strided). What one rank's
    copies cost, on a machine of any number of GPUs; the note gives the
    ratio to the pinned limit and, for dim 1, how many of the rank's rows
    the blocks' ends cut (cut_rows)."""
    name = "model2d.safetensors"
    fpath = os.path.join(src, name)
    names, _ = make_file_2d(fpath, int(a.size_gib * (1 << 30)))
    try:
        with warm_mount(src, mnt, opts, name, wait_pinned, wait_ready) as (m, mp):
            for label, args in rank_modes(names, 2):
                for rank, extra in enumerate(args):
                    res = [r[0] for r in Loaders("mcfs", mp, 1, a.runs,
                                                 each=[["--device", "cuda:0"] + extra])
                           .rounds()]
                    ts = [r["t1"] - r["t0"] for r in res]
                    gbs = res[0]["bytes"] / statistics.median(ts) / 1e9
                    note = "%.2f of the pinned limit" % (gbs / limit)
                    if "dim 1" in label:
                        note += "; %d rows cut by block ends" % cut_rows(fpath, rank, 2)
                    row("one GPU, RAM tier: %s, rank %d of 2 alone" % (label, rank), ts,
                        res[0]["bytes"], note)
    finally:
        os.unlink(fpath)


def multi(row, a, src, mnt, opts, wait_pinned, wait_ready, pretouch):
    """Issue 24, items 3 and 6: every GPU of the node at once. The pinned H2D
    limit of each GPU alone and of all at once; then replicas (the whole file
    into each GPU), ranks with whole tensors (1/N of the tensors each) and
    ranks with slices of every tensor (along dim 0, contiguous, and dim 1,
    strided), from the RAM tier (warm), and cold from nginx on loopback with
    the network's limit (parallel curl) measured in the same run."""
    import torch
    from servers import Nginx, have_nginx
    n = torch.cuda.device_count()
    if n < 2:
        log("not run: multi (%d GPU here; it needs 2 or more)" % n)
        return
    devs = ["cuda:%d" % i for i in range(n)]
    for d in devs:
        ts = [aggregate(r)[0] for r in Loaders("h2d", "-", 1, a.runs, each=[["--device", d]])
              .rounds()]
        row("multi: pinned H2D limit, %s alone (1 GiB)" % d, ts, 1 << 30)
    ts = [aggregate(r)[0] for r in Loaders("h2d", "-", n, a.runs,
                                           each=[["--device", d] for d in devs]).rounds()]
    row("multi: pinned H2D limit, %d GPUs at once (1 GiB each)" % n, ts, n << 30)
    limit = n * (1 << 30) / statistics.median(ts) / 1e9
    name = "model2d.safetensors"
    fpath = os.path.join(src, name)
    names, data_len = make_file_2d(fpath, int(a.size_gib * (1 << 30)))
    modes = [("replicas, the whole file into each GPU", [[] for _ in devs])] \
        + rank_modes(names, n)
    try:
        with warm_mount(src, mnt, opts, name, wait_pinned, wait_ready) as (m, mp):
            for label, args in modes:
                together_row(row, "multi, RAM tier: %s" % label,
                             together(devs, args, mp, a.runs), limit,
                             "the %d-GPU pinned aggregate" % n)
        if not have_nginx():
            log("not run: multi, cold (nginx not installed)")
            return
        size = os.path.getsize(fpath)
        with Nginx(src, workers=a.nginx_workers) as ng:
            net = 0
            for clabel, exe, env in curls():
                ts = []
                for _ in range(a.runs):
                    warm(fpath)
                    ts.append(curl_parallel(exe, env, ng.url + "/" + name, size, 16))
                row("multi: network limit, 16 processes of %s, ranged GETs to /dev/null"
                    % clabel, ts, size, "nginx on loopback, its file in the page cache")
                net = max(net, size / statistics.median(ts) / 1e9)
            for label, args in modes:
                rounds = []
                for _ in range(a.cold_runs):  # a fresh daemon each: its RAM tier empty
                    with mcfs_mount(ng.url, mnt, opts=opts, timeout=60) as m:
                        mp = os.path.join(mnt, name)
                        wait_pinned(mp)
                        wait_ready(m)
                        pretouch()
                        warm(fpath)
                        rounds += together(devs, args, mp, 1)
                together_row(row, "multi, cold (http): %s" % label, rounds, net,
                             "the network limit (the faster curl)")
    finally:
        os.unlink(fpath)
