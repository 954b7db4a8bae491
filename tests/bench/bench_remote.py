#!/usr/bin/env python3
"""Cold sequential read of one file through mcfs from nginx (http store) and
from Swift s3api (s3 store), beside the raw throughput of the same server
measured with curl in the same run: one GET, and 8 parallel ranged GETs.

    tests/bench/bench_remote.py [SIZE_MiB=2048] [RUNS=5]

"Cold" is mcfs's cache: each mcfs run is a fresh mount (nothing cached) and
reads the file once with dd bs=1M. The servers' own copies stay in their page
cache (re-read right before each timed run), as for the curl figures, so the
columns compare the client paths. RAM is pretouched before each timed run
(notes/benchmarking.md), the table shows medians in MiB/s. Needs root.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
MCFS = os.environ.get("MCFS_BIN", os.path.join(ROOT, "build", "fs", "mcfs"))
MiB = 1 << 20


def revision():
    """The commit a table names: MCFS_REV, where the binary was built from another
    commit than this tree's HEAD (the device machine's copy keeps an older one),
    else this tree's HEAD."""
    return os.environ.get("MCFS_REV") or subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True).stdout.strip()


def pretouch(mib=3072):
    subprocess.run("dd if=/dev/zero of=/dev/shm/mcfs-pretouch bs=1M count=%d status=none;"
                   "rm -f /dev/shm/mcfs-pretouch" % mib, shell=True, check=True)


def warm(path):
    subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=4M", "status=none"], check=True)


def curl_args(s3, netrc):
    if not s3:
        return []
    return ["--netrc-file", netrc, "--aws-sigv4", "aws:amz:us-east-1:s3",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]


def one_get(url, size, extra):
    t = time.perf_counter()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", *extra, url], check=True)
    return size / MiB / (time.perf_counter() - t)


def parallel_ranges(url, size, extra, n=8):
    part = size // n
    t = time.perf_counter()
    procs = []
    for i in range(n):
        end = size - 1 if i == n - 1 else (i + 1) * part - 1
        procs.append(subprocess.Popen(["curl", "-sf", "-o", "/dev/null", "-r",
                                       "%d-%d" % (i * part, end), *extra, url]))
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("curl failed")
    return size / MiB / (time.perf_counter() - t)


def stats(mnt):
    raw = os.getxattr(mnt, "user.mcfs.stats").decode()
    return {k: int(v) for k, v in (ln.split() for ln in raw.splitlines() if ln.strip())}


def mcfs_read(source, name, size, mnt, opts, env):
    os.makedirs(mnt, exist_ok=True)
    log = open(mnt + ".log", "w")
    full_env = dict(os.environ)
    full_env.update(env)
    # cache_dir= (RAM only): every run is a first read from the store
    cmd = [MCFS, "mount", source, mnt, "-f", "-o", ",".join(["cache_dir="] + opts)]
    p = subprocess.Popen(cmd, stdout=log, stderr=log, env=full_env)
    try:
        deadline = time.time() + 20
        while not os.path.ismount(mnt):
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError("mount failed: see " + mnt + ".log")
            time.sleep(0.02)
        # time reads, not the RAM tier's prefault after mounting (ram_prefault)
        while stats(mnt).get("ram_prefault") == 1:
            time.sleep(0.05)
        # then touch and free what the read's page cache will use (the prefault took
        # memory of its own)
        pretouch(max(3072, size // MiB + 1024))
        t = time.perf_counter()
        subprocess.run(["dd", "if=" + os.path.join(mnt, name), "of=/dev/null", "bs=1M",
                        "status=none"], check=True)
        return size / MiB / (time.perf_counter() - t)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


def main():
    size = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 2048 * MiB
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if os.geteuid() != 0:
        sys.exit("bench_remote: needs root (FUSE mounts)")
    work = tempfile.mkdtemp(prefix="mcfs-bench-remote.", dir="/var/tmp")
    data = os.path.join(work, "data")
    os.makedirs(data)
    src = os.path.join(data, "model.bin")
    subprocess.run(["dd", "if=/dev/urandom", "of=" + src, "bs=1M",
                    "count=%d" % (size // MiB), "status=none"], check=True)
    netrc = os.path.join(work, "netrc")
    with open(netrc, "w") as f:
        f.write("machine 127.0.0.1\nlogin %s\npassword %s\n" % (SWIFT_KEY, SWIFT_SECRET))
    ng = Nginx(data, workdir=os.path.join(work, "nginx"))
    sw = Swift(os.path.join(work, "swift"), workers=2)
    results = {}
    try:
        ng.start()
        sw.start()
        s3 = sw.s3()
        s3.create_bucket(Bucket="bench")
        with open(src, "rb") as f:  # one PUT: no multipart (SLO) segments
            s3.put_object(Bucket="bench", Key="model.bin", Body=f)
        s3env = {"AWS_ACCESS_KEY_ID": SWIFT_KEY, "AWS_SECRET_ACCESS_KEY": SWIFT_SECRET,
                 "AWS_PROFILE": ""}
        swift_obj = os.path.join(work, "swift", "node")
        servers = [
            ("nginx (http)", ng.url + "/model.bin", False, ng.url, [], {}),
            ("Swift s3api (s3)", sw.endpoint + "/bench/model.bin", True, "s3://bench",
             ["endpoint=" + sw.endpoint], s3env),
        ]
        for i in range(runs):
            for label, url, is_s3, source, opts, env in servers:
                extra = curl_args(is_s3, netrc)
                # the server's copy in its page cache, as for every column
                if is_s3:
                    for dp, _, fns in os.walk(swift_obj):
                        for fn in fns:
                            if fn.endswith(".data"):
                                warm(os.path.join(dp, fn))
                else:
                    warm(src)
                r = results.setdefault(label, {"get": [], "par": [], "mcfs": []})
                pretouch()
                r["get"].append(one_get(url, size, extra))
                pretouch()
                r["par"].append(parallel_ranges(url, size, extra))
                r["mcfs"].append(mcfs_read(source, "model.bin", size,
                                           os.path.join(work, "mnt"), opts, env))
            print("run %d/%d done" % (i + 1, runs), file=sys.stderr)
    finally:
        ng.stop()
        sw.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("\nCold sequential read of a %d MiB file, MiB/s, median of %d runs "
          "(min-max); mcfs: fresh mount, dd bs=1M, default options\n" % (size // MiB, runs))
    print("| server | curl, one GET | curl, 8 parallel ranged GETs | mcfs cold read | "
          "mcfs / 8 ranged |")
    print("|---|---|---|---|---|")
    for label, r in results.items():
        def cell(v):
            return "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))
        print("| %s | %s | %s | %s | %.2f |" % (label, cell(r["get"]), cell(r["par"]),
                                              cell(r["mcfs"]), statistics.median(r["mcfs"])
                                              / statistics.median(r["par"])))


if __name__ == "__main__":
    main()
