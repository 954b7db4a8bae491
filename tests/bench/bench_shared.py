#!/usr/bin/env python3
"""bench_shared.py - the size of the shared block cache's win (issue 15), measured.

A simulated cluster on one machine: N nodes, each an mcfs daemon with its own
RAM tier (no disk tier) in its own network namespace, joined to the servers by
a veth pair on a bridge that this script creates (and removes at exit, as it
does the namespaces, the mounts and the servers). One origin, nginx with an
access log; one shared cache, OpenStack Swift with s3api, as in the tests.

For each N, without and then with the shared cache (a fresh prefix each time):
the model (a few shards of random bytes) is loaded on all N nodes at once,
then on one new node after them. Printed, one table: the bytes the origin sent
(nginx's access log) and the wall time of each phase, and the CPU seconds that
Swift, nginx and the daemons used in it, which says where the time went on a
small machine.

    sudo python3 tests/bench/bench_shared.py                    # 4 GiB, N = 1, 2, 4, 8
    sudo python3 tests/bench/bench_shared.py --size 1G --nodes 1,2
    sudo python3 tests/bench/bench_shared.py --origin-rate 2gbit   # a remote origin

--origin-rate holds what the origin sends to all the nodes together to that
rate (tc: an htb class on the bridge, the host's one way out to the nodes,
for nginx's port only), as a cluster's one link to a remote origin (a WAN
link, another region's object store) holds it; Swift's answers go by
unshaped, as a shared cache inside the cluster does. Without it the origin
is nginx on the same bridge as Swift, and nearer than any remote origin.

Needs root (namespaces, FUSE), iproute2 (tc too, for --origin-rate), nsenter,
nginx, Swift and a built mcfs (MCFS_BIN or build/fs/mcfs). The daemons enter
only the namespace's network (nsenter --net), not `ip netns exec`'s private
mount namespace, so that their mounts are seen (and read) from here. Each
daemon's log is WORKDIR/nN-shared-nodeI.log (or nN-origin-...) of its run.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift, have_nginx, have_swift  # noqa: E402

MCFS = os.environ.get("MCFS_BIN", os.path.join(ROOT, "build", "fs", "mcfs"))
GiB = 1 << 30
MiB = 1 << 20
TAG = str(os.getpid() % 100000)


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def parse_rate(s):
    """A rate in tc's units, as tc takes it: 2gbit, 500mbit, 100mbps."""
    if not re.fullmatch(r"\d+(\.\d+)?([kmgt]?(bit|bps))", s.lower()):
        raise argparse.ArgumentTypeError("a rate in tc's units like 2gbit or 500mbit: %r" % s)
    return s.lower()


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.upper())
    if not m:
        raise argparse.ArgumentTypeError("a size like 4G or 512M: %r" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


class Net:
    """A bridge with the servers' address, and one namespace per node on it."""

    def __init__(self, octet):
        self.prefix = "10.%d.%d" % (200 + octet // 250, octet % 250)
        self.host = self.prefix + ".1"
        self.br = "mcfsbr" + TAG
        self.nodes = []  # namespace names

    def up(self):
        sh("ip", "link", "add", self.br, "type", "bridge")
        sh("ip", "addr", "add", self.host + "/24", "dev", self.br)
        sh("ip", "link", "set", self.br, "up")

    def add_node(self):
        i = len(self.nodes)
        ns, host_end, ns_end = "mcfsb%s-%d" % (TAG, i), "mvh%s_%d" % (TAG, i), "mvn%s_%d" % (TAG, i)
        sh("ip", "netns", "add", ns)
        self.nodes.append(ns)
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        sh("ip", "link", "set", ns_end, "netns", ns)
        sh("ip", "link", "set", host_end, "master", self.br)
        sh("ip", "link", "set", host_end, "up")
        sh("ip", "-n", ns, "addr", "add", "%s.%d/24" % (self.prefix, 10 + i), "dev", ns_end)
        sh("ip", "-n", ns, "link", "set", ns_end, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def shape(self, port, rate):
        """Holds what the host sends from @port to the nodes, all together, to @rate
        (tc's units: "2gbit"); the rest of its traffic goes by unshaped. The bridge is
        the host's only way out to the nodes, so its egress is the cluster's link."""
        # a queue to shape with: a bridge has none (txqueuelen 0), and htb's and pfifo's
        # limits default to it
        sh("ip", "link", "set", self.br, "txqueuelen", "1000")
        # unclassified packets (Swift's, the ARP) take htb's unshaped direct queue
        sh("tc", "qdisc", "add", "dev", self.br, "root", "handle", "1:", "htb",
           "direct_qlen", "1000")
        # a burst of 1 MB (4 ms at 2 Gbit/s): nginx sends 64 KiB segments (GSO), which
        # htb's default burst (one MTU at this rate) would hold back one by one
        sh("tc", "class", "add", "dev", self.br, "parent", "1:", "classid", "1:1", "htb",
           "rate", rate, "ceil", rate, "burst", "1m", "cburst", "1m")
        sh("tc", "qdisc", "add", "dev", self.br, "parent", "1:1", "handle", "10:", "pfifo",
           "limit", "1000")
        sh("tc", "filter", "add", "dev", self.br, "parent", "1:", "protocol", "ip", "prio", "1",
           "u32", "match", "ip", "src", self.host + "/32", "match", "ip", "sport", str(port),
           "0xffff", "flowid", "1:1")

    def shaped_bytes(self):
        """Bytes the shaped class sent so far (tc -s), to check that the shaping took."""
        out = subprocess.run(["tc", "-s", "class", "show", "dev", self.br, "classid", "1:1"],
                             capture_output=True, text=True).stdout
        m = re.search(r"Sent (\d+) bytes", out)
        return int(m.group(1)) if m else 0

    def down(self):
        for ns in self.nodes:  # deleting a namespace deletes its veth pair
            sh("ip", "netns", "del", ns, check=False)
        self.nodes = []
        sh("ip", "link", "del", self.br, check=False)


def fuse_mounted(path):
    with open("/proc/mounts") as f:
        return any(ln.split()[1] == path and ln.split()[2].startswith("fuse") for ln in f)


class Node:
    """One mcfs daemon in its own network namespace."""

    def __init__(self, ns, source, mnt, opts, log):
        os.makedirs(mnt, exist_ok=True)
        self.mnt, self.logpath = mnt, log
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(log, "w") as lf:
            self.proc = subprocess.Popen(
                ["nsenter", "--net=/run/netns/" + ns, MCFS, "mount", source, mnt, "-f", "-o",
                 ",".join(opts)], stdout=lf, stderr=lf, env=env)
        deadline = time.time() + 60
        while not (fuse_mounted(mnt) and "mounted " in open(log).read()):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("node did not mount:\n" + open(log).read())
            time.sleep(0.05)

    def stats(self):
        raw = os.getxattr(self.mnt, "user.mcfs.stats").decode()
        return {k: int(v) for k, v in (ln.split() for ln in raw.splitlines())}

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        for cmd in (["fusermount3", "-u", self.mnt], ["umount", "-l", self.mnt]):
            if fuse_mounted(self.mnt):
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds(match):
    """CPU seconds (user + system) of the processes for which match(pid, ppid, sid) is true."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        if match(int(d), int(f[1]), int(f[3])):
            total += int(f[11]) + int(f[12])
    return total / hz


class Cluster:
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.workdir)
        self.net = Net(os.getpid() % 1000)
        self.nginx = self.swift = None
        self.nodes = []
        self.log = os.path.join(self.work, "access.log")

    def start(self):
        os.makedirs(self.work, exist_ok=True)
        self.net.up()
        self.nginx = Nginx(self.model_dir, workdir=os.path.join(self.work, "nginx"),
                           access_log=self.log, host=self.net.host, autoindex=True).start()
        if self.args.origin_rate:
            self.net.shape(self.nginx.port, self.args.origin_rate)
        shutil.rmtree(os.path.join(self.work, "swift"), ignore_errors=True)
        self.swift = Swift(os.path.join(self.work, "swift"), workers=2,
                           host=self.net.host).start()
        self.swift.s3().create_bucket(Bucket="shared")
        # the cluster's key (shared_key_file), which seals every block
        self.key_file = os.path.join(self.work, "cluster.key")
        with open(os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(self.key_file, 0o600)

    @property
    def model_dir(self):
        return os.path.join(self.work, "model")

    def make_model(self):
        """args.shards files of random bytes, args.size in all; kept between runs."""
        os.makedirs(self.model_dir, exist_ok=True)
        per = self.args.size // self.args.shards
        self.files = []
        for i in range(self.args.shards):
            name = "model-%05d-of-%05d.safetensors" % (i + 1, self.args.shards)
            path = os.path.join(self.model_dir, name)
            if not os.path.exists(path) or os.path.getsize(path) != per:
                with open(path, "wb") as f:
                    for _ in range(per // (4 * MiB)):
                        f.write(os.urandom(4 * MiB))
                    f.write(os.urandom(per % (4 * MiB)))
            self.files.append(name)
        self.model_bytes = per * self.args.shards

    def stop(self):
        for n in self.nodes:
            n.stop()
        self.nodes = []
        if self.swift:
            self.swift.stop()
            # its objects (the shared cache's blocks of every run: 17 GiB after the 4 GiB
            # default) are no use to the next run, which starts a fresh Swift
            shutil.rmtree(os.path.join(self.work, "swift", "node"), ignore_errors=True)
        if self.nginx:
            self.nginx.stop()
        self.net.down()

    def add_node(self, shared_prefix):
        i = len(self.nodes)
        opts = ["ram_cache=" + self.args.ram, "block_size=" + self.args.block, "cache_dir=",
                "ram_prefault=false"] + self.args.opt
        if shared_prefix:
            opts += ["shared_cache=s3://shared/" + shared_prefix,
                     "shared_endpoint=" + self.swift.endpoint,
                     "shared_access_key=" + SWIFT_KEY, "shared_secret_key=" + SWIFT_SECRET,
                     "shared_key_file=" + self.key_file]
            if self.args.shared_timeout:
                opts.append("shared_timeout=%g" % self.args.shared_timeout)
        ns = self.net.nodes[i] if i < len(self.net.nodes) else self.net.add_node()
        n = Node(ns, self.nginx.url, os.path.join(self.work, "mnt", str(i)), opts,
                 os.path.join(self.work, "%s-node%d.log" % (self.run_name, i)))
        self.nodes.append(n)
        return n

    def origin_bytes(self, since):
        """Bytes of GET answers nginx logged after offset @since of its log."""
        total = 0
        with open(self.log) as f:
            f.seek(since)
            for ln in f:
                p = ln.split('"')
                if len(p) > 2 and p[1].startswith("GET "):
                    total += int(p[2].split()[1])
        return total

    def cpu(self, nodes):
        sids = {p.pid for p in self.swift.procs.values()}
        sw = cpu_seconds(lambda pid, ppid, sid: sid in sids)
        ng = cpu_seconds(lambda pid, ppid, sid: pid == self.nginx.pid or ppid == self.nginx.pid)
        pids = {p for n in nodes for p in n.pids()}
        mc = cpu_seconds(lambda pid, ppid, sid: pid in pids or ppid in pids)
        return sw, ng, mc

    def load(self, nodes):
        """Reads every shard through each of @nodes, all nodes at once (a reader per
        node, shard after shard). Returns (wall seconds, origin bytes, cpu deltas)."""
        since = os.path.getsize(self.log)
        cpu0 = self.cpu(self.nodes)
        errors = []

        def read_all(n):
            for name in self.files:
                r = subprocess.run(["dd", "if=" + os.path.join(n.mnt, name), "of=/dev/null",
                                    "bs=4M"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if r.returncode != 0:
                    errors.append(r.stderr.decode())

        ts = [threading.Thread(target=read_all, args=(n,)) for n in nodes]
        t0 = time.time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        if errors:
            raise RuntimeError("reads failed: %s" % errors[:3])
        time.sleep(0.2)  # nginx writes its log line after the answer
        cpu1 = self.cpu(self.nodes)
        return wall, self.origin_bytes(since), tuple(b - a for a, b in zip(cpu0, cpu1))

    def run(self, n, shared):
        """One row pair: n nodes at once, then a new node, with or without the shared cache."""
        prefix = "run-%d-%d" % (n, int(time.time())) if shared else None
        self.run_name = "n%d-%s" % (n, "shared" if shared else "origin")
        nodes = [self.add_node(prefix) for _ in range(n)]
        rows = []
        wall, origin, cpu = self.load(nodes)
        rows.append((n, shared, "%d at once" % n, origin, wall, cpu, self.counters(nodes)))
        if shared:  # what the nodes still write is the new node's to find
            deadline = time.time() + 120
            while time.time() < deadline and any(x.stats()["shared_queued"] for x in nodes):
                time.sleep(0.2)
        late = self.add_node(prefix)
        wall, origin, cpu = self.load([late])
        rows.append((n, shared, "new node after", origin, wall, cpu, self.counters([late])))
        for x in self.nodes:
            x.stop()
        self.nodes = []
        return rows

    @staticmethod
    def counters(nodes):
        keys = ("shared_hits", "shared_waits", "shared_wait_timeouts", "shared_puts",
                "shared_put_drops", "shared_errors", "shared_leases", "shared_put_waits")
        sums = {k: 0 for k in keys}
        sums["downs"] = 0
        for x in nodes:
            st = x.stats()
            for k in keys:
                sums[k] += st.get(k, 0)
            with open(x.logpath) as f:  # the daemon's "down (" lines: one per state change
                sums["downs"] += sum(1 for ln in f if re.search(r"shared cache .*: down \(", ln))
        return sums


def print_table(rows, model_bytes, args):
    print()
    print("Model: %.2f GiB in %d shards; nodes: ram_cache=%s, block_size=%s, no disk tier; "
          "shared_timeout=%s%s; origin: %s" % (
              model_bytes / GiB, args.shards, args.ram, args.block,
              "%gs" % args.shared_timeout if args.shared_timeout else "default",
              "".join(", " + o for o in args.opt),
              "shaped to %s for all nodes together" % args.origin_rate if args.origin_rate
              else "unshaped (nginx on the bridge)"))
    print()
    print("| N | shared cache | phase | origin GiB | x model | wall s | MiB/s per node | "
          "CPU s: Swift / nginx / mcfs | shared hits / waits / takeovers / leases / puts / "
          "room waits / drops / errors / downs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, shared, phase, origin, wall, cpu, ctr in rows:
        print("| %d | %s | %s | %.2f | %.2f | %.1f | %.0f | %.1f / %.1f / %.1f | %s |" % (
            n, "yes" if shared else "no", phase, origin / GiB, origin / model_bytes, wall,
            model_bytes / MiB / wall, cpu[0], cpu[1], cpu[2],
            "%d / %d / %d / %d / %d / %d / %d / %d / %d" % tuple(ctr[k] for k in (
                "shared_hits", "shared_waits", "shared_wait_timeouts", "shared_leases",
                "shared_puts", "shared_put_waits", "shared_put_drops", "shared_errors",
                "downs")) if shared else "-"))
    sys.stdout.flush()


def on_term(signum, frame):
    raise KeyboardInterrupt  # the finally of main() takes everything down


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=4 * GiB, help="model size (4G)")
    ap.add_argument("--shards", type=int, default=4, help="files of the model (4)")
    ap.add_argument("--nodes", default="1,2,4,8", help="values of N (1,2,4,8)")
    ap.add_argument("--ram", default="512M", help="each node's ram_cache (512M)")
    ap.add_argument("--block", default="8M", help="block_size (8M)")
    ap.add_argument("--shared-timeout", type=float, default=None,
                    help="shared_timeout of the nodes (default: mcfs's)")
    ap.add_argument("--origin-rate", type=parse_rate, default=None, metavar="RATE",
                    help="what the origin sends to all nodes together, in tc's units "
                    "(2gbit, 500mbit); default: unshaped")
    ap.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                    help="another mount option for every node (repeatable), e.g. shared_queue=32")
    ap.add_argument("--shared-only", action="store_true",
                    help="only the runs with the shared cache")
    ap.add_argument("--workdir", default="/tmp/mcfs-bench-shared",
                    help="model, servers and logs (the model is kept for the next run)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_shared.py: needs root (network namespaces, FUSE)")
    for what, ok in (("nginx", have_nginx()), ("swift", have_swift()),
                     ("mcfs at " + MCFS, os.access(MCFS, os.X_OK)),
                     ("nsenter", shutil.which("nsenter")), ("ip", shutil.which("ip")),
                     ("tc", shutil.which("tc") or not args.origin_rate)):
        if not ok:
            sys.exit("bench_shared.py: %s not found" % what)
    ns = [int(x) for x in args.nodes.split(",")]
    c = Cluster(args)
    signal.signal(signal.SIGTERM, on_term)
    rows = []
    shaped = 0
    try:
        c.make_model()
        c.start()
        for n in ns:
            for shared in (True,) if args.shared_only else (False, True):
                t0 = time.time()
                rows += c.run(n, shared)
                print("N=%d shared=%s: %.0f s" % (n, shared, time.time() - t0), flush=True)
        if args.origin_rate:
            shaped = c.net.shaped_bytes()
    finally:
        c.stop()
        if rows:
            print_table(rows, c.model_bytes, args)
        if rows and args.origin_rate:  # the origin's bytes went through the shaper, or say so
            print("\nShaped class sent %.2f GiB in all%s" % (
                shaped / GiB, "" if shaped else ": THE SHAPING DID NOT TAKE"))


if __name__ == "__main__":
    main()
