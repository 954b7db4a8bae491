"""Logs an operator can use (issue 25, item 4):

  - a foreground daemon stamps each line with the time (RFC 3339, UTC, ms);
  - log_format=json writes one JSON object per line (time, level, pid, msg);
  - a line to journald's stream starts with its syslog priority ("<3>" for an
    error), so start-up errors are stored at priority 3, not journald's 6;
  - `mcfs log-level MOUNTPOINT LEVEL` changes the level while mounted.
"""
import datetime
import json
import os
import re
import subprocess

import pytest

from conftest import (MCFS, force_unmount, fuse_mounted, have, mcfs_mount, run_mcfs,
                      wait_for)

STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) mcfs: (error|warning|info|debug): \S")


def utc(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)


def now():
    # the log's stamps have ms: compare at that precision
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def test_foreground_lines_are_stamped(tmp):
    (tmp / "src" / "f").write_bytes(b"x")
    before = now()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt")) as m:
        assert open(m.p("f"), "rb").read() == b"x"
        log = m.log()
    after = now()
    lines = log.splitlines()
    assert any("mounted" in ln for ln in lines), log
    for ln in lines:
        got = STAMPED.match(ln)
        assert got, "not a stamped line: %r" % ln
        assert before <= utc(got.group(1)) <= after, (before, ln, after)


def test_json_lines(tmp):
    name = 'q"uote\\back\tslash'
    (tmp / "src" / name).write_bytes(b"y" * 4096)
    before = now()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["log_format=json", "log_level=debug"]) as m:
        assert open(m.p(name), "rb").read() == b"y" * 4096
        log = m.log()
        pid = m.proc.pid
    after = now()
    objs = []
    for ln in log.splitlines():
        obj = json.loads(ln)  # every line one object
        assert set(obj) == {"time", "level", "pid", "msg"}, obj
        assert obj["level"] in ("error", "warning", "info", "debug"), obj
        assert obj["pid"] == pid, obj
        assert before <= utc(obj["time"]) <= after, obj
        objs.append(obj)
    assert any(o["level"] == "info" and o["msg"].startswith("mounted ") for o in objs), log
    # a name with a quote, a backslash and a tab: escaped once by mcfs (the tab),
    # then as JSON, so the message reads as mcfs' text line would
    fetch = 'fetch q"uote\\back\\tslash block 0'
    assert any(o["level"] == "debug" and o["msg"].startswith(fetch) for o in objs), log


def journal_run(tmp, args, same_stream=True):
    """Runs mcfs with stderr to a file that JOURNAL_STREAM names (as systemd
    names the socket it gives a service), or another file's; returns stderr."""
    errf = tmp / "stderr.txt"
    other = tmp / "other.txt"
    other.write_bytes(b"")
    with open(errf, "wb") as f:
        st = os.fstat(f.fileno()) if same_stream else os.stat(other)
        env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
        r = subprocess.run([MCFS] + args, stdout=subprocess.DEVNULL, stderr=f, env=env,
                           timeout=60)
    return r.returncode, errf.read_text()


def test_journal_gets_priority_from_the_first_line(tmp):
    missing = str(tmp / "no-such-store")
    rc, err = journal_run(tmp, ["mount", missing, str(tmp / "mnt")])
    assert rc != 0
    first = err.splitlines()[0]
    assert first.startswith("<3>mcfs: error: "), err
    # a stream that is not journald's: no priority, as before
    rc, err = journal_run(tmp, ["mount", missing, str(tmp / "mnt")], same_stream=False)
    assert rc != 0 and err.startswith("mcfs: error: "), err


def test_journal_lines_of_a_foreground_daemon(tmp):
    """A foreground daemon under systemd (Type=simple, or a container runtime
    that gives journald's stream): every line carries its level's priority,
    and no time of its own (journald stamps entries)."""
    (tmp / "src" / "f").write_bytes(b"x")
    mnt = str(tmp / "mnt")
    errf = tmp / "stderr.txt"
    with open(errf, "wb") as f:
        st = os.fstat(f.fileno())
        env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
        proc = subprocess.Popen([MCFS, "mount", str(tmp / "src"), mnt, "-f", "-o", "cache_dir="],
                                stdout=subprocess.DEVNULL, stderr=f, env=env)
    try:
        assert wait_for(lambda: "mounted " in errf.read_text() or proc.poll() is not None,
                        timeout=20), errf.read_text()
        assert fuse_mounted(mnt), errf.read_text()
        assert open(os.path.join(mnt, "f"), "rb").read() == b"x"
    finally:
        force_unmount(mnt)
        proc.wait(timeout=15)
    prio = {"error": 3, "warning": 4, "info": 6, "debug": 7}
    lines = errf.read_text().splitlines()
    assert any("mounted " in ln for ln in lines), lines
    for ln in lines:
        got = re.match(r"^<(\d)>mcfs: (error|warning|info|debug): \S", ln)
        assert got and int(got.group(1)) == prio[got.group(2)], ln


def fetched(m, name):
    return ("fetch %s block 0" % name) in m.log()


def test_log_level_changes_while_mounted(tmp):
    for n in ("a", "b", "c"):
        (tmp / "src" / n).write_bytes(n.encode() * 4096)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt")) as m:
        r = run_mcfs("log-level", m.path)
        assert r.returncode == 0 and r.stdout == "%s: log level info\n" % m.path, r
        open(m.p("a"), "rb").read()
        r = run_mcfs("log-level", m.path, "debug")
        assert r.returncode == 0 and r.stdout == "%s: log level debug\n" % m.path, r
        open(m.p("b"), "rb").read()
        r = run_mcfs("log-level", m.path, "error")
        assert r.returncode == 0 and r.stdout == "%s: log level error\n" % m.path, r
        open(m.p("c"), "rb").read()
        assert "log level debug (was info)" in m.log(), m.log()
        assert "log level error (was debug)" in m.log(), m.log()
        assert not fetched(m, "a") and fetched(m, "b") and not fetched(m, "c"), m.log()


def test_log_level_refusals(tmp):
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["allow_other"]) as m:
        r = run_mcfs("log-level", m.path, "verbose")
        assert r.returncode == 2 and "'verbose' is no level" in r.stderr, r
        r = run_mcfs("log-level", m.path, "debgu")
        assert r.returncode == 2 and "did you mean 'debug'" in r.stderr, r
        r = run_mcfs("log-level", str(tmp / "src"), "debug")
        assert r.returncode == 1 and "not the root of an mcfs mount" in r.stderr, r
        if have("setpriv"):
            r = subprocess.run(["setpriv", "--bounding-set=-sys_admin", MCFS, "log-level",
                                m.path, "debug"], capture_output=True, text=True, timeout=30)
            assert r.returncode == 1 and "only the node's admin may set the log level" \
                in r.stderr, r
        r = run_mcfs("log-level", m.path)
        assert r.returncode == 0 and r.stdout.endswith("log level info\n"), r
