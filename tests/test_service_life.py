"""Service life and logs (issue 7).

- `mcfs mount` daemonises by default and returns 0 only with the mount live
  (its error cases, in both modes, are in test_cli_errors.py, as is a second
  mount on a mounted mount point).
- A daemon killed with SIGKILL leaves a dead mount that `mcfs umount` clears,
  after which the mount point can be mounted again.
- Unmount ends the daemon cleanly, also with fetches in flight.
- Logs: level-tagged lines on stderr in the foreground, syslog when
  daemonised, a failed read logged with its path and block; no secret ever
  appears in any of them.
"""
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import (MCFS, cleanup_daemon, daemon_pids, fuse_mounted, mcfs_mount, need_root,
                      run_mcfs, wait_for)

MiB = 1 << 20
SECRET = "SECRETVALUE-do-not-log-4f7c"
TOKEN = "TOKENVALUE-do-not-log-9a1b"
# a foreground daemon stamps its lines (test_logs.py checks the stamp)
LEVEL_LINE = re.compile(r"^\S+Z mcfs: (error|warning|info|debug): \S")


def wait_gone(pids, timeout=20):
    """True once none of `pids` runs any more (zombies count as gone)."""
    def gone():
        for p in pids:
            try:
                with open("/proc/%d/stat" % p) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        return False
            except OSError:
                pass
        return True
    return wait_for(gone, timeout=timeout)


@pytest.fixture
def mnt(tmp):
    """The mount point; whatever a test leaves mounted or running is cleared."""
    path = tmp / "mnt"
    yield path
    cleanup_daemon(str(path))           # only daemons of this test's mount point


def write(path, size):
    data = os.urandom(size)
    with open(path, "wb") as f:
        f.write(data)
    return data


def test_daemon_mounts_before_returning(tmp, mnt):
    need_root()
    write(tmp / "src" / "w.bin", 3 * MiB)
    r = run_mcfs("mount", str(tmp / "src"), str(mnt), "-o", "cache_dir=", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # no polling: the mount must be there the moment `mcfs mount` returned
    assert fuse_mounted(str(mnt))
    pids = daemon_pids(mnt)
    assert len(pids) == 1, pids
    with open(tmp / "src" / "w.bin", "rb") as a, open(mnt / "w.bin", "rb") as b:
        assert a.read() == b.read()
    r = run_mcfs("umount", str(mnt), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not fuse_mounted(str(mnt))
    assert wait_gone(pids), "daemon still running after umount"


def test_umount_clears_crashed_daemon(tmp, mnt):
    need_root()
    (tmp / "src" / "a.txt").write_bytes(b"hello")
    proc = subprocess.Popen([MCFS, "mount", str(tmp / "src"), str(mnt), "-f", "-o",
                             "cache_dir="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while not fuse_mounted(str(mnt)):
            assert proc.poll() is None and time.time() < deadline, "mount did not appear"
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        assert fuse_mounted(str(mnt)), "the kernel dropped the mount by itself"
        with pytest.raises(OSError):
            os.stat(mnt / "a.txt")      # ENOTCONN: the daemon is gone
        r = run_mcfs("umount", str(mnt), timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not fuse_mounted(str(mnt))
        # and the mount point is usable again
        with mcfs_mount(str(tmp / "src"), str(mnt)) as m:
            with open(m.p("a.txt"), "rb") as f:
                assert f.read() == b"hello"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_umount_with_fetches_in_flight(tmp, mnt):
    """Unmount right after a sequential reader started readahead: clean exit, code 0."""
    need_root()
    write(tmp / "src" / "big.bin", 64 * MiB)
    opts = ["block_size=1M", "ram_cache=128M", "readahead_max=64M", "connections=2"]
    with mcfs_mount(str(tmp / "src"), str(mnt), opts=opts) as m:
        with open(m.p("big.bin"), "rb") as f:
            f.read(2 * MiB)             # starts a growing readahead window
        r = run_mcfs("umount", str(mnt), timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        m.proc.wait(timeout=30)
        assert m.proc.returncode == 0, m.log()
        assert not fuse_mounted(str(mnt))
        errors = [ln for ln in m.log().splitlines() if " mcfs: error:" in ln]
        assert not errors, errors


def test_umount_in_flight_with_disk_tier_keeps_what_was_fetched(tmp, mnt):
    """Unmount while readahead fetches are in flight, with a disk tier: the
    daemon waits for them and the write-behind, and flushes the tier's index,
    so a new daemon on the same cache_dir serves every block the first one
    had fetched from disk (no store read for them), and the bytes are right."""
    need_root()
    data = write(tmp / "src" / "big.bin", 64 * MiB)
    cache = str(tmp / "cache")
    opts = ["block_size=1M", "ram_cache=128M", "readahead_max=64M", "connections=2",
            "cache_dir=" + cache]
    with mcfs_mount(str(tmp / "src"), str(mnt), opts=opts) as m:
        with open(m.p("big.bin"), "rb") as f:
            f.read(2 * MiB)             # starts a growing readahead window
        fetched = m.stats()["fetches"]  # done by now; more are in flight
        r = run_mcfs("umount", str(mnt), timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        m.proc.wait(timeout=30)
        assert m.proc.returncode == 0, m.log()
    assert fetched >= 2
    with mcfs_mount(str(tmp / "src"), str(mnt), opts=opts + ["readahead_max=0"]) as m:
        with open(m.p("big.bin"), "rb") as f:
            assert f.read() == data
        st = m.stats()
    assert st["disk_hits"] >= fetched, (fetched, st)
    assert st["disk_hits"] + st["store_reads"] == 64, st
    assert st["disk_csum_errors"] == 0, st


def test_foreground_log_lines_are_level_tagged(tmp):
    need_root()
    write(tmp / "src" / "a.bin", 2 * MiB)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["log_level=debug"]) as m:
        with open(m.p("a.bin"), "rb") as f:
            f.read()
        os.listdir(m.path)
        time.sleep(0.2)
        log = m.log()                   # the fixture deletes it after a clean exit
    lines = [ln for ln in log.splitlines() if ln.strip()]
    assert lines, "nothing logged at debug level"
    bad = [ln for ln in lines if not LEVEL_LINE.match(ln)]
    assert not bad, "untagged log lines: %s" % bad[:10]


def test_failed_read_logged_with_path_and_block(tmp):
    """A store failure is one line naming the path, the block and the store's answer."""
    need_root()
    write(tmp / "src" / "broken.bin", 2 * 8 * MiB)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["readahead_max=0", "retries=0"],
                    env={"MCFS_POSIX_FAULT": "fail:1"}) as m:
        try:
            with open(m.p("broken.bin"), "rb") as f:
                f.read()
        except OSError:
            pass  # or not: the kernel retries a failed readahead itself; the log line is checked
        time.sleep(0.2)
        log = m.log()
    lines = [ln for ln in log.splitlines()
             if (" mcfs: error:" in ln or " mcfs: warning:" in ln) and "broken.bin" in ln]
    assert lines, log
    assert any(re.search(r"block", ln) and re.search(r"I/O error|EIO|error", ln, re.I)
               for ln in lines), lines


def secret_opts():
    return ["access_key=AKIDEXAMPLE", "secret_key=" + SECRET, "session_token=" + TOKEN]


def assert_no_secret(text):
    assert SECRET not in text and TOKEN not in text, text


def test_no_secret_in_foreground_log(tmp):
    need_root()
    write(tmp / "src" / "a.bin", MiB)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=secret_opts() + ["log_level=debug"],
                    env={"MCFS_POSIX_FAULT": "fail:1"}) as m:
        try:
            with open(m.p("a.bin"), "rb") as f:
                f.read()
        except OSError:
            pass  # or not: the kernel retries a failed readahead itself; the log is checked
        time.sleep(0.2)
        log = m.log()
    assert "a.bin" in log, "the failed read was not logged: %r" % log
    assert_no_secret(log)


@pytest.mark.parametrize("case", ["bad_value", "unreachable_s3"])
def test_no_secret_in_mount_errors(tmp, mnt, case):
    need_root()
    if case == "bad_value":
        # the bad key is the secret itself: it is named, never echoed
        args = [str(tmp / "src"), str(mnt), "-o", "secret_key=%s,connections=0" % SECRET]
        r = run_mcfs("mount", *args, timeout=30)
        assert r.returncode != 0
        assert_no_secret(r.stdout + r.stderr)
        args = [str(tmp / "src"), str(mnt), "-o",
                "access_key=AKIDEXAMPLE,secret_key=%s,bogus=1" % SECRET]
    else:
        with socket.socket() as s:      # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args = ["s3://bucket/prefix", str(mnt), "-o",
                ",".join(secret_opts() + ["endpoint=http://127.0.0.1:%d" % port, "retries=0",
                                          "connect_timeout=1", "log_level=debug"])]
    r = run_mcfs("mount", *args, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    assert r.stdout + r.stderr, "failed without saying why"
    assert_no_secret(r.stdout + r.stderr)


def test_daemon_logs_to_syslog(tmp, mnt):
    """Daemonised, the log goes to syslog (/dev/log), tagged mcfs, without secrets."""
    need_root()
    if os.path.exists("/dev/log"):
        pytest.skip("/dev/log belongs to a running syslog daemon; not stealing it")
    write(tmp / "src" / "a.bin", MiB)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("/dev/log")
    msgs = []
    done = threading.Event()

    def collect():
        sock.settimeout(0.2)
        while not done.is_set():
            try:
                msgs.append(sock.recv(65536).decode(errors="replace"))
            except socket.timeout:
                pass

    t = threading.Thread(target=collect)
    t.start()
    try:
        r = run_mcfs("mount", str(tmp / "src"), str(mnt), "-o",
                     ",".join(secret_opts() + ["log_level=debug", "cache_dir="]), timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        pids = daemon_pids(mnt)
        with open(mnt / "a.bin", "rb") as f:
            f.read()
        r = run_mcfs("umount", str(mnt), timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert wait_gone(pids)
        time.sleep(0.3)
    finally:
        done.set()
        t.join()
        sock.close()
        os.unlink("/dev/log")
    text = "\n".join(msgs)
    assert any(re.search(r"mcfs\[\d+\]: ", m) for m in msgs), "no syslog line from mcfs: %r" % msgs
    assert_no_secret(text)
