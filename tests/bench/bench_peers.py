#!/usr/bin/env python3
"""mcfs beside its limits and its peers (issue 4), on data this script makes
and loopback servers it starts, all in one run.

    tests/bench/bench_peers.py                  # RUNS=3, 4 GiB model, ~25 min
    RUNS=5 MODEL_MIB=4096 tests/bench/bench_peers.py

Environment (all optional): RUNS (3), MODEL_MIB (4096: the safetensors file),
PAR_MIB (512: each of the 4 files of "4 readers"), RAND_N (256: random 1 MiB
reads), SMALL_N (2000: files of the small tree), MCFS_BIN, MCFS_OPTS (extra -o
for every mcfs mount), WORKLOADS (comma list of seq,par4,rand,st,ls,prefetch),
KEEP=1 (keep the data directory under /var/tmp for another run: DATA=path).

Servers: nginx serves the data over http (the main server: mcfs http store,
rclone's http backend, curl), and Swift with s3api serves the same files as
S3 objects (single PUTs) for s3fs, which needs S3, and for the mcfs s3 store.

Columns, per workload:
  limits   raw server: curl to /dev/null (8 parallel ranged GETs for one file,
           one GET per file for 4 files, one keep-alive connection for the
           random reads); local: the same read of the local file from page
           cache.
  cold     a fresh mount whose own caches are empty (rclone's and s3fs's
           cache directories wiped); the server's copy is in the server's
           page cache (re-read right before), so the columns compare clients.
  warm     the same workload again right after, on the same mount.
Peers: rclone mount (http -> nginx) with --vfs-cache-mode off and full, and
s3fs (-> Swift) with use_cache; their defaults otherwise.

Method (../shared/notes/benchmarking.md): RAM is pretouched before every timed
measurement, each figure is the median of RUNS runs, ratios are taken between
medians of the same run. The nginx access log gives the bytes each client
fetched ($body_bytes_sent), so the random-read row reports fetched / asked.

Every mount is unmounted and every server stopped on exit, also on Ctrl-C.
Needs root (FUSE, drop-in mounts); installs rclone and s3fs with apt-get when
missing.
"""
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift  # noqa: E402
from bench_remote import curl_args, parallel_ranges, revision, stats as mcfs_stats  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
MCFS = os.environ.get("MCFS_BIN", os.path.join(ROOT, "build", "fs", "mcfs"))
MiB = 1 << 20
RUNS = int(os.environ.get("RUNS", "3"))
MODEL_MIB = int(os.environ.get("MODEL_MIB", "4096"))
PAR_MIB = int(os.environ.get("PAR_MIB", "512"))
RAND_N = int(os.environ.get("RAND_N", "256"))
SMALL_N = int(os.environ.get("SMALL_N", "2000"))
# The RAM tier holds the whole model (so `mcfs prefetch` of it means something)
# and there is no disk tier (cold means cold: the peers keep nothing either);
# everything else is mcfs's default.
MCFS_OPTS = ["ram_cache=%dM" % (MODEL_MIB + 1024), "cache_dir="] + [
    o for o in os.environ.get("MCFS_OPTS", "").split(",") if o]
# RAM touched and freed right before each timed step: at least what the step's
# page cache will take (the model), so no reader pays this VM's slow first touch
PRETOUCH_MIB = int(os.environ.get("PRETOUCH_MIB", str(max(3072, MODEL_MIB + 1024))))
WORKLOADS = os.environ.get("WORKLOADS", "seq,par4,rand,st,ls,prefetch").split(",")
BUCKET = "bench"
MODEL = "model.safetensors"
PAR = ["par/p%d.bin" % i for i in range(4)]


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def pretouch():
    """Touch and free RAM (notes/benchmarking.md: first touch of freed RAM is slow)."""
    sh("dd if=/dev/zero of=/dev/shm/mcfs-pretouch bs=1M count=%d status=none;"
       "rm -f /dev/shm/mcfs-pretouch" % PRETOUCH_MIB, shell=True)


def warm_files(paths):
    for p in paths:
        sh(["dd", "if=" + p, "of=/dev/null", "bs=4M", "status=none"])


# ---- data -------------------------------------------------------------------

def write_safetensors(path, size):
    """A safetensors file of about `size` bytes: 32 MiB F16 matrices, each
    followed by a small F32 vector, as in a transformer checkpoint. Written
    by hand (header + bytes from urandom) so it never sits in RAM whole."""
    big, small = 4096 * 4096 * 2, 4096 * 4
    n = max(1, size // (big + small))
    hdr, off = {"__metadata__": {"format": "np"}}, 0
    for i in range(n):
        hdr["layers.%d.weight" % i] = {"dtype": "F16", "shape": [4096, 4096],
                                       "data_offsets": [off, off + big]}
        off += big
        hdr["layers.%d.norm" % i] = {"dtype": "F32", "shape": [4096],
                                     "data_offsets": [off, off + small]}
        off += small
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        left = off
        while left:
            k = min(left, 16 * MiB)
            f.write(os.urandom(k))
            left -= k


def make_data(data):
    log("generating data under %s" % data)
    os.makedirs(os.path.join(data, "par"), exist_ok=True)
    write_safetensors(os.path.join(data, MODEL), MODEL_MIB * MiB)
    for p in PAR:
        sh(["dd", "if=/dev/urandom", "of=" + os.path.join(data, p), "bs=1M",
            "count=%d" % PAR_MIB, "status=none"])
    rng = random.Random(4)
    per_dir = 100
    for i in range(SMALL_N):
        d = os.path.join(data, "small", "d%02d" % (i // per_dir))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%04d.json" % i), "wb") as f:
            f.write(os.urandom(rng.randint(200, 64 * 1024)))
    sh(["sync"])


def swift_upload(sw, data):
    """Every file as one object (single PUT: no SLO segments), 8 at a time."""
    s3 = sw.s3()
    s3.create_bucket(Bucket=BUCKET)
    keys = []
    for dp, _, fns in os.walk(data):
        for fn in fns:
            keys.append(os.path.relpath(os.path.join(dp, fn), data))
    keys.sort(key=lambda k: -os.path.getsize(os.path.join(data, k)))
    errors = []

    def worker(part):
        c = sw.s3()
        for k in part:
            try:
                with open(os.path.join(data, k), "rb") as f:
                    c.put_object(Bucket=BUCKET, Key=k, Body=f)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append("%s: %s" % (k, e))
    ts = [threading.Thread(target=worker, args=(keys[i::8],)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("upload to Swift failed: " + errors[0])


def swift_data_files(sw_dir):
    """The Swift object files (.data), by size: the server-side copies to warm."""
    out = {}
    for dp, _, fns in os.walk(os.path.join(sw_dir, "node")):
        for fn in fns:
            if fn.endswith(".data"):
                p = os.path.join(dp, fn)
                out.setdefault(os.path.getsize(p), []).append(p)
    return out


# ---- mounts -----------------------------------------------------------------

def fuse_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1].encode().decode("unicode_escape") == path and \
                    fields[2].startswith("fuse"):
                return True
    return False


PREFAULT_S = []  # seconds each mcfs mount took to fault its RAM tier in


class FuseMount:
    """One FUSE daemon in the foreground, in its own session (Ctrl-C reaches
    only this script, which unmounts it)."""

    live = set()  # every mount not yet stopped, for the final cleanup

    def __init__(self, cmd, mnt, env=None, logpath=None, ready=None):
        self.cmd, self.mnt, self.env, self.logpath = cmd, mnt, env, logpath
        self.ready = ready  # a regex the log shows once start-up work is done
        self.proc = None

    def start(self, timeout=30):
        os.makedirs(self.mnt, exist_ok=True)
        full = dict(os.environ)
        full.pop("AWS_CA_BUNDLE", None)  # rclone and s3fs try to read it
        full.update(self.env or {})
        logf = open(self.logpath, "ab")
        log_from = logf.tell()
        self.proc = subprocess.Popen(self.cmd, stdout=logf, stderr=logf, env=full,
                                     start_new_session=True)
        logf.close()
        FuseMount.live.add(self)
        deadline = time.time() + timeout
        while not fuse_mounted(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("%s did not mount: see %s" % (self.cmd[0], self.logpath))
            time.sleep(0.05)
        # mcfs faults its RAM tier in after mounting (ram_prefault), as a node
        # would long before its first read; time reads, not that
        while self.ready:
            with open(self.logpath, "rb") as f:
                f.seek(log_from)
                m = re.search(self.ready, f.read())
                if m:
                    t = re.search(rb"faulted in in ([0-9.]+) s", m.group(0))
                    if t:
                        PREFAULT_S.append(float(t.group(1)))
                    break
            if self.proc.poll() is not None or time.time() > deadline + 60:
                self.stop()
                raise RuntimeError("%s: no start-up line: see %s" % (self.cmd[0], self.logpath))
            time.sleep(0.05)
        return self

    def pid(self):
        return self.proc.pid

    def stop(self):
        for cmd in (["fusermount3", "-u", self.mnt], ["umount", self.mnt],
                    ["umount", "-l", self.mnt]):
            if not fuse_mounted(self.mnt):
                break
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.1)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        FuseMount.live.discard(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class System:
    """A client under test: how to mount it fresh and empty."""

    def __init__(self, key, label, cmd, log=None, cache=None, env=None, is_mcfs=False):
        self.key, self.label, self.cmd = key, label, cmd
        self.log = log            # the nginx access log that sees its requests, or None
        self.cache = cache        # its cache directory, wiped before each mount
        self.env = env
        self.is_mcfs = is_mcfs

    def mount(self, mnt, logdir):
        if self.cache:
            shutil.rmtree(self.cache, ignore_errors=True)
            os.makedirs(self.cache)
        cmd = [a.replace("{MNT}", mnt) for a in self.cmd]
        ready = rb"RAM tier: .*(faulted in in [0-9.]+ s|faults in on first use)" \
            if self.is_mcfs and "ram_prefault=false" not in MCFS_OPTS else None
        return FuseMount(cmd, mnt, self.env, os.path.join(logdir, self.key + ".log"), ready)


class AccessLog:
    """Bytes nginx sent ($body_bytes_sent) from a point on."""
    pat = re.compile(rb'" (\d{3}) (\d+) "')

    def __init__(self, path):
        self.path = path
        self.pos = os.path.getsize(path) if os.path.exists(path) else 0

    def bytes(self):
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            return sum(int(m.group(2)) for m in self.pat.finditer(f.read()))


# ---- workloads: each reads under `root` and returns MiB/s (ls: ms) ----------

def w_seq(root):
    t = time.perf_counter()
    sh(["dd", "if=" + os.path.join(root, MODEL), "of=/dev/null", "bs=1M", "status=none"])
    return os.path.getsize(os.path.join(root, MODEL)) / MiB / (time.perf_counter() - t)


def w_par4(root):
    t = time.perf_counter()
    ps = [subprocess.Popen(["dd", "if=" + os.path.join(root, p), "of=/dev/null", "bs=1M",
                            "status=none"]) for p in PAR]
    if any(p.wait() for p in ps):
        raise RuntimeError("dd failed under " + root)
    return 4 * PAR_MIB / (time.perf_counter() - t)


def rand_offsets(size):
    rng = random.Random(42)
    return [rng.randrange(0, (size - MiB) // 4096) * 4096 for _ in range(RAND_N)]


def w_rand(root):
    path = os.path.join(root, MODEL)
    offs = rand_offsets(os.path.getsize(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        t = time.perf_counter()
        for o in offs:
            if len(os.pread(fd, MiB, o)) != MiB:
                raise RuntimeError("short read at %d of %s" % (o, path))
        return RAND_N / (time.perf_counter() - t)
    finally:
        os.close(fd)


ST_PROG = """
import sys, time
from safetensors import safe_open
t = time.perf_counter(); n = 0
with safe_open(sys.argv[1], framework="numpy") as f:
    for k in f.keys():
        n += f.get_tensor(k).nbytes
print(n, time.perf_counter() - t)
"""


def w_st(root):
    out = subprocess.run([sys.executable, "-c", ST_PROG, os.path.join(root, MODEL)],
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]) / MiB / float(out[1])


LS_FILES = {}  # root -> regular files ls -lR listed (checked against SMALL_N)


def w_ls(root):
    t = time.perf_counter()
    out = subprocess.run(["ls", "-lR", os.path.join(root, "small")], check=True,
                         capture_output=True).stdout
    ms = (time.perf_counter() - t) * 1000
    LS_FILES[root] = sum(1 for ln in out.splitlines() if ln.startswith(b"-"))
    return ms


WL = {  # key: (row label, function, unit, server-side files it reads)
    "seq": ("sequential read, dd bs=1M, %d MiB file" % MODEL_MIB, w_seq, "MiB/s", [MODEL]),
    "par4": ("4 readers on 4 files of %d MiB, dd bs=1M" % PAR_MIB, w_par4, "MiB/s", PAR),
    "rand": ("random 1 MiB reads (%d preads), 1 reader" % RAND_N, w_rand, "MiB/s", [MODEL]),
    "st": ("every tensor, safetensors safe_open+get_tensor (numpy)", w_st, "MiB/s", [MODEL]),
    "ls": ("`ls -lR` of %d small files in %d dirs" % (SMALL_N, (SMALL_N + 99) // 100),
           w_ls, "ms", []),
}


# ---- limits: the raw server ---------------------------------------------------

def curl_files(urls, total, extra):
    t = time.perf_counter()
    ps = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", *extra, u]) for u in urls]
    if any(p.wait() for p in ps):
        raise RuntimeError("curl failed: " + urls[0])
    return total / MiB / (time.perf_counter() - t)


def curl_random(url, size, extra, work):
    """The random reads as ranged GETs over one keep-alive connection (one curl,
    one URL block per read, joined with `next`)."""
    cfg = os.path.join(work, "curl-random.cfg")
    with open(cfg, "w") as f:
        for i, o in enumerate(rand_offsets(size)):
            if i:
                f.write("next\n")
            f.write('url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"\nsilent\nfail\n'
                    % (url, o, o + MiB - 1))
            for a in extra:
                f.write(a + "\n")
    t = time.perf_counter()
    sh(["curl", "-K", cfg])
    return RAND_N / (time.perf_counter() - t)


def curl_cfg_extra(extra):
    """curl_args() in curl config-file syntax."""
    names = {"-H": "header"}
    return ['%s = "%s"' % (names.get(extra[i], extra[i].lstrip("-")), extra[i + 1])
            for i in range(0, len(extra), 2)]


# ---- the run --------------------------------------------------------------------

def med(v):
    return statistics.median(v) if v else None


def fmt(v, unit):
    if v is None:
        return "–"
    return "%.0f" % v if unit != "ms" or v >= 10 else "%.1f" % v


def speed_ratio(a, b, unit):
    """a vs b as a speed ratio (>1: a is faster), or None."""
    if a is None or b is None or a == 0 or b == 0:
        return None
    return b / a if unit == "ms" else a / b


def rfmt(r):
    return "–" if r is None else "%.2f" % r


def ensure_tools():
    missing = [p for p, b in (("rclone", "rclone"), ("s3fs", "s3fs"), ("bc", "bc"))
               if not shutil.which(b)]
    if missing:
        log("apt-get install %s" % " ".join(missing))
        sh(["apt-get", "install", "-y", "--no-install-recommends", *missing],
           stdout=subprocess.DEVNULL)


def tool_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).splitlines()[0].strip()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def interrupted(signum, frame):
    raise KeyboardInterrupt()


def main():
    if os.geteuid() != 0:
        sys.exit("bench_peers: needs root (FUSE mounts, drop_caches)")
    if not os.access(MCFS, os.X_OK):
        sys.exit("bench_peers: no mcfs binary at %s (set MCFS_BIN)" % MCFS)
    ensure_tools()
    # SIGTERM (and SIGHUP) take the same way out as Ctrl-C: through the finally below
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    t_start = time.time()
    load0 = os.getloadavg()
    work = tempfile.mkdtemp(prefix="mcfs-bench-peers.", dir="/var/tmp")
    data = os.environ.get("DATA") or os.path.join(work, "data")
    mnt = os.path.join(work, "mnt")
    servers = []
    res = {}

    def add(wl, col, v):
        res.setdefault((wl, col), []).append(v)

    try:
        if not os.path.exists(os.path.join(data, MODEL)):
            make_data(data)
        netrc = os.path.join(work, "netrc")
        with open(netrc, "w") as f:
            f.write("machine 127.0.0.1\nlogin %s\npassword %s\n" % (SWIFT_KEY, SWIFT_SECRET))
        with open(os.path.join(work, "rclone.conf"), "w"):
            pass
        # nginx twice over the same directory: JSON listings for mcfs, HTML for rclone
        ng_log, ngh_log = os.path.join(work, "nginx.log"), os.path.join(work, "nginx-h.log")
        ng = Nginx(data, workdir=os.path.join(work, "nginx"), access_log=ng_log)
        ngh = Nginx(data, workdir=os.path.join(work, "nginx-h"), autoindex="html",
                    access_log=ngh_log)
        sw = Swift(os.path.join(work, "swift"), workers=2)
        for s in (ng, ngh, sw):
            servers.append(s)
            s.start()
        log("uploading to Swift")
        swift_upload(sw, data)
        by_size = swift_data_files(os.path.join(work, "swift"))

        def swift_copies(rels):
            return [p for r in rels for p in by_size.get(os.path.getsize(os.path.join(data, r)),
                                                         [])]

        s3env = {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
                 "AWS_PROFILE": "", "AWS_DEFAULT_REGION": "us-east-1"}
        rc = ["rclone", "mount", ":http:", "{MNT}", "--http-url", ngh.url, "--read-only",
              "--config", os.path.join(work, "rclone.conf"),
              "--cache-dir", os.path.join(work, "rclone-cache")]
        systems = [
            System("mcfs", "mcfs", [MCFS, "mount", ng.url, "{MNT}", "-f", "-o",
                                    ",".join(MCFS_OPTS)], log=ng_log, is_mcfs=True),
            System("rc_off", "rclone off", rc + ["--vfs-cache-mode", "off"], log=ngh_log,
                   cache=os.path.join(work, "rclone-cache")),
            System("rc_full", "rclone full", rc + ["--vfs-cache-mode", "full"], log=ngh_log,
                   cache=os.path.join(work, "rclone-cache")),
            System("mcfs_s3", "mcfs s3", [MCFS, "mount", "s3://" + BUCKET, "{MNT}", "-f",
                                          "-o", ",".join(MCFS_OPTS + ["endpoint=" +
                                                                      sw.endpoint])],
                   env=s3env, is_mcfs=True),
            System("s3fs", "s3fs", ["s3fs", BUCKET, "{MNT}", "-f", "-o",
                                    "url=%s,use_path_request_style,endpoint=us-east-1,ro,"
                                    "use_cache=%s" % (sw.endpoint,
                                                      os.path.join(work, "s3fs-cache"))],
                   env=s3env, cache=os.path.join(work, "s3fs-cache")),
        ]
        sx = curl_args(True, netrc)
        model_size = os.path.getsize(os.path.join(data, MODEL))

        for run in range(RUNS):
            log("run %d/%d (load %.2f)" % (run + 1, RUNS, os.getloadavg()[0]))
            for wl in [w for w in WORKLOADS if w in WL]:
                label, fn, unit, files = WL[wl]
                local = [os.path.join(data, f) for f in files]
                # limits
                warm_files(local)
                if wl == "ls":
                    sh(["ls", "-lR", os.path.join(data, "small")], stdout=subprocess.DEVNULL)
                pretouch()
                add(wl, "local", fn(data))
                for srv, url, extra, copies in (("raw_ng", ng.url, [], local),
                                                ("raw_sw", sw.endpoint + "/" + BUCKET, sx,
                                                 swift_copies(files))):
                    if wl not in ("seq", "par4", "rand"):
                        continue
                    warm_files(copies)
                    pretouch()
                    if wl == "seq":
                        v = parallel_ranges(url + "/" + MODEL, model_size, extra)
                    elif wl == "par4":
                        v = curl_files([url + "/" + p for p in PAR], 4 * PAR_MIB * MiB, extra)
                    else:
                        v = curl_random(url + "/" + MODEL, model_size, curl_cfg_extra(extra),
                                        work)
                    add(wl, srv, v)
                # clients
                for s in systems:
                    warm_files(swift_copies(files) if s.key in ("mcfs_s3", "s3fs") else local)
                    with s.mount(mnt, work):
                        pretouch()
                        alog = AccessLog(s.log) if s.log else None
                        st0 = mcfs_stats(mnt) if s.is_mcfs else None
                        add(wl, s.key + "_cold", fn(mnt))
                        if wl == "ls" and LS_FILES.get(mnt) != SMALL_N:
                            add(wl, s.key + "_lsbad", LS_FILES.get(mnt))
                        if wl == "rand":
                            asked = RAND_N * MiB
                            if alog:
                                add(wl, s.key + "_fetched", alog.bytes() / asked)
                            if st0 is not None:
                                st1 = mcfs_stats(mnt)
                                add(wl, s.key + "_store", (st1["store_bytes"] -
                                                           st0["store_bytes"]) / asked)
                        if wl == "seq" and st0 is not None:
                            st1 = mcfs_stats(mnt)
                            add(wl, s.key + "_store", (st1["store_bytes"] - st0["store_bytes"])
                                / model_size)
                        pretouch()
                        add(wl, s.key + "_warm", fn(mnt))
            if "prefetch" in WORKLOADS:
                for s in systems:
                    if not s.is_mcfs:
                        continue
                    warm_files(swift_copies([MODEL]) if s.key == "mcfs_s3"
                               else [os.path.join(data, MODEL)])
                    with s.mount(mnt, work):
                        pretouch()
                        t = time.perf_counter()
                        sh([MCFS, "prefetch", "-q", os.path.join(mnt, MODEL)],
                           stdout=subprocess.DEVNULL)
                        add("prefetch", s.key, model_size / MiB / (time.perf_counter() - t))
                        cached = int(os.getxattr(os.path.join(mnt, MODEL), "user.mcfs.cached"))
                        add("prefetch", s.key + "_cachedfrac", cached / model_size)
            log("run %d/%d done, %.0f s so far" % (run + 1, RUNS, time.time() - t_start))
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        raise
    finally:
        for m in list(FuseMount.live):
            m.stop()
        for s in reversed(servers):
            s.stop()
        if os.environ.get("KEEP") == "1":
            log("kept %s" % data)
            for p in os.listdir(work):
                if os.path.join(work, p) != data:
                    shutil.rmtree(os.path.join(work, p), ignore_errors=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(res, t_start, load0)


def report(res, t_start, load0):
    def m(wl, col):
        return med(res.get((wl, col), []))

    def cell(wl, col, unit):
        v = res.get((wl, col), [])
        if not v:
            return "–"
        s = fmt(med(v), unit)
        if len(v) > 1:
            s += " (%s–%s)" % (fmt(min(v), unit), fmt(max(v), unit))
        bad = res.get((wl, col.replace("_cold", "_lsbad")), [])
        if col.endswith("_cold") and bad:
            s += " [listed %s of %d]" % (bad[0], SMALL_N)
        return s

    def pair(wl, key, unit):
        return "%s / %s" % (fmt(m(wl, key + "_cold"), unit), fmt(m(wl, key + "_warm"), unit))

    rev = revision()
    print()
    print("mcfs %s (%s), %d CPUs, kernel %s, %d runs, medians (min–max); load average %.2f at "
          "start, %.2f at end; %.1f min" % (rev, MCFS, os.cpu_count(), os.uname().release,
                                            RUNS, load0[0], os.getloadavg()[0],
                                            (time.time() - t_start) / 60))
    print("mcfs -o %s; %s; %s; %s" % (",".join(MCFS_OPTS), tool_version(["rclone", "version"]),
                                      tool_version(["s3fs", "--version"]),
                                      tool_version(["nginx", "-v"])))
    if PREFAULT_S:
        print("mcfs mounts faulted their RAM tier in (ram_prefault) in %.2f s (median of %d; "
              "%.2f-%.2f); timed reads start after that, as on a node that mounted at boot"
              % (med(PREFAULT_S), len(PREFAULT_S), min(PREFAULT_S), max(PREFAULT_S)))
    print()
    print("Table 1, http: nginx on loopback. MiB/s (ls: ms, lower is better). Peers' cells: "
          "cold / warm. Ratios are speed ratios (>1: mcfs faster); the s3fs column reads "
          "from Swift (table 2) and is not in 'best peer'.")
    print()
    print("| workload | limit: raw nginx (curl) | limit: local page cache | mcfs cold | "
          "mcfs warm | rclone off | rclone full | s3fs (Swift) | mcfs cold / raw | "
          "mcfs warm / page cache | mcfs cold / best peer cold | mcfs warm / best peer warm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for wl in [w for w in WORKLOADS if w in WL]:
        label, _, unit, _ = WL[wl]
        peers_c = [m(wl, k + "_cold") for k in ("rc_off", "rc_full")]
        peers_w = [m(wl, k + "_warm") for k in ("rc_off", "rc_full")]
        best = (lambda xs: (min if unit == "ms" else max)([x for x in xs if x is not None])
                if any(x is not None for x in xs) else None)
        print("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, unit, cell(wl, "raw_ng", unit), cell(wl, "local", unit),
            cell(wl, "mcfs_cold", unit), cell(wl, "mcfs_warm", unit),
            pair(wl, "rc_off", unit), pair(wl, "rc_full", unit), pair(wl, "s3fs", unit),
            rfmt(speed_ratio(m(wl, "mcfs_cold"), m(wl, "raw_ng"), unit)),
            rfmt(speed_ratio(m(wl, "mcfs_warm"), m(wl, "local"), unit)),
            rfmt(speed_ratio(m(wl, "mcfs_cold"), best(peers_c), unit)),
            rfmt(speed_ratio(m(wl, "mcfs_warm"), best(peers_w), unit))))
    if "prefetch" in WORKLOADS:
        print("| `mcfs prefetch` of the %d MiB file, fresh mount (MiB/s) | %s | – | %s | – | – "
              "| – | – | %s | – | – | – |" % (
                  MODEL_MIB, fmt(m("seq", "raw_ng"), "MiB/s"), cell("prefetch", "mcfs", "MiB/s"),
                  rfmt(speed_ratio(m("prefetch", "mcfs"), m("seq", "raw_ng"), "MiB/s"))))
    if "rand" in WORKLOADS:
        print("| random 1 MiB reads: bytes fetched / asked, cold (nginx log; mcfs store_bytes) "
              "| 1.00 | – | %s (%s) | – | %s | %s | – | – | – | – | – |" % (
                  rfmt(m("rand", "mcfs_fetched")), rfmt(m("rand", "mcfs_store")),
                  rfmt(m("rand", "rc_off_fetched")), rfmt(m("rand", "rc_full_fetched"))))
    print()
    print("Table 2, S3: Swift s3api on loopback (single-PUT objects), same runs.")
    print()
    print("| workload | limit: raw Swift (curl) | mcfs s3 cold | mcfs s3 warm | s3fs cold | "
          "s3fs warm | mcfs s3 cold / raw | mcfs s3 cold / s3fs cold | "
          "mcfs s3 warm / s3fs warm |")
    print("|---|---|---|---|---|---|---|---|---|")
    for wl in [w for w in WORKLOADS if w in WL]:
        label, _, unit, _ = WL[wl]
        print("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, unit, cell(wl, "raw_sw", unit), cell(wl, "mcfs_s3_cold", unit),
            cell(wl, "mcfs_s3_warm", unit), cell(wl, "s3fs_cold", unit),
            cell(wl, "s3fs_warm", unit),
            rfmt(speed_ratio(m(wl, "mcfs_s3_cold"), m(wl, "raw_sw"), unit)),
            rfmt(speed_ratio(m(wl, "mcfs_s3_cold"), m(wl, "s3fs_cold"), unit)),
            rfmt(speed_ratio(m(wl, "mcfs_s3_warm"), m(wl, "s3fs_warm"), unit))))
    if "prefetch" in WORKLOADS:
        print("| `mcfs prefetch`, fresh mount (MiB/s) | %s | %s | – | – | – | %s | – | – |" % (
            fmt(m("seq", "raw_sw"), "MiB/s"), cell("prefetch", "mcfs_s3", "MiB/s"),
            rfmt(speed_ratio(m("prefetch", "mcfs_s3"), m("seq", "raw_sw"), "MiB/s"))))
    if "rand" in WORKLOADS:
        print("| random 1 MiB reads: fetched / asked (store_bytes) | 1.00 | %s | – | – | – | – "
              "| – | – |" % rfmt(m("rand", "mcfs_s3_store")))
    print()
    tgt = []
    raw, cold = m("seq", "raw_ng"), m("seq", "mcfs_cold")
    if raw and cold:
        bp = max([x for x in (m("seq", "rc_off_cold"), m("seq", "rc_full_cold"),
                              m("seq", "s3fs_cold")) if x] or [0])
        tgt.append("cold sequential = %.2f x raw parallel curl (target >= 0.90): %s"
                   % (cold / raw, "MET" if cold / raw >= 0.9 else "NOT MET"))
        if bp:
            tgt.append("cold sequential = %.2f x best peer cold (target >= 2): %s"
                       % (cold / bp, "MET" if cold / bp >= 2 else "NOT MET"))
    fr = m("rand", "mcfs_fetched")
    if fr is not None:
        tgt.append("random 1 MiB: fetched/asked = %.2f (nginx log) (target <= 1.1): %s"
                   % (fr, "MET" if fr <= 1.1 else "NOT MET"))
    pf = m("prefetch", "mcfs")
    if pf and raw:
        tgt.append("prefetch = %.2f x raw (target >= 0.90): %s"
                   % (pf / raw, "MET" if pf / raw >= 0.9 else "NOT MET"))
    print("Targets (http, nginx):")
    for t in tgt:
        print("- " + t)
    extra = []
    for k in ("mcfs_store", "mcfs_s3_store"):
        if res.get(("seq", k)):
            extra.append("%s seq store_bytes/file = %.3f" % (k.split("_store")[0],
                                                             m("seq", k)))
    for k in ("mcfs_cachedfrac", "mcfs_s3_cachedfrac"):
        if res.get(("prefetch", k)):
            extra.append("%s cached after prefetch = %.3f of the file" % (
                k.split("_cached")[0], m("prefetch", k)))
    if extra:
        print("Checks: " + "; ".join(extra))
    print("raw: " + json.dumps({"%s.%s" % k: [round(x, 3) for x in v]
                                for k, v in sorted(res.items())}))


if __name__ == "__main__":
    main()
