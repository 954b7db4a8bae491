"""Shared fixtures for the end-to-end tests.

Every mount is made through `mcfs_mount()`, a context manager that starts
`mcfs mount ... -f` (foreground, so the test owns the process), waits until
the kernel shows the mount, and on exit - pass or fail - unmounts it and
stops the daemon. The daemon's log is kept and attached to failures.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MCFS = os.environ.get("MCFS_BIN", os.path.join(ROOT, "build", "fs", "mcfs"))


def fuse_mounted(path):
    """True if `path` is a FUSE mount point right now (reads /proc/mounts)."""
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            mnt = fields[1].encode().decode("unicode_escape")
            if mnt == path and fields[2].startswith("fuse"):
                return True
    return False


def force_unmount(path):
    for cmd in (["fusermount3", "-u", path], ["umount", path], ["umount", "-l", path]):
        if not fuse_mounted(path):
            return
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Mount:
    def __init__(self, proc, path, logpath):
        self.proc = proc
        self.path = path
        self.logpath = logpath

    def p(self, *parts):
        return os.path.join(self.path, *parts)

    def log(self):
        with open(self.logpath, errors="replace") as f:
            return f.read()

    def stats(self):
        """Counters of the running daemon, from the root's user.mcfs.stats xattr.

        Never returns without them: raises RuntimeError saying why (the xattr
        could not be read - with the daemon's exit status and log if it has
        exited - or a line is not "key integer"), so that no check on a
        counter can pass for want of the counters.
        """
        try:
            raw = os.getxattr(self.path, "user.mcfs.stats").decode()
        except OSError as e:
            raise RuntimeError("cannot read the counters of %s (getxattr user.mcfs.stats): %s%s"
                               % (self.path, e, self._daemon_state())) from e
        out = {}
        for line in raw.splitlines():
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r"-?[0-9]+", parts[1]):
                raise RuntimeError("counters of %s: line %r is not 'key integer'; all of them:\n%s"
                                   % (self.path, line, raw))
            out[parts[0]] = int(parts[1])
        if not out:
            raise RuntimeError("counters of %s: user.mcfs.stats is empty%s"
                               % (self.path, self._daemon_state()))
        return out

    def _daemon_state(self):
        """'' while the daemon runs; else its exit status and log, for error messages."""
        status = self.proc.poll()
        if status is None:
            return ""
        return "; the daemon exited with status %s; its log:\n%s" % (status, self.log())


def wants_ram_only(opts, extra_args):
    """True if a mount with these arguments would use the built-in cache_dir:
    neither opts nor a config file (`-c FILE`) set one."""
    if any(o.split("=", 1)[0] == "cache_dir" for o in opts):
        return False
    args = list(extra_args)
    for i, a in enumerate(args):
        if a.startswith("-c"):
            path = a[2:] or (args[i + 1] if i + 1 < len(args) else "")
            try:
                with open(path) as f:
                    if re.search(r"^\s*cache_dir\s*=", f.read(), re.M):
                        return False
            except OSError:
                pass  # mcfs will say why it cannot read it
    return True


@contextlib.contextmanager
def mcfs_mount(source, mountpoint, opts=(), extra_args=(), env=None, timeout=20,
               builtin_cache_dir=False, binary=None):
    """Mounts `source` on `mountpoint` with mcfs in the foreground.

    Yields a Mount. Raises RuntimeError (with the daemon's log) if the mount
    does not appear within `timeout` seconds.

    The mount is RAM only (`cache_dir=`, added to opts) unless opts or the
    config file (`-c FILE`) set a cache_dir, or builtin_cache_dir is true:
    mcfs's default, /var/cache/mcfs, would keep every test's store.
    `binary` runs another copy of mcfs than MCFS_BIN.
    """
    opts = list(opts)
    if not builtin_cache_dir and wants_ram_only(opts, extra_args):
        opts.append("cache_dir=")
    os.makedirs(mountpoint, exist_ok=True)
    logfd, logpath = tempfile.mkstemp(prefix="mcfs-log-", suffix=".txt")
    cmd = [binary or MCFS, "mount", source, mountpoint, "-f"]
    if opts:
        cmd += ["-o", ",".join(opts)]
    cmd += list(extra_args)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.Popen(cmd, stdout=logfd, stderr=logfd, env=full_env)
    except BaseException:
        os.unlink(logpath)  # e.g. no binary at MCFS: don't leave an empty log behind
        raise
    finally:
        os.close(logfd)
    mnt = None
    try:
        deadline = time.time() + timeout
        # Ready means the daemon's own check (a stat of the mount point) is
        # done and logged: until then an unmount can find the mount busy.
        # With a log level above info only the mount itself can be waited for.
        quiet = any(o.startswith("log_level=") and o not in ("log_level=info", "log_level=debug")
                    for o in opts)
        ready_line = "on %s (" % os.path.abspath(mountpoint)
        while not (fuse_mounted(mountpoint) and
                   (quiet or ready_line in open(logpath, errors="replace").read())):
            if proc.poll() is not None:
                raise RuntimeError("mcfs exited with %d before mounting:\n%s"
                                   % (proc.returncode, open(logpath).read()))
            if time.time() > deadline:
                raise RuntimeError("mount did not get ready in %ds:\n%s"
                                   % (timeout, open(logpath).read()))
            time.sleep(0.02)
        mnt = Mount(proc, mountpoint, logpath)
        yield mnt
    finally:
        force_unmount(mountpoint)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        report = sanitizer_report(logpath)
        if (mnt is None or proc.returncode == 0) and not report:
            os.unlink(logpath)
        else:
            # keep the log of a daemon that did not exit cleanly, and say where
            print("mcfs exited %s; log kept at %s" % (proc.returncode, logpath))
        if report and sys.exc_info()[0] is None:
            # a sanitizer build (tests/run.sh in CI) reports and goes on (TSan's
            # halt_on_error=0): the test fails here, with the report
            raise AssertionError("sanitizer report in the daemon's log (%s):\n%s"
                                 % (logpath, report))


SANITIZER_MARKS = ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
                   "ERROR: LeakSanitizer", "runtime error: ")


def sanitizer_report(logpath):
    """The first sanitizer report in a daemon's log (up to 6000 chars), or ''."""
    try:
        with open(logpath, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    at = [text.find(m) for m in SANITIZER_MARKS if m in text]
    return text[min(at):min(at) + 6000] if at else ""


@pytest.fixture
def tmp(tmp_path):
    """A scratch directory with `src/` (the store) and `mnt/` (the mount point)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    return tmp_path


DAMON_KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_RECLAIM = "/sys/module/damon_reclaim/parameters/enabled"
# What damon_paused() blocks have stopped and not yet started again: lines of
# "PID KNOB ON-VALUE". A run killed by a signal inside the block (no finally)
# leaves its lines; the next block started anywhere puts those knobs back.
DAMON_MARK = "/run/mcfs-tests-damon-paused"


def _damon_marks(change):
    """Under an exclusive lock on DAMON_MARK, calls change(lines) with its
    lines and writes back the list it returns."""
    import fcntl
    try:
        fd = os.open(DAMON_MARK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        print("damon_paused: cannot open %s: %s" % (DAMON_MARK, e))
        return
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lines = change([ln.split() for ln in f.read().splitlines() if len(ln.split()) == 3])
        f.seek(0)
        f.truncate()
        f.write("".join("%s %s %s\n" % tuple(ln) for ln in lines))


def _alive(pid):
    try:
        os.kill(int(pid), 0)
        return True
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True  # someone else's, or not a pid: not ours to judge


@contextlib.contextmanager
def damon_paused():
    """Pauses the kernel's proactive reclaim (DAMON) inside the block, so that
    page-cache pages put there stay until they are looked at or read.

    The VMs these tests run on give idle memory back with a DAMON `pageout`
    scheme on physical addresses: every few seconds it evicts pages of any
    region that was cold for a minute, and a page freshly cached can sit in
    such a region. A trace of one failure of test_cold_push showed kdamond
    evicting 6 pages of the mount's file (mm_filemap_delete_from_page_cache
    from damon_pa_apply_scheme) between the push's end and the mapping's read,
    which READ them again; a benchmark's page cache is evicted the same way.
    Every kdamond it stops is started again, with the same settings, after; a
    knob this machine does not let us turn is said, not fatal."""
    from fuse_knobs import read_knob  # it imports this module

    def put(path, value):
        try:
            with open(path, "w") as f:
                f.write(value)
            return True
        except OSError as e:
            print("damon_paused: cannot write %s to %s: %s" % (value, path, e))
            return False

    def left_by_the_dead(lines):  # a killed run's knobs, put back
        for pid, path, value in lines:
            if not _alive(pid):
                print("damon_paused: %s left by process %s, killed inside the block: %s again"
                      % (path, pid, value))
                put(path, value)
        return [ln for ln in lines if _alive(ln[0])]

    me = str(os.getpid())
    stopped = []
    _damon_marks(left_by_the_dead)
    try:
        for d in sorted(os.listdir(DAMON_KDAMONDS)) if os.path.isdir(DAMON_KDAMONDS) else []:
            state = os.path.join(DAMON_KDAMONDS, d, "state")
            if read_knob(state) == "on" and put(state, "off"):
                stopped.append((state, "on"))
        if read_knob(DAMON_RECLAIM) == "Y" and put(DAMON_RECLAIM, "N"):
            stopped.append((DAMON_RECLAIM, "Y"))
        _damon_marks(lambda lines: lines + [[me, path, v] for path, v in stopped])
        yield
    finally:
        for path, value in stopped:
            put(path, value)
        _damon_marks(lambda lines: [ln for ln in lines
                                    if not (ln[0] == me and (ln[1], ln[2]) in stopped)])


@pytest.fixture
def pages_stay():
    """damon_paused() for the test: what a test checks about the page cache
    depends on mcfs alone. Root only (skips otherwise)."""
    need_root()
    with damon_paused():
        yield


def run_mcfs(*args, env=None, timeout=60):
    """Runs the mcfs CLI; returns CompletedProcess with text output."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([MCFS, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (FUSE mounts with allow_other, drop_caches)")


def have(cmd):
    return shutil.which(cmd) is not None


# ---- helpers added for the foundation suite (issue 2) -------------------------
# New functions only: the ones above keep their behaviour.

def daemon_pids(mountpoint):
    """PIDs of mcfs processes whose command line names `mountpoint`.

    For daemons the test did not start with Popen (daemon mode, mount -t
    fuse.mcfs); matches the exact argument, so it never picks another test's
    daemon.
    """
    want = os.path.realpath(mountpoint).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                args = f.read().split(b"\0")
            exe = os.readlink("/proc/%s/exe" % d)
        except OSError:
            continue
        if os.path.basename(exe).startswith("mcfs") and any(
                os.path.realpath(a) == want for a in args if a.startswith(b"/")):
            pids.append(int(d))
    return pids


def fd_links(pid):
    """Where each of the process's descriptors points (readlink of
    /proc/PID/fd/N). A descriptor closed between the listing and its
    readlink is left out: the daemon's threads open and close files while a
    test looks."""
    out = []
    for n in os.listdir("/proc/%d/fd" % pid):
        try:
            out.append(os.readlink("/proc/%d/fd/%s" % (pid, n)))
        except FileNotFoundError:  # closed meanwhile
            pass
    return out


def wait_for(pred, timeout=10.0, step=0.02):
    """Polls pred() until true or timeout; returns its last value."""
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() > deadline:
            return v
        time.sleep(step)


def cleanup_daemon(mountpoint):
    """Unmounts `mountpoint` and stops any mcfs still serving it (SIGTERM, then SIGKILL)."""
    import signal

    force_unmount(mountpoint)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = daemon_pids(mountpoint)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        wait_for(lambda: not daemon_pids(mountpoint), timeout=5)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the error lines of every Swift that ran
    during it (a 503 from the S3 front end names no cause of its own)."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        import servers
        for sw in servers.Swift.started:
            if sw.stopped_at is not None and sw.stopped_at < call.start:
                continue
            text = sw.log_problems()
            if text:
                rep.sections.append(("swift logs (%s)" % sw.dir, text))

