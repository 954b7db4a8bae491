"""The shared block cache (issue 15): a tier on an S3 bucket that the nodes of
a cluster share, between their local tiers and the store. The shared cache is
OpenStack Swift with s3api on loopback (a real object store that verifies
SigV4); the stores are nginx (http), a directory (posix) and Swift itself
(s3). Each daemon here is a "node": its own process, mount point and RAM tier.

Checked: a second daemon reads every block from the shared cache and none from
the store (its counters, and nginx's access log), with bytes equal to the
source; two daemons reading at once share the store reads (leases); the shared
cache stopped or hanging mid-read (reads go on from the store, one log line
per state change, and it comes back); a busy one, slow to store blocks and
to send them but steady, or answering one request late while it sends bytes
on another (used, never counted down); a corrupted and a truncated object
(refused, fetched from the store, written over, correct afterwards); a file
replaced in the store (the new version's blocks, never the old); and wrong
credentials or a missing bucket (the mount fails, saying why), or an
unreachable cache (the mount goes on without it, saying so). Issue 22: a
block forged by a holder of the bucket's credentials, without the cluster's
key (refused, counted, never kept, written over), a node with another key; a
missing or loose key file (the mount fails, saying why); a lease written by a
node whose clock is an hour off (judged by the service's clock); and a
bucket that refuses writes (reported once, read on, no flapping; with leases
on, a refused claim sends its block to the store, once).
"""
import contextlib
import errno
import hmac
import os
import re
import signal
import time
import threading
import subprocess

import pytest

import remote_checks as rc
from conftest import mcfs_mount, need_root, run_mcfs, wait_for
from faultproxy import FaultProxy
from servers import SWIFT_KEY, SWIFT_SECRET, Nginx, Swift, free_port, have_nginx, have_swift

pytestmark = pytest.mark.skipif(not have_swift(), reason="swift/memcached not installed "
                                "(deploy/install-deps.sh test installs them)")

SHARED = "shared"  # the shared cache's bucket
MODELS = "models"  # the s3 store's bucket
BLOCK = rc.BLOCK
OTHER = "othernode-0123456789abcdef"  # another node, in leases
TRAILER = 48  # "MCFSBLK2", the length, HMAC-SHA256 (cache/shared_seal.c)
KEY = b"test-cluster-key-0123456789abcdef0123456789abcdef"  # shared_key_file's bytes
# RAM only, 1 MiB blocks; no page cache kept across opens, so that a second
# read of a file reaches the daemon. shared_timeout 60 s, not the default 2:
# these tests inject no fault unless they say so, and assert exact counts, so
# no clock of the tier may fire on a service that is merely slow. Under a
# sanitizer on the 2-CPU CI runner Swift has been silent for more than 2 s
# (a GET) and, once, 10 s (test_runs_of_a_node_alone: one shared error). The
# tests of a slow or silent service set their own timeout.
OPTS = ["block_size=1M", "ram_cache=64M", "keep_cache=false", "shared_timeout=60",
        "shared_queue=16"]
# No AWS settings of the test's environment leak into a daemon.
ENV = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "",
       "AWS_ENDPOINT_URL": "", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


def key_file(path, key=KEY, mode=0o600):
    """Writes a cluster key file (with a newline, as echo would: not part of the key)."""
    with open(path, "wb") as f:
        f.write(key + b"\n")
    os.chmod(path, mode)
    return str(path)


@pytest.fixture(scope="module")
def swift(tmp_path_factory):
    need_root()
    top = tmp_path_factory.mktemp("swift")
    sw = Swift(str(top)).start()
    sw.key_file = key_file(top / "cluster.key")
    try:
        s3 = sw.s3()
        s3.create_bucket(Bucket=SHARED)
        s3.create_bucket(Bucket=MODELS)
        yield sw
    finally:
        sw.stop()


def shared_opts(sw, prefix, extra=(), endpoint=None, secret=SWIFT_SECRET, key=None):
    return OPTS + ["shared_cache=s3://%s/%s" % (SHARED, prefix),
                   "shared_endpoint=" + (endpoint or sw.endpoint),
                   "shared_access_key=" + SWIFT_KEY, "shared_secret_key=" + secret,
                   "shared_key_file=" + (key or sw.key_file)] + list(extra)


def sealed(name, data, key=KEY):
    """A block object as a node with cluster key `key` writes it (cache/shared_seal.c):
    the bytes, "MCFSBLK2", the length and HMAC-SHA256 of the name (relative to the
    prefix), its NUL, the length and the bytes."""
    n = len(data).to_bytes(8, "little")
    mac = hmac.new(key, name.encode() + b"\0" + n + data, "sha256").digest()
    return data + b"MCFSBLK2" + n + mac


def read(path):
    with open(path, "rb") as f:
        return f.read()


def nblocks(data):
    return (len(data) + BLOCK - 1) // BLOCK


def brief(st):
    """The counters that say where blocks came from: short enough to be printed whole."""
    keys = ("hits", "misses", "waits", "fetches", "fetch_errors", "store_reads")
    return {k: v for k, v in st.items() if k in keys or k.startswith("shared_")}


def written(m, n):
    """Waits until daemon m has written n blocks (or found them there) and has
    nothing queued; returns its counters."""
    def done():
        st = m.stats()
        return st if st["shared_queued"] == 0 and \
            st["shared_puts"] + st["shared_put_skips"] >= n else None
    st = wait_for(done, timeout=60)
    if not st:  # printed whole (an assertion's message is cut short)
        print("counters:", brief(m.stats()))
        print("log:", m.log())
    assert st, "the daemon's block writes did not finish within 60 s (counters and log above)"
    return st


def blocks_in(sw, prefix):
    """The block objects (not leases) under prefix: key -> size, by index."""
    s3 = sw.s3()
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=SHARED, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            if not o["Key"].endswith(".lease"):
                out[o["Key"]] = o["Size"]
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[1])))


def origin_gets(log, name):
    """GETs of /name in nginx's access log (reads of bytes, not HEADs or listings)."""
    with open(log) as f:
        return [ln for ln in f if re.search(r'"GET /%s HTTP' % re.escape(name), ln)]


@pytest.fixture
def origin(tmp_path):
    """nginx over tmp_path/src, logging every request to tmp_path/access.log."""
    if not have_nginx():
        pytest.skip("nginx not installed (deploy/install-deps.sh test installs it)")
    (tmp_path / "src").mkdir(exist_ok=True)
    ng = Nginx(str(tmp_path / "src"), access_log=str(tmp_path / "access.log")).start()
    try:
        yield ng
    finally:
        ng.stop()


def test_two_daemons_share_blocks_http(swift, origin, tmp_path):
    """The first daemon fills the shared cache; the second, mounted beside it,
    reads every block from there: no GET of the file reaches nginx."""
    data = rc.data_for("http-model", 6 * BLOCK + 12345)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, "http")
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        st = written(a, n)
        assert st["shared_misses"] == n and st["shared_puts"] == n, st
        assert st["store_reads"] >= n, st
        status = run_mcfs("status", a.path).stdout
        assert ("shared tier: up; hit ratio 0.0%% (0 hits, %d misses), 0 B read;" % n) in status, \
            status
        # a PUT a loaded runner's Swift failed is counted and sent again (b95bad8)
        assert ("written 6.0 MiB (%d blocks), 0 found there already, 0 dropped, 0 queued; "
                "%d errors, 0 corrupt and 0 unauthentic objects refused"
                % (n, st["shared_errors"])) in status, status
        objs = blocks_in(swift, "http")
        # whole blocks, the last one short, each with its trailer
        assert list(objs.values()) == [BLOCK + TRAILER] * (n - 1) + \
            [len(data) - (n - 1) * BLOCK + TRAILER], objs
        open(str(tmp_path / "access.log"), "w").close()
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
            assert read(b.p("model.bin")) == data
            rc.check_random_ranges(b.p("model.bin"), data, n=20)
            st = b.stats()
            status = run_mcfs("status", b.path).stdout
        assert st["store_reads"] == 0 and st["store_bytes"] == 0, st
        # `mcfs status` shows the tier (issue 15): up, every block a hit, nothing written
        assert ("shared tier: up; hit ratio 100.0%% (%d hits, 0 misses), 6.0 MiB read; "
                "0 waited for another node's fetch, 0 gave up waiting" % n) in status, status
        assert ("written 0 B (0 blocks), 0 found there already, 0 dropped, 0 queued; "
                "0 errors, 0 corrupt and 0 unauthentic objects refused") in status, status
        assert st["shared_hits"] == n and st["shared_corrupt"] == 0, st
        assert st["shared_unauthentic"] == 0, st
        assert st["shared_read_bytes"] == len(data), st
        assert origin_gets(str(tmp_path / "access.log"), "model.bin") == []


def test_posix_store_and_disk_tier(swift, tmp_path):
    """A directory store (a NAS behind a slow link): the second daemon reads from
    the shared cache and keeps the blocks in its disk tier, which it asks first
    after a restart."""
    src = tmp_path / "src"
    src.mkdir()
    data = rc.data_for("posix-model", 5 * BLOCK + 99)
    (src / "model.bin").write_bytes(data)
    n = nblocks(data)
    with mcfs_mount(str(src), str(tmp_path / "a"), opts=shared_opts(swift, "posix"),
                    env=ENV) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
    opts = shared_opts(swift, "posix", ["cache_dir=" + str(tmp_path / "cache")])
    with mcfs_mount(str(src), str(tmp_path / "b"), opts=opts, env=ENV) as b:
        assert read(b.p("model.bin")) == data
        st = wait_for(lambda: (lambda s: s if s["disk_writes"] >= n else None)(b.stats()), 30)
        assert st, b.stats()
        assert st["store_reads"] == 0 and st["shared_hits"] == n, st
        assert st["shared_puts"] == 0, st  # nothing to give back: it came from there
    with mcfs_mount(str(src), str(tmp_path / "b"), opts=opts, env=ENV) as b:
        assert read(b.p("model.bin")) == data
        st = b.stats()
        # from disk: n blocks through the cache, or its version file by passthrough
        assert st["disk_hits"] == n or st["passthrough_opens"] == 1, st
        assert st["shared_hits"] == 0 and st["store_reads"] == 0, st


def test_s3_store(swift, tmp_path):
    """Swift is both the store (bucket models) and the shared cache (bucket shared)."""
    data = rc.data_for("s3-model", 4 * BLOCK + 7)
    swift.s3().put_object(Bucket=MODELS, Key="m/model.bin", Body=data)
    n = nblocks(data)
    env = dict(ENV, AWS_ACCESS_KEY_ID=SWIFT_KEY, AWS_SECRET_ACCESS_KEY=SWIFT_SECRET)
    opts = shared_opts(swift, "s3", ["endpoint=" + swift.endpoint])
    with mcfs_mount("s3://%s/m" % MODELS, str(tmp_path / "a"), opts=opts, env=env) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
        with mcfs_mount("s3://%s/m" % MODELS, str(tmp_path / "b"), opts=opts, env=env) as b:
            assert read(b.p("model.bin")) == data
            st = b.stats()
    assert st["store_reads"] == 0 and st["shared_hits"] == n, st


def test_daemons_reading_at_once_share_the_store_reads(swift, origin, tmp_path):
    """Two daemons read one file at the same time: the run's lease sends one of
    them to the store and the other waits for its blocks: the store is read
    for one copy."""
    data = rc.data_for("together", 16 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, "together", ["shared_wait=30"])
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a, \
            mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
        got = {}
        start = threading.Barrier(2)

        def load(m):
            start.wait()
            got[m.path] = read(m.p("model.bin"))

        ts = [threading.Thread(target=load, args=(m,)) for m in (a, b)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert got[a.path] == data and got[b.path] == data
        sa, sb = a.stats(), b.stats()
    print("counters:", brief(sa), brief(sb))  # whole: an assertion's message is cut short
    # one lease for the file's one run: its holder reads every block from the
    # store, the other none (it waits for each, or finds it written)
    holder, other = (sa, sb) if sa["shared_leases"] else (sb, sa)
    assert holder["shared_leases"] == 1 and other["shared_leases"] == 0, (brief(sa), brief(sb))
    assert holder["store_reads"] == n and other["store_reads"] == 0, (brief(sa), brief(sb))
    # each block it missed it waited for, and found once the lease named it
    assert other["shared_hits"] == n, (brief(sa), brief(sb))
    assert other["shared_waits"] == other["shared_misses"] >= 1, (brief(sa), brief(sb))
    assert sa["shared_errors"] + sb["shared_errors"] == 0, (brief(sa), brief(sb))


def leases_in(sw, prefix):
    """The lease objects under prefix: key -> body."""
    s3 = sw.s3()
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=SHARED, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            if o["Key"].endswith(".lease"):
                out[o["Key"]] = s3.get_object(Bucket=SHARED, Key=o["Key"])["Body"].read()
    return out


def read_while_held(swift, origin, path, opts, blocks, lkey, holder):
    """A daemon reads model.bin while another node (holder) holds its run's
    lease and has written none of its blocks. Once the daemon has missed a
    block (it waits: the lease says none is written, and shared_wait is long),
    the blocks (key -> object) are written and the lease says so, as their
    holder would. Returns the bytes read, whether the read was still waiting
    then, the daemon's counters and its log."""
    s3 = swift.s3()
    with mcfs_mount(origin.url, path, opts=opts, env=ENV) as b:
        got = {}
        t = threading.Thread(target=lambda: got.update(data=read(b.p("model.bin"))))
        t.start()
        assert wait_for(lambda: b.stats()["shared_misses"] >= 1, 30), b.stats()
        waiting = t.is_alive()  # it cannot end before the lease below
        for k, body in blocks.items():
            s3.put_object(Bucket=SHARED, Key=k, Body=body)
        bits = (1 << len(blocks)) - 1
        s3.put_object(Bucket=SHARED, Key=lkey, Body=("%s %x\n" % (holder, bits)).encode())
        t.join(60)
        return got.get("data"), waiting, b.stats(), b.log()


def test_another_nodes_run_lease(swift, origin, tmp_path):
    """One lease covers a run of a file's blocks (256 MiB: all of this file).
    A run that another node holds: the daemon waits for its blocks and reads
    none from the store. One it gave back ("released"): the daemon takes it
    over (its own node in the lease) and fetches the blocks itself."""
    data = rc.data_for("run", 6 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, "run", ["shared_wait=30"])
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        assert written(a, n)["shared_leases"] == 1
    leases = leases_in(swift, "run")
    assert len(leases) == 1, leases  # one run, not one lease per block
    (lkey,) = leases
    assert lkey.endswith("/1M-0-run256.lease"), lkey
    # the holder's lease names every block it wrote
    assert leases[lkey].split()[1] == b"3f", leases[lkey]
    s3 = swift.s3()
    blocks = {k: s3.get_object(Bucket=SHARED, Key=k)["Body"].read() for k in blocks_in(swift, "run")}
    assert len(blocks) == n

    def other_node(state=""):
        for k in blocks:
            s3.delete_object(Bucket=SHARED, Key=k)
        s3.put_object(Bucket=SHARED, Key=lkey, Body=("%s 0%s\n" % (OTHER, state)).encode())

    # held: the blocks appear while the daemon waits
    other_node()
    open(str(tmp_path / "access.log"), "w").close()
    got, waiting, st, log = read_while_held(swift, origin, str(tmp_path / "b"), opts, blocks,
                                            lkey, OTHER)
    assert got == data and waiting, (brief(st), log)
    assert st["store_reads"] == 0 and st["shared_hits"] == n, (brief(st), log)
    assert st["shared_waits"] == st["shared_misses"] >= 1, (brief(st), log)
    assert st["shared_errors"] == 0, (brief(st), log)
    assert st["shared_leases"] == 0 and st["shared_wait_timeouts"] == 0, (brief(st), log)
    assert origin_gets(str(tmp_path / "access.log"), "model.bin") == []
    assert leases_in(swift, "run")[lkey].startswith(b"othernode-")

    # given back: taken over at once, and the blocks written again
    other_node(" released")
    with mcfs_mount(origin.url, str(tmp_path / "c"), opts=opts, env=ENV) as c:
        assert read(c.p("model.bin")) == data
        st = written(c, n)
    assert st["store_reads"] == n and st["shared_waits"] == 0 and st["shared_leases"] == 1, st
    assert st["shared_puts"] == n and st["shared_put_skips"] == 0, st
    lease = leases_in(swift, "run")[lkey]
    assert not lease.startswith(b"othernode-") and b"released" not in lease, lease
    assert len(blocks_in(swift, "run")) == n


@contextlib.contextmanager
def hog_holds(swift, prefix):
    """Another node (a hog) holds prefix's run: its blocks are taken out of
    the shared cache, and its lease is written again every 0.2 s, straight to
    the service, with no block in it, until the block is taken over (the lease
    is someone else's) or the with-block ends. Yields (lease key, lock): the
    hog reads the lease and writes it again under lock, so a daemon whose
    lease PUTs pass a FaultProxy holding the same lock (proxy.serial) never
    has its take-over written over by a hog that read the lease just before
    it (a read-back that found the hog again, and a second take-over)."""
    (lkey,) = leases_in(swift, prefix)
    s3 = swift.s3()
    for k in blocks_in(swift, prefix):
        s3.delete_object(Bucket=SHARED, Key=k)
    body = b"hognode-0123456789abcdef 0\n"
    s3.put_object(Bucket=SHARED, Key=lkey, Body=body)
    stop = threading.Event()
    lock = threading.Lock()

    def hog():  # the lease kept fresh by the service's clock
        while not stop.wait(0.2):
            with lock:
                if leases_in(swift, prefix)[lkey] != body:
                    return  # taken over
                s3.put_object(Bucket=SHARED, Key=lkey, Body=body)

    h = threading.Thread(target=hog)
    h.start()
    try:
        yield lkey, lock
    finally:
        stop.set()
        h.join()


def test_lease_hog_loses_its_run(swift, origin, tmp_path):
    """A node that holds a run's lease and keeps writing it again, but writes
    none of its blocks (a hog): the daemon takes the run over (the lease
    written again with no new block, or none for shared_wait), once for the
    whole run, not once per block, and fetches the run from the store. The
    daemon's lease PUTs and the hog's read-then-write go one at a time (a
    proxy and the hog share a lock): a hog that read its own lease just
    before the take-over and wrote it after would win it back, a second
    take-over (CI saw it once; a test hog that waits 0.15 s between its read
    and its write, with the proxy's PUT answers 0.3 s late, does it one run
    in four without the lock). The log is at debug: a failure says which
    block waited and why."""
    data, n, opts = fill(swift, origin, tmp_path, "hog", 8 * BLOCK, ["shared_wait=2"])
    with hog_holds(swift, "hog") as (_, lock), FaultProxy(swift.port) as px:
        px.serial = (r"^PUT .*\.lease", lock)
        opts = [o for o in opts if not o.startswith("shared_endpoint=")] + \
            ["shared_endpoint=" + px.url]
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts + ["log_level=debug"],
                        env=ENV) as b:
            assert read(b.p("model.bin")) == data
            st = written(b, n)
            log = b.log()
    print("counters:", brief(st))  # whole: an assertion's message is cut short
    print("\n".join(ln for ln in log.splitlines() if "shared cache" in ln))
    assert st["shared_wait_timeouts"] == 1 and st["shared_leases"] == 1, (brief(st), log)
    assert st["store_reads"] == n and st["shared_puts"] == n, (brief(st), log)


def test_failed_take_over_sends_the_block_to_the_store(swift, origin, tmp_path):
    """A hog holds the run (its lease written again and again, no block in it)
    and the service refuses this node's lease PUTs (fault proxy). The look
    that finds the hog takes the run over; that PUT is refused, so nobody
    can tell who holds the run, and the block goes to the store at once, as
    after any claim that failed: one take-over, no wait past it. (The run was
    left free and the parked block asked it again: the hog's lease was fresh,
    so it waited again, found the hog again, failed again, until twice
    shared_wait sent it to the store: two wait timeouts or more.) One block,
    one fetch thread, no readahead: the count is exact."""
    data, n, opts = fill(swift, origin, tmp_path, "hogro", BLOCK,
                         ["shared_wait=3", "connections=1", "readahead_max=0"])
    with hog_holds(swift, "hogro"), FaultProxy(swift.port) as px:
        px.refuse = [("PUT", r"\.lease", 403)]
        popts = [o for o in opts if not o.startswith("shared_endpoint=")] + \
            ["shared_endpoint=" + px.url]
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=popts, env=ENV) as b:
            got = read(b.p("model.bin"))
            st = b.stats()
            log = b.log()
        lines = list(px.request_lines)
    puts = [ln for ln in lines if ln.startswith("PUT") and ".lease" in ln]
    print("counters:", brief(st))  # whole: an assertion's message is cut short
    assert got == data, (brief(st), log)
    assert len(puts) == 1, lines[:20]
    assert st["shared_wait_timeouts"] == 1 and st["shared_leases"] == 0, (brief(st), log)
    assert st["store_reads"] == n, (brief(st), log)


def held_by_other(swift, prefix):
    """Takes prefix's blocks out of the shared cache and gives their run's lease
    to OTHER, which has written none of them yet. Returns the lease's key and
    the blocks (key -> object, by index)."""
    (lkey,) = leases_in(swift, prefix)
    s3 = swift.s3()
    blocks = {k: s3.get_object(Bucket=SHARED, Key=k)["Body"].read()
              for k in blocks_in(swift, prefix)}
    for k in blocks:
        s3.delete_object(Bucket=SHARED, Key=k)
    s3.put_object(Bucket=SHARED, Key=lkey, Body=("%s 0\n" % OTHER).encode())
    return lkey, blocks


def test_block_never_written_waits_a_bound(swift, origin, tmp_path):
    """Another node holds the run and keeps writing its blocks, one every 0.25 s
    (each named in its lease: progress, so it keeps the run), but never block 3.
    The daemon waits for each block until the lease names it, and for block 3
    twice shared_wait at most (a fetch thread waits no longer), then fetches
    that one block from the store.

    Deterministic on a loaded machine: the reader reads a block or so ahead
    (readahead_max 1M, the kernel's 128 KiB), so no block but 3 waits longer
    than the holder takes to write one; block 3's wait (6 s) ends while the
    holder still makes progress (47 blocks, 11.5 s at least); and the holder
    would have to stall for shared_wait (3 s) between two blocks to lose the
    run. (With the default readahead, blocks 16 ahead of the holder waited
    more than twice shared_wait on CI's loaded machine.)"""
    data, n, opts = fill(swift, origin, tmp_path, "never", 48 * BLOCK,
                         ["shared_wait=3", "readahead_max=1M", "read_ahead_kb=128"])
    lkey, blocks = held_by_other(swift, "never")
    s3 = swift.s3()
    stop = threading.Event()

    def holder():  # writes every block but block 3, then its lease naming it
        bits = 0
        for i, (k, body) in enumerate(blocks.items()):
            if i == 3:
                continue
            if stop.wait(0.25):
                return
            s3.put_object(Bucket=SHARED, Key=k, Body=body)
            bits |= 1 << i
            s3.put_object(Bucket=SHARED, Key=lkey, Body=("%s %x\n" % (OTHER, bits)).encode())

    h = threading.Thread(target=holder)
    open(str(tmp_path / "access.log"), "w").close()
    try:
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
            h.start()
            assert read(b.p("model.bin")) == data
            st = b.stats()
            log = b.log()
    finally:
        stop.set()
        if h.is_alive():
            h.join()
    print("counters:", brief(st))  # whole: an assertion's message is cut short
    assert st["shared_wait_timeouts"] == 1 and st["store_reads"] == 1, (brief(st), log)
    assert st["shared_hits"] == n - 1 and st["shared_leases"] == 0, (brief(st), log)
    assert len(origin_gets(str(tmp_path / "access.log"), "model.bin")) == 1


def test_parked_blocks_hold_no_fetch_thread(swift, origin, tmp_path):
    """Issue 26: a block that waits for another node's run is parked, and no
    fetch thread waits with it. One fetch thread (connections=1); model.bin's
    run is held by another node that has written none of its blocks yet: the
    daemon parks the blocks it asks for, and meanwhile reads other.bin, which
    no node holds, whole from the store (when a waiting block held its fetch
    thread, that thread waited up to twice shared_wait, and other.bin with
    it). Once the holder writes the blocks and names them in its lease, the
    parked ones come back and are read from the shared cache: none of
    model.bin from the store."""
    data, n, opts = fill(swift, origin, tmp_path, "parked", 8 * BLOCK, ["shared_wait=60"])
    other = rc.data_for("parked-other", 3 * BLOCK)
    (tmp_path / "src" / "other.bin").write_bytes(other)
    lkey, blocks = held_by_other(swift, "parked")
    s3 = swift.s3()
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts + ["connections=1"],
                    env=ENV) as b:
        got = {}
        t = threading.Thread(target=lambda: got.update(data=read(b.p("model.bin"))))
        t.start()
        try:
            # block 0 and readahead's block 1 wait, with one fetch thread
            assert wait_for(lambda: b.stats()["shared_parked"] >= 2, 30), brief(b.stats())
            assert read(b.p("other.bin")) == other
            mid = b.stats()
            # other.bin was read while model.bin's blocks still waited (the
            # holder writes nothing before this point; a wait lasts 120 s)
            assert mid["shared_parked"] >= 1 and t.is_alive(), brief(mid)
        finally:
            for k, body in blocks.items():
                s3.put_object(Bucket=SHARED, Key=k, Body=body)
            bits = (1 << len(blocks)) - 1
            s3.put_object(Bucket=SHARED, Key=lkey, Body=("%s %x\n" % (OTHER, bits)).encode())
            t.join(120)
        assert got.get("data") == data
        st = written(b, nblocks(other))
        log = b.log()
    assert st["store_reads"] == nblocks(other), (brief(st), log)
    assert st["shared_hits"] == n and st["shared_waits"] >= 2, (brief(st), log)
    assert st["shared_parked"] == 0 and st["shared_wait_timeouts"] == 0, (brief(st), log)
    assert st["shared_leases"] == 1 and st["shared_errors"] == 0, (brief(st), log)


def test_stop_with_blocks_parked(swift, origin, tmp_path):
    """A stop (SIGTERM) while blocks are parked, their run held by a node that
    writes nothing: the tier wakes them for the store at once and the daemon
    exits 0, not after their wait (twice shared_wait, 120 s here; before, the
    session waited for the reader, and the reader for the wait); the reader
    ends, with its bytes or an error (the mount is gone)."""
    data, n, opts = fill(swift, origin, tmp_path, "parkstop", 8 * BLOCK, ["shared_wait=60"])
    held_by_other(swift, "parkstop")
    errors = []

    def reader(path):
        try:
            read(path)
        except OSError as e:
            errors.append(e.errno)

    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts + ["connections=1"],
                    env=ENV) as b:
        t = threading.Thread(target=reader, args=(b.p("model.bin"),))
        t.start()
        assert wait_for(lambda: b.stats()["shared_parked"] >= 2, 30), brief(b.stats())
        # a stop (systemd's SIGTERM): done long before the parked blocks' wait
        b.proc.send_signal(signal.SIGTERM)
        try:
            rc_ = b.proc.wait(30)
        except subprocess.TimeoutExpired:
            rc_ = None
        log = b.log()
    assert rc_ == 0, (rc_, log)
    t.join(30)
    assert not t.is_alive()
    assert errors in ([], [errno.ENOTCONN], [errno.EIO]), errors


def test_runs_of_a_node_alone(swift, origin, tmp_path):
    """A node alone takes one lease per run (a.bin: one run of 4 blocks, b.bin:
    two) and writes every block; a second node reads them all from the shared
    cache, takes no lease and reads nothing from the store."""
    a_data, b_data = rc.data_for("alone-a", 4 * BLOCK), rc.data_for("alone-b", 8 * BLOCK)
    (tmp_path / "src" / "a.bin").write_bytes(a_data)
    (tmp_path / "src" / "b.bin").write_bytes(b_data)
    opts = shared_opts(swift, "alone", ["shared_wait=30", "shared_run=4M"])
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as m:
        assert read(m.p("a.bin")) == a_data and read(m.p("b.bin")) == b_data
        st = written(m, 12)
        log = m.log()
    assert st["store_reads"] == 12 and st["shared_leases"] == 3, (brief(st), log)
    assert st["shared_puts"] == 12 and st["shared_put_drops"] == 0, (brief(st), log)
    assert st["shared_errors"] == 0 and st["shared_waits"] == 0, (brief(st), log)
    assert len(leases_in(swift, "alone")) == 3
    assert len(blocks_in(swift, "alone")) == 12
    open(str(tmp_path / "access.log"), "w").close()
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
        assert read(b.p("a.bin")) == a_data and read(b.p("b.bin")) == b_data
        sb = b.stats()
    assert sb["store_reads"] == 0 and sb["shared_hits"] == 12, brief(sb)
    assert sb["shared_leases"] == 0 and sb["shared_errors"] == 0, brief(sb)
    assert origin_gets(str(tmp_path / "access.log"), "b.bin") == []


def state_lines(log):
    down = [ln for ln in log.splitlines() if re.search(r"shared cache .*: down \(", ln)]
    up = [ln for ln in log.splitlines() if re.search(r"shared cache .*: reads up again", ln)]
    return down, up


def test_shared_cache_stopped_mid_read(swift, origin, tmp_path):
    """The shared cache's front end stops mid-read: the read goes on from the
    store, bytes equal, one log line; once it is back, the next miss finds it
    up again, one more line."""
    data = rc.data_for("stopped", 16 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    (tmp_path / "src" / "other.bin").write_bytes(rc.data_for("stopped-other", 3 * BLOCK))
    n = nblocks(data)
    opts = shared_opts(swift, "stopped")
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
    # a block or so at a time: the least readahead in the daemon and the kernel
    opts_b = opts + ["readahead_max=1M", "read_ahead_kb=128"]
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts_b, env=ENV) as b:
        with open(b.p("model.bin"), "rb") as f:
            head = f.read(2 * BLOCK)
            assert b.stats()["shared_hits"] >= 2
            swift.stop_proxy()
            try:
                rest = f.read()
            finally:
                swift.start_proxy()
        assert head + rest == data
        st = b.stats()
        assert st["shared_state"] == 2 and st["store_reads"] > 0, st
        down, up = state_lines(b.log())
        assert len(down) == 1 and up == [], b.log()
        assert "reads go to the store" in down[0], down

        def back():
            # each evict + read misses: a miss after the retry interval probes
            run_mcfs("evict", b.p("other.bin"))
            assert len(read(b.p("other.bin"))) == 3 * BLOCK
            return b.stats()["shared_state"] == 1
        assert wait_for(back, timeout=60, step=0.5), b.log()
        down, up = state_lines(b.log())
        assert len(down) == 1 and len(up) == 1, b.log()


def test_shared_cache_hanging(swift, origin, tmp_path):
    """A shared cache that takes requests but never answers (slow): each request
    gives up after shared_timeout, the tier goes down once, and the reads go on
    from the store with the right bytes."""
    data = rc.data_for("hanging", 8 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, "hanging")
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
    with FaultProxy(swift.port) as px:
        opts_b = shared_opts(swift, "hanging", ["readahead_max=1M", "read_ahead_kb=128",
                                                "shared_timeout=1"], endpoint=px.url)
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts_b, env=ENV) as b:
            with open(b.p("model.bin"), "rb") as f:
                head = f.read(2 * BLOCK)
                assert b.stats()["shared_hits"] >= 2
                px.gate.clear()  # every request from now on is held, unanswered
                rest = f.read()
            px.gate.set()
            assert head + rest == data
            st = b.stats()
            log = b.log()
        assert px.counts["held"] >= 1, px.counts
        assert st["shared_state"] == 2 and st["store_reads"] > 0, st
        down, _ = state_lines(log)
        assert len(down) == 1, log


def test_slow_but_steady_shared_cache_is_used(swift, origin, tmp_path):
    """A busy shared cache that works: it answers each block PUT seconds after
    taking its body (while it stores the object), and sends each block back at
    256 KiB/s, 4 s for a 1 MiB block. Both are longer than shared_timeout (2 s),
    but the requests make progress: every block is written and then read from
    it, no read goes to the store, and the tier is never counted down."""
    data = rc.data_for("steady", 4 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    with FaultProxy(swift.port) as px:
        px.answer_delay = 3  # block PUTs only: leases are smaller than delay_min
        # 2 s, not less: on a loaded 2-CPU machine Swift has answered a small
        # GET more than 1 s late while only these PUTs were out, a silence
        # the tier is right to cut (and then counts as an error)
        opts = shared_opts(swift, "steady", ["shared_timeout=2"], endpoint=px.url)
        with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
            assert read(a.p("model.bin")) == data
            st = written(a, n)
            log_a = a.log()
        assert px.counts["delayed"] == n, px.counts
        assert st["shared_puts"] == n and st["shared_put_drops"] == 0, st
        assert st["shared_errors"] == 0 and st["shared_state"] == 1, (brief(st), log_a)
        px.answer_delay = 0
        px.rate = 256 * 1024
        open(str(tmp_path / "access.log"), "w").close()
        # debug: a failure below says what happened to each block
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts + ["log_level=debug"],
                        env=ENV) as b:
            assert read(b.p("model.bin")) == data
            st = b.stats()
            log_b = b.log()
        assert px.counts["paced"] == n, px.counts
    # Every paced GET takes 4 s: a tier that cut such transfers would fail each of them.
    assert st["shared_errors"] == 0 and st["shared_state"] == 1, (brief(st), log_b)
    assert st["shared_hits"] == n and st["store_reads"] == 0, (brief(st), px.counts, log_b)
    assert origin_gets(str(tmp_path / "access.log"), "model.bin") == []
    for log in (log_a, log_b):
        down, _ = state_lines(log)
        assert down == [] and "refuses writes" not in log, log


def test_busy_shared_cache_is_waited_for(swift, origin, tmp_path):
    """A busy shared cache answers one block's GET 3 s late (queued behind
    other work) while it sends another block, slowly, to the same daemon. The
    late request gets no byte of its own for longer than shared_timeout (2 s),
    but the service is heard all along: the read waits for it, both blocks
    come from the shared cache, none from the store, and the tier is never
    counted down."""
    files = {name: rc.data_for("busy-" + name, BLOCK) for name in ("slow.bin", "late.bin")}
    for name, data in files.items():
        (tmp_path / "src" / name).write_bytes(data)
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=shared_opts(swift, "busy"),
                    env=ENV) as a:
        for name, data in files.items():
            assert read(a.p(name)) == data
        written(a, len(files))
    with FaultProxy(swift.port) as px:
        px.rate, px.rate_match = 128 * 1024, r"/slow\.bin-\w+/1M-0 HTTP"  # 8 s, steady
        px.get_delay = (r"/late\.bin-\w+/1M-0 HTTP", 3.0)  # nothing for 3 s, then all
        opts = shared_opts(swift, "busy", ["shared_timeout=2"], endpoint=px.url)
        open(str(tmp_path / "access.log"), "w").close()
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
            got = {}
            start = threading.Barrier(2)

            def load(name):
                start.wait()
                got[name] = read(b.p(name))

            ts = [threading.Thread(target=load, args=(name,)) for name in files]
            [t.start() for t in ts]
            [t.join() for t in ts]
            st = b.stats()
            log = b.log()
        assert px.counts["paced"] == 1 and px.counts["delayed"] == 1, px.counts
    assert got == files
    assert st["shared_hits"] == 2 and st["store_reads"] == 0, (st, log)
    assert st["shared_errors"] == 0 and st["shared_state"] == 1, (st, log)
    assert origin_gets(str(tmp_path / "access.log"), "slow.bin") == []
    assert origin_gets(str(tmp_path / "access.log"), "late.bin") == []
    down, _ = state_lines(log)
    assert down == [], log


def test_corrupt_and_truncated_objects(swift, origin, tmp_path):
    """One object with a flipped byte (its seal fails: unauthentic), one cut
    short (corrupt): the next daemon refuses both (never serves them), reads
    those blocks from the store, writes them over; a third daemon then finds
    every block good."""
    data = rc.data_for("corrupt", 6 * BLOCK + 4321)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, "corrupt")
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
    s3 = swift.s3()
    keys = list(blocks_in(swift, "corrupt"))
    good = {k: s3.get_object(Bucket=SHARED, Key=k)["Body"].read() for k in keys[1:5:2]}
    flipped, cut = keys[1], keys[3]
    body = bytearray(good[flipped])
    body[1000] ^= 0x40
    s3.put_object(Bucket=SHARED, Key=flipped, Body=bytes(body))
    s3.put_object(Bucket=SHARED, Key=cut, Body=good[cut][:BLOCK // 2])
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
        assert read(b.p("model.bin")) == data
        st = written(b, 2)
        log = b.log()
    assert st["shared_corrupt"] == 1 and st["shared_unauthentic"] == 1, st
    assert st["store_reads"] == 2, st
    assert st["shared_hits"] == n - 2 and st["shared_puts"] == 2, st
    refused = [ln for ln in log.splitlines() if "refused" in ln and "writing it over" in ln]
    assert len(refused) == 2, log
    assert any("not sealed with this node's shared_key_file" in ln and
               flipped.rsplit("/", 1)[1] in ln for ln in refused)
    assert any("truncated" in ln and cut.rsplit("/", 1)[1] in ln for ln in refused)
    for k, v in good.items():
        assert s3.get_object(Bucket=SHARED, Key=k)["Body"].read() == v, k
    with mcfs_mount(origin.url, str(tmp_path / "c"), opts=opts, env=ENV) as c:
        assert read(c.p("model.bin")) == data
        st = c.stats()
    assert st["shared_hits"] == n and st["shared_corrupt"] == 0 and st["store_reads"] == 0, st
    assert st["shared_unauthentic"] == 0, st


def fill(swift, origin, tmp_path, prefix, size, extra=()):
    """One daemon reads a new tmp_path/src/model.bin of size bytes and writes its
    blocks to the shared cache under prefix; returns (data, blocks, the options)."""
    data = rc.data_for(prefix, size)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    opts = shared_opts(swift, prefix, extra)
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == data
        written(a, n)
    return data, n, opts


def test_forged_block_is_refused_and_written_over(swift, origin, tmp_path):
    """Issue 22: whoever holds the bucket's credentials, but not the cluster's
    key, rewrites a block with other bytes and a trailer of the right form,
    sealed with a key of their own (the best they can do). A fresh node with
    a disk tier serves the file's own bytes, counts the block unauthentic,
    reads it from the store and writes it over with a block sealed with the
    cluster's key; the forged bytes never reach its disk tier (the same node
    without the shared cache serves every block from there, right). A node
    with another key refuses every block."""
    data, n, opts = fill(swift, origin, tmp_path, "forged", 5 * BLOCK + 777)
    s3 = swift.s3()
    keys = list(blocks_in(swift, "forged"))
    names = [k[len("forged/"):] for k in keys]  # what the seal covers: relative to the prefix
    # the cluster's blocks are sealed as documented
    for i, k in enumerate(keys):
        good = data[i * BLOCK:(i + 1) * BLOCK]
        assert s3.get_object(Bucket=SHARED, Key=k)["Body"].read() == sealed(names[i], good), k
    evil = rc.data_for("evil", BLOCK)
    s3.put_object(Bucket=SHARED, Key=keys[2], Body=sealed(names[2], evil, key=b"attacker" * 8))
    cache = str(tmp_path / "cache")
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts + ["cache_dir=" + cache],
                    env=ENV) as b:
        assert read(b.p("model.bin")) == data
        st = written(b, 1)
        st = wait_for(lambda: (lambda x: x if x["disk_writes"] >= n else None)(b.stats()), 30) \
            or b.stats()
        log = b.log()
    assert st["shared_unauthentic"] == 1 and st["shared_corrupt"] == 0, (brief(st), log)
    assert st["store_reads"] == 1 and st["shared_hits"] == n - 1, (brief(st), log)
    assert st["shared_puts"] == 1 and st["disk_writes"] == n, (brief(st), log)
    refused = [ln for ln in log.splitlines() if "refused, " in ln and "writing it over" in ln]
    assert len(refused) == 1 and names[2] in refused[0] and \
        "not sealed with this node's shared_key_file" in refused[0], log
    good = data[2 * BLOCK:3 * BLOCK]
    assert s3.get_object(Bucket=SHARED, Key=keys[2])["Body"].read() == sealed(names[2], good)
    # the same node, its disk tier only: every block from there, none forged
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=OPTS + ["cache_dir=" + cache],
                    env=ENV) as b:
        assert read(b.p("model.bin")) == data
        st = b.stats()
    # from disk: n blocks through the cache, or its version file by passthrough (verified)
    assert (st["disk_hits"] == n or st["passthrough_opens"] == 1) and st["store_reads"] == 0, st
    # a node with another key: no block of the cluster's is served, each read from the store
    other = key_file(tmp_path / "other.key", b"another-cluster-key-0123456789abcdef")
    with mcfs_mount(origin.url, str(tmp_path / "c"), opts=shared_opts(swift, "forged", key=other),
                    env=ENV) as c:
        assert read(c.p("model.bin")) == data
        st = c.stats()
    assert st["shared_unauthentic"] == n and st["shared_hits"] == 0, brief(st)
    assert st["store_reads"] == n, brief(st)


def test_key_file_is_needed_and_kept_secret(swift, tmp_path):
    """shared_cache without shared_key_file, a key file others may read, one
    too short or missing: the mount fails, naming the file and the fix, and
    never showing the key."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"hello")
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)

    def mount(opts):
        # not -f: a mount that wrongly succeeds returns at once, and is unmounted here
        r = run_mcfs("mount", str(src), mnt, "-o", ",".join(opts + ["cache_dir="]), env=ENV)
        if r.returncode == 0:
            run_mcfs("umount", mnt)
        assert r.returncode != 0, r.stdout + r.stderr
        return r.stderr

    no_key = [o for o in shared_opts(swift, "keys") if not o.startswith("shared_key_file=")]
    err = mount(no_key)
    assert "shared_cache needs shared_key_file" in err, err
    loose = key_file(tmp_path / "loose.key", mode=0o644)
    err = mount(shared_opts(swift, "keys", key=loose))
    assert "shared_key_file %s: group or others may read or write it (mode 0644)" % loose in err
    assert "chmod 600" in err and KEY.decode() not in err, err
    short = key_file(tmp_path / "short.key", b"0123456789abcdef0123456789abcde")  # 31
    err = mount(shared_opts(swift, "keys", key=short))
    assert "shared_key_file %s: 31 bytes" % short in err and "at least 32" in err, err
    err = mount(shared_opts(swift, "keys", key=str(tmp_path / "none.key")))
    assert "shared_key_file %s: No such file or directory" % (tmp_path / "none.key") in err, err


def test_lease_of_a_node_with_a_skewed_clock(swift, origin, tmp_path):
    """Issue 22: another node, whose clock may be an hour behind, holds the
    run's lease it has just written. The lease carries no node's clock: its
    age is the service's Date less its Last-Modified (one clock), so the
    daemon waits for the blocks, as for any held lease."""
    data, n, opts = fill(swift, origin, tmp_path, "skew", 4 * BLOCK, ["shared_wait=30"])
    # the lease carries no node's clock: its age is the service's alone
    lkey, blocks = held_by_other(swift, "skew")
    got, waiting, st, log = read_while_held(swift, origin, str(tmp_path / "b"), opts, blocks,
                                            lkey, OTHER)
    assert got == data and waiting, (brief(st), log)
    assert st["store_reads"] == 0 and st["shared_hits"] == n, (brief(st), log)
    assert st["shared_leases"] == 0, (brief(st), log)
    assert st["shared_waits"] == st["shared_misses"] >= 1, (brief(st), log)
    assert leases_in(swift, "skew")[lkey].startswith(OTHER.encode())


def test_read_only_shared_cache_does_not_flap(swift, origin, tmp_path):
    """Issue 22: a bucket whose PUTs are refused (403: read-only credentials).
    Its refusal is logged once; blocks are still read from it; writes stop,
    but for one probe every 5 s. A probe whose HEAD finds the block there
    already (another node wrote it since our GET missed) writes nothing: it
    is no sign that writes work, and used to bring writes "up again" until
    the next PUT, every 5 s. Over three such probes: one line, writes still
    refused, none "up again"."""
    files = {"hit.bin": 2 * BLOCK, "model.bin": BLOCK}
    files.update({"fresh%d.bin" % i: BLOCK for i in range(4)})
    data = {name: rc.data_for("ro-" + name, size) for name, size in files.items()}
    for name, d in data.items():
        (tmp_path / "src" / name).write_bytes(d)
    opts = shared_opts(swift, "readonly", ["shared_wait=0"])
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        for name in ("hit.bin", "model.bin"):
            assert read(a.p(name)) == data[name]
        written(a, 3)
    model = r"/model\.bin-\w+/1M-0 HTTP"
    with FaultProxy(swift.port) as px:
        # every PUT refused; model.bin's GET misses, as if another node wrote
        # it just after: its write's HEAD finds it
        px.refuse = [("PUT", r"", 403), ("GET", model, 404)]
        opts_b = shared_opts(swift, "readonly", ["shared_wait=0", "readahead_max=1M",
                                                 "read_ahead_kb=128"], endpoint=px.url)
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts_b, env=ENV) as b:
            assert read(b.p("hit.bin")) == data["hit.bin"]
            assert read(b.p("fresh0.bin")) == data["fresh0.bin"]
            assert wait_for(lambda: b.stats()["shared_state"] == 3, 30), b.log()
            for i in range(1, 4):
                # a write of model.bin's block probes once the 5 s are up
                def probed(want=i):
                    run_mcfs("evict", b.p("model.bin"))
                    assert read(b.p("model.bin")) == data["model.bin"]
                    heads = [ln for ln in px.request_lines
                             if ln.startswith("HEAD ") and re.search(model, ln)]
                    return len(heads) >= want
                assert wait_for(probed, timeout=30, step=0.5), (px.request_lines, b.log())
                # then a block not there: written if the probe had brought writes up
                drops = b.stats()["shared_put_drops"]
                fresh = "fresh%d.bin" % i
                assert read(b.p(fresh)) == data[fresh]
                assert wait_for(lambda: b.stats()["shared_put_drops"] > drops and
                                b.stats()["shared_queued"] == 0, 30), b.log()
            assert read(b.p("hit.bin")) == data["hit.bin"]  # RAM, or the shared cache again
            st = b.stats()
            log = b.log()
    refusing = [ln for ln in log.splitlines() if "refuses writes" in ln]
    assert len(refusing) == 1 and "AccessDenied" in refusing[0], log
    assert "writes up again" not in log, log
    assert st["shared_state"] == 3 and st["shared_hits"] >= 2, (brief(st), log)
    assert st["shared_puts"] == 0 and st["shared_put_skips"] >= 3, (brief(st), log)
    down, _ = state_lines(log)
    assert down == [], log


def test_read_only_bucket_with_leases_reads_from_the_store(swift, origin, tmp_path):
    """A bucket whose PUTs are refused, with leases on (shared_wait > 0): the
    first miss claims the run, and its lease PUT is refused. Nobody can tell
    who holds the run, so the block is read from the store, and so is the
    next one (the tier takes no writes: no lease is asked). Exactly one lease
    GET and one lease PUT. (A claim that failed was asked again at once: a
    loop of lease GETs, hundreds a second, and the read never ended while the
    bucket refused writes.) One fetch thread, no readahead: the jobs go one
    at a time, so the count is exact."""
    data = rc.data_for("ro-leases", 2 * BLOCK)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    with FaultProxy(swift.port) as px:
        px.refuse = [("PUT", r"", 403)]
        opts = shared_opts(swift, "roleases", ["shared_wait=3", "connections=1",
                                               "readahead_max=0"], endpoint=px.url)
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
            got = {}
            t = threading.Thread(target=lambda: got.update(data=read(b.p("model.bin"))))
            t.start()
            t.join(60)  # it never ended before
            ended = not t.is_alive()
            lines = list(px.request_lines)
            px.refuse = []  # lets a read that never ended end, and the mount stop
            t.join(60)
            st = b.stats()
            log = b.log()
    lease_lines = [ln.split(" ")[0] for ln in lines if ".lease" in ln]
    print("counters:", brief(st))  # whole: an assertion's message is cut short
    print("lease requests:", len(lease_lines), lease_lines[:10])
    assert ended and got.get("data") == data, (brief(st), log)
    assert sorted(lease_lines) == ["GET", "PUT"], lines[:20]
    assert st["store_reads"] == n and st["shared_leases"] == 0, (brief(st), log)
    assert st["shared_state"] == 3 and st["shared_wait_timeouts"] == 0, (brief(st), log)


def test_replaced_file_gets_new_blocks(swift, origin, tmp_path):
    """A file replaced in the store (same size, new bytes and date): a daemon
    that opens the new version never gets a block of the old one, though the
    shared cache holds them all."""
    path = tmp_path / "src" / "model.bin"
    old = rc.data_for("replaced-old", 5 * BLOCK)
    new = rc.data_for("replaced-new", 5 * BLOCK)
    path.write_bytes(old)
    n = nblocks(old)
    opts = shared_opts(swift, "replaced")
    with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=ENV) as a:
        assert read(a.p("model.bin")) == old
        written(a, n)
    path.write_bytes(new)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))  # another ETag for sure
    with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=ENV) as b:
        assert read(b.p("model.bin")) == new
        st = written(b, n)
    assert st["shared_hits"] == 0 and st["store_reads"] == n, st
    assert len(blocks_in(swift, "replaced")) == 2 * n  # both versions, under their own names
    with mcfs_mount(origin.url, str(tmp_path / "c"), opts=opts, env=ENV) as c:
        assert read(c.p("model.bin")) == new
        st = c.stats()
    assert st["shared_hits"] == n and st["store_reads"] == 0, st


def test_wrong_credentials_or_bucket_fail_the_mount(swift, tmp_path):
    """Wrong credentials and a missing bucket are configuration errors: the
    mount fails, naming the shared cache and what to check, never the secret."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"hello")
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    r = run_mcfs("mount", str(src), mnt, "-f", "-o",
                 ",".join(shared_opts(swift, "creds", secret="not-the-secret") + ["cache_dir="]),
                 env=ENV)
    assert r.returncode != 0
    assert "shared cache s3://shared/creds/ refused our requests" in r.stderr, r.stderr
    assert "SignatureDoesNotMatch" in r.stderr and "shared_secret_key" in r.stderr, r.stderr
    assert "not-the-secret" not in r.stderr + r.stdout
    opts = [o.replace("s3://%s/" % SHARED, "s3://no-such-bucket/") for o in
            shared_opts(swift, "creds")]
    r = run_mcfs("mount", str(src), mnt, "-f", "-o", ",".join(opts + ["cache_dir="]), env=ENV)
    assert r.returncode != 0 and "no such bucket" in r.stderr, r.stderr
    # and the options are checked before anything is sent
    r = run_mcfs("mount", str(src), mnt, "-f", "-o", "shared_cache=http://x/y", env=ENV)
    assert r.returncode != 0 and "bad value for shared_cache" in r.stderr, r.stderr
    r = run_mcfs("mount", str(src), mnt, "-f", "-o",
                 "shared_cache=s3://b,shared_access_key=k", env=ENV)
    assert r.returncode != 0 and "shared_secret_key must be given together" in r.stderr, \
        r.stderr


def test_unreachable_shared_cache_mounts_without_it(swift, tmp_path):
    """A shared cache that does not answer at mount time (not started yet, or
    down) is no configuration error: the mount goes on, says so, and reads
    come from the store."""
    src = tmp_path / "src"
    src.mkdir()
    data = rc.data_for("unreachable", 3 * BLOCK)
    (src / "model.bin").write_bytes(data)
    closed = "http://127.0.0.1:%d" % free_port()  # nothing listens there
    opts = shared_opts(swift, "unreachable", endpoint=closed)
    with mcfs_mount(str(src), str(tmp_path / "mnt"), opts=opts, env=ENV) as m:
        assert read(m.p("model.bin")) == data
        st = m.stats()
        log = m.log()
    assert st["shared_state"] == 2 and st["store_reads"] == 3, st
    assert "not reachable" in log and "reads go to the store" in log, log


def test_with_a_proxy_for_the_store(swift, origin, tmp_path):
    """The deployment beside a P2P distributor (deploy/README.md, Dragonfly): the
    store's reads go through the proxy that http_proxy names, the shared cache's
    requests bypass it (NO_PROXY), and the second daemon sends the proxy no read."""
    data = rc.data_for("proxied", 4 * BLOCK + 5)
    (tmp_path / "src" / "model.bin").write_bytes(data)
    n = nblocks(data)
    # the shared cache by another name of loopback, so that NO_PROXY can tell it apart
    shared_ep = "http://localhost:%d" % swift.port
    with FaultProxy(origin.port) as px:
        env = dict(ENV, http_proxy=px.url, no_proxy="localhost", NO_PROXY="localhost")
        opts = shared_opts(swift, "proxied", endpoint=shared_ep)
        with mcfs_mount(origin.url, str(tmp_path / "a"), opts=opts, env=env) as a:
            assert read(a.p("model.bin")) == data
            written(a, n)
        reads_a = [ln for ln in px.request_lines if "/model.bin" in ln and ln.startswith("GET")]
        assert len(reads_a) >= n, px.request_lines
        with mcfs_mount(origin.url, str(tmp_path / "b"), opts=opts, env=env) as b:
            assert read(b.p("model.bin")) == data
            st = b.stats()
            log = b.log()
        reads = [ln for ln in px.request_lines if "/model.bin" in ln and ln.startswith("GET")]
        # b's store reads, through the proxy: none
        assert len(reads) - len(reads_a) == st["store_reads"], (px.request_lines, brief(st))
        assert st["store_reads"] == 0, (brief(st), log)
        assert not any("mcfs2/" in ln or "localhost" in ln for ln in px.request_lines), \
            px.request_lines
    assert st["shared_hits"] == n, (brief(st), log)
