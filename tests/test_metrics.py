"""Prometheus metrics (issue 7): a real mount with `-o metrics=127.0.0.1:PORT`,
real reads, and scrapes of GET /metrics whose counters must move with them.

The exposition is parsed with prometheus_client's own parser, so a malformed
line fails the test rather than a scraper in production.
"""
import mmap
import os
import re
import socket
import urllib.error
import urllib.request

import pytest

from conftest import fd_links, force_unmount, mcfs_mount, need_root, run_mcfs, wait_for

prom_parser = pytest.importorskip("prometheus_client.parser",
                                  reason="prometheus-client (pip) parses the exposition")

MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        assert r.status == 200
        ctype = r.headers["Content-Type"]
        text = r.read().decode()
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
    return text


class Metrics:
    """One scrape: samples by (name, frozenset(labels)) and the families' types."""

    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for fam in prom_parser.text_string_to_metric_families(text):
            self.types[fam.name] = fam.type
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def get(self, name, **labels):
        key = (name, frozenset(labels.items()))
        assert key in self.samples, "no sample %s%s in:\n%s" % (name, labels, self.text)
        return self.samples[key]

    def buckets(self, name):
        out = []
        for (n, labels), v in self.samples.items():
            if n == name + "_bucket":
                le = dict(labels)["le"]
                out.append((float("inf") if le == "+Inf" else float(le), v))
        return sorted(out)


def write_file(path, size, seed=1):
    rnd = bytes((i * 131 + seed) & 0xFF for i in range(MiB))
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(rnd))
            f.write(rnd[:n])
            left -= n


def read_direct(path):
    """Reads the whole file with O_DIRECT (aligned buffer), bypassing the page cache."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, MiB)
    total = 0
    try:
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            total += n
    finally:
        os.close(fd)
        buf.close()
    return total


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def check_histogram(m, name):
    """Buckets are cumulative, end in +Inf, and +Inf equals _count."""
    b = m.buckets(name)
    assert b and b[-1][0] == float("inf"), b
    counts = [v for _, v in b]
    assert counts == sorted(counts), "buckets not cumulative: %s" % b
    assert m.get(name + "_count") == counts[-1]
    return counts[-1]


def test_cold_then_warm_read(tmp):
    """Cold read: misses, fetches and bytes follow the file; re-read: hits, no fetch."""
    need_root()
    size = 3 * 8 * MiB + 12345          # 4 blocks of 8 MiB, the last one short
    nblocks = 4
    write_file(tmp / "src" / "model.bin", size)
    port = free_port()
    opts = ["metrics=127.0.0.1:%d" % port, "readahead_max=0", "ram_cache=256M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        before = Metrics(scrape(port))
        info = [(dict(k[1]), v) for k, v in before.samples.items() if k[0] == "mcfs_build_info"]
        assert len(info) == 1 and info[0][1] == 1, before.text
        assert info[0][0]["store"] == "posix" and info[0][0]["version"]
        assert before.get("mcfs_cache_block_size_bytes") == 8 * MiB
        assert before.get("mcfs_cache_capacity_bytes", tier="ram") == 256 * MiB
        assert before.get("mcfs_uptime_seconds") >= 0
        # ram_prefault (default): the gauge climbs to the whole tier
        assert wait_for(lambda: Metrics(scrape(port)).get("mcfs_cache_ram_faulted_bytes")
                        == 256 * MiB, 20), scrape(port)
        assert before.types["mcfs_fetch_duration_seconds"] == "histogram"
        assert before.types["mcfs_cache_hits"] == "counter"

        with open(m.p("model.bin"), "rb") as f:
            data = f.read(8 * MiB)
            # scraped in the middle of the read, with the file open
            mid = Metrics(scrape(port))
            assert mid.get("mcfs_fetched_bytes_total") >= 8 * MiB, mid.text
            assert mid.get("mcfs_fetches_total", result="ok") >= 1
            assert check_histogram(mid, "mcfs_fetch_duration_seconds") == \
                mid.get("mcfs_fetches_total", result="ok")
            data += f.read()
        assert len(data) == size

        cold = Metrics(scrape(port))
        fetched = cold.get("mcfs_fetched_bytes_total") - before.get("mcfs_fetched_bytes_total")
        assert fetched >= size, cold.text
        ok = cold.get("mcfs_fetches_total", result="ok")
        err = cold.get("mcfs_fetches_total", result="error")
        assert err == 0
        assert ok - before.get("mcfs_fetches_total", result="ok") >= nblocks
        # readahead is off: each block is fetched once, on a miss
        assert cold.get("mcfs_cache_misses_total", tier="ram") >= nblocks
        assert ok == nblocks, "readahead_max=0, yet %d fetches for %d blocks" % (ok, nblocks)
        assert check_histogram(cold, "mcfs_fetch_duration_seconds") == ok + err
        assert cold.get("mcfs_fetch_duration_seconds_sum") > 0
        assert cold.get("mcfs_store_read_bytes_total") >= size
        assert cold.get("mcfs_store_read_requests_total") >= nblocks
        assert cold.get("mcfs_store_requests_total", result="ok") >= nblocks
        assert cold.get("mcfs_store_requests_total", result="error") == 0
        assert cold.get("mcfs_cache_slots_used", tier="ram") >= nblocks
        assert cold.get("mcfs_cache_used_bytes", tier="ram") >= nblocks * 8 * MiB
        assert cold.get("mcfs_fetches_inflight") == 0

        # Re-read around the page cache: every block is now a RAM-tier hit.
        try:
            got = read_direct(m.p("model.bin"))
        except OSError:
            drop_caches()
            with open(m.p("model.bin"), "rb") as f:
                got = len(f.read())
        assert got == size
        warm = Metrics(scrape(port))
        hits = warm.get("mcfs_cache_hits_total", tier="ram") - \
            cold.get("mcfs_cache_hits_total", tier="ram")
        assert hits >= nblocks, warm.text
        assert warm.get("mcfs_fetches_total", result="ok") == ok, "re-read fetched again"
        assert warm.get("mcfs_fetched_bytes_total") == cold.get("mcfs_fetched_bytes_total")
        assert check_histogram(warm, "mcfs_fetch_duration_seconds") == ok


def test_readahead_window_histogram(tmp):
    """A sequential read grows the window: prefetches happen and windows are recorded."""
    need_root()
    size = 48 * MiB
    write_file(tmp / "src" / "seq.bin", size)
    port = free_port()
    opts = ["metrics=127.0.0.1:%d" % port, "block_size=1M", "ram_cache=128M",
            "readahead_max=16M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        with open(m.p("seq.bin"), "rb") as f:
            while f.read(MiB):
                pass
        after = Metrics(scrape(port))
        assert after.types["mcfs_readahead_window_blocks"] == "histogram"
        windows = check_histogram(after, "mcfs_readahead_window_blocks")
        assert windows >= 2, after.text
        assert after.get("mcfs_prefetches_total") > 0
        # windows grew beyond one block: some sample sits above the le="1" bucket
        b = dict(after.buckets("mcfs_readahead_window_blocks"))
        assert b[float("inf")] > b[1.0], b
        ok = after.get("mcfs_fetches_total", result="ok")
        assert ok >= 48
        assert check_histogram(after, "mcfs_fetch_duration_seconds") == \
            ok + after.get("mcfs_fetches_total", result="error")
        assert after.get("mcfs_fetched_bytes_total") >= size


def test_store_errors_counted(tmp):
    """A failing store read (posix fault hook) shows up as an error or a retry."""
    need_root()
    size = 2 * 8 * MiB
    write_file(tmp / "src" / "f.bin", size)
    port = free_port()
    opts = ["metrics=127.0.0.1:%d" % port, "readahead_max=0"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts,
                    env={"MCFS_POSIX_FAULT": "fail:1"}) as m:
        try:
            with open(m.p("f.bin"), "rb") as f:
                f.read()
        except OSError:
            pass                        # EIO is a fine answer when retries are spent
        after = Metrics(scrape(port))
        errors = after.get("mcfs_store_requests_total", result="error")
        retries = after.get("mcfs_store_retries_total")
        assert errors + retries >= 1, after.text
        fetches = after.get("mcfs_fetches_total", result="ok") + \
            after.get("mcfs_fetches_total", result="error")
        assert check_histogram(after, "mcfs_fetch_duration_seconds") == fetches


def test_only_metrics_path_and_only_configured_address(tmp):
    need_root()
    (tmp / "src" / "a").write_bytes(b"x")
    port = free_port()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["metrics=127.0.0.1:%d" % port]):
        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(port, "/")
        assert e.value.code == 404
        # the listening socket is bound to 127.0.0.1, not to every address
        want = "0100007F:%04X" % port
        with open("/proc/net/tcp") as f:
            rows = [ln.split() for ln in f.readlines()[1:]]
        listening = [r[1] for r in rows if r[3] == "0A" and r[1].endswith(":%04X" % port)]
        assert listening == [want], listening


def test_metrics_off_by_default(tmp):
    """Without the key no port is opened: the daemon has no listening TCP socket."""
    need_root()
    (tmp / "src" / "a").write_bytes(b"x")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt")) as m:
        inodes = set()
        for link in fd_links(m.proc.pid):
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        with open("/proc/net/tcp") as f4, open("/proc/net/tcp6") as f6:
            rows = [ln.split() for ln in f4.readlines()[1:] + f6.readlines()[1:]]
        assert not [r for r in rows if r[3] == "0A" and r[9] in inodes]


def test_metrics_port_in_use_fails_mount(tmp):
    """A metrics address that cannot be bound stops the mount with a clear message."""
    need_root()
    (tmp / "src" / "a").write_bytes(b"x")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"),
                     "-o", "metrics=127.0.0.1:%d,cache_dir=" % port, timeout=30)
        out = r.stdout + r.stderr
        try:
            assert r.returncode != 0, out
            assert "127.0.0.1:%d" % port in out and "in use" in out, out
        finally:
            force_unmount(str(tmp / "mnt"))


def test_disk_tier_and_gpu_load_metrics(tmp):
    """With a cache_dir, the tier-labelled families carry a disk line: after a
    restart a cold read is answered by the disk tier (disk hits, no store
    fetch). A GPU load that fails (no GPU here) is counted by result."""
    import fcntl
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "gpu", "python"))
    from mcfs import _abi
    need_root()
    write_file(str(tmp / "src" / "m.bin"), 4 << 20)
    port = free_port()
    # no passthrough: a complete file's reads would bypass the tiers' counters
    opts = ["block_size=1M", "ram_cache=16M", "readahead_max=0", "passthrough=off",
            "cache_dir=" + str(tmp / "cache"), "metrics=127.0.0.1:%d" % port]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert read_direct(m.p("m.bin")) == 4 << 20
        # write-behind finishes before the daemon exits (unmount flushes)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        assert read_direct(m.p("m.bin")) == 4 << 20  # bytes: test_restart_warm
        fd = os.open(m.p("m.bin"), os.O_RDONLY)
        try:
            r = _abi.LoadReq(abi_version=_abi.ABI, nranges=1)
            r.ranges[0].len = 100
            try:
                fcntl.ioctl(fd, _abi.IOC_LOAD, r)
                gpu = True
            except OSError:
                gpu = False
        finally:
            os.close(fd)
        mx = Metrics(scrape(port))
        assert mx.get("mcfs_cache_hits_total", tier="disk") >= 4
        assert mx.get("mcfs_cache_misses_total", tier="disk") == 0
        assert mx.get("mcfs_cache_capacity_bytes", tier="disk") > 0
        assert mx.get("mcfs_cache_used_bytes", tier="disk") >= 4 << 20
        assert mx.get("mcfs_disk_read_bytes_total") >= 4 << 20
        assert mx.get("mcfs_disk_checksum_errors_total") == 0
        assert mx.get("mcfs_fetches_total", result="ok") == 0, "a store fetch after restart"
        assert mx.get("mcfs_gpu_loads_total", result="ok" if gpu else "error") == 1


# ---- the exposition, line by line (issue 25, item 7) ------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)"
SAMPLE = re.compile(r"^(%s)(\{(?:%s)(?:,%s)*\})? (%s)$" % (NAME, LABEL, LABEL, VALUE))
HELP = re.compile(r"^# HELP (%s) (.*)$" % NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


def strict_parse(text):
    """Text format 0.0.4 as Prometheus reads it, with no leniency: every line a
    HELP, a TYPE or a sample; each family's HELP and TYPE once, before its
    samples, whose names are the family's (a histogram's: _bucket, _sum,
    _count, and all three there); no sample twice; the text ends in a newline.
    Returns {family: (type, {(sample name, labels): value})}."""
    assert text.endswith("\n"), "no newline at the end"
    fams, cur = {}, None
    for ln in text[:-1].split("\n"):
        h, t, s = HELP.match(ln), TYPE.match(ln), SAMPLE.match(ln)
        if h:
            assert h.group(1) not in fams, "family %s declared twice" % h.group(1)
            cur = h.group(1)
            fams[cur] = [None, {}]
        elif t:
            assert t.group(1) == cur and fams[cur][0] is None, "TYPE without its HELP: %r" % ln
            fams[cur][0] = t.group(2)
        elif s:
            assert cur and fams[cur][0], "sample before its family's TYPE: %r" % ln
            kind, name = fams[cur][0], s.group(1)
            allowed = [cur + x for x in SUFFIXES.get(kind, ("",))]
            assert name in allowed, "%s in family %s (%s)" % (name, cur, kind)
            labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"',
                                          s.group(2) or ""))
            key = (name, labels)
            assert key not in fams[cur][1], "sample twice: %r" % ln
            fams[cur][1][key] = float(s.group(3))
        else:
            raise AssertionError("not a line of the text format: %r" % ln)
    for fam, (kind, samples) in fams.items():
        names = {n for n, _ in samples}
        if kind == "histogram":
            assert names == {fam + "_bucket", fam + "_sum", fam + "_count"}, (fam, names)
            inf = [v for (n, l), v in samples.items() if n == fam + "_bucket"
                   and dict(l)["le"] == "+Inf"]
            assert inf == [samples[(fam + "_count", frozenset())]], fam
        assert samples, "family %s has no sample" % fam
    return {f: (k, s) for f, (k, s) in fams.items()}


def one(fams, name):
    kind, samples = fams[name]
    assert list(samples) == [(name, frozenset())], samples
    return kind, samples[(name, frozenset())]


def proc_stat(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 of proc(5)
    return {"cpu": (int(fields[11]) + int(fields[12])), "start": int(fields[19]),
            "rss": int(fields[21])}


def test_process_metrics_and_every_histogram_whole(tmp):
    """The standard process collector's families, against the daemon's /proc
    entries read around the scrape, and _sum and _count on every histogram."""
    need_root()
    write_file(tmp / "src" / "seq.bin", 24 * MiB)
    port = free_port()
    opts = ["metrics=127.0.0.1:%d" % port, "block_size=1M", "ram_cache=64M",
            "readahead_max=8M"]
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/stat") as f:
        btime = int(re.search(r"^btime (\d+)$", f.read(), re.M).group(1))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=opts) as m:
        with open(m.p("seq.bin"), "rb") as f:
            while f.read(MiB):
                pass
        pid = m.proc.pid
        before, fds_before = proc_stat(pid), len(os.listdir("/proc/%d/fd" % pid))
        text = scrape(port)
        after, fds_after = proc_stat(pid), len(os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/limits" % pid) as f:
            soft = re.search(r"^Max open files\s+(\d+)", f.read(), re.M).group(1)
    fams = strict_parse(text)

    kind, cpu = one(fams, "process_cpu_seconds_total")
    assert kind == "counter" and before["cpu"] / tick <= cpu <= after["cpu"] / tick, \
        (before, cpu, after)
    kind, start = one(fams, "process_start_time_seconds")
    assert kind == "gauge" and start == round(btime + before["start"] / tick, 2), start
    kind, rss = one(fams, "process_resident_memory_bytes")
    lo, hi = sorted((before["rss"] * page, after["rss"] * page))
    assert kind == "gauge" and rss % page == 0 and lo - 4 * MiB <= rss <= hi + 4 * MiB, \
        (lo, rss, hi)  # the scrape itself may touch a few pages
    kind, fds = one(fams, "process_open_fds")
    # the scrape's own connection is one more while it is served
    assert kind == "gauge" and min(fds_before, fds_after) <= fds <= max(fds_before,
                                                                        fds_after) + 1, \
        (fds_before, fds, fds_after)
    kind, limit = one(fams, "process_max_fds")
    assert kind == "gauge" and limit == int(soft)

    hists = [f for f, (k, _) in fams.items() if k == "histogram"]
    assert sorted(hists) == ["mcfs_fetch_duration_seconds", "mcfs_readahead_window_blocks"]
    # windows fall in (le/2, le] blocks, so their sum lies between the bounds
    _, ra = fams["mcfs_readahead_window_blocks"]
    cum = sorted(((float(dict(l)["le"]), v) for (n, l), v in ra.items()
                  if n.endswith("_bucket")))
    low = high = prev = prev_le = 0
    for le, c in cum:  # bucket le holds windows of prev_le + 1 to le blocks
        if c > prev:
            low += (c - prev) * (prev_le + 1)
            high += (c - prev) * le
        prev, prev_le = c, le
    total = ra[("mcfs_readahead_window_blocks_sum", frozenset())]
    assert ra[("mcfs_readahead_window_blocks_count", frozenset())] >= 2
    assert low <= total <= high, (low, total, high, cum)
