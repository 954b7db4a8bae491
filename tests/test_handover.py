"""Readers survive a daemon restart (fs/handover.h).

The mount's /dev/fuse descriptor and the daemon's state (inode numbers, open
handles, the connection's INIT) are held outside the daemon: by mcfs's own
supervisor (supervise=true) or by systemd's descriptor store (NOTIFY_SOCKET,
FDSTORE=1; here a small fake of that protocol). A new daemon, given them
back, resumes the connection; the kernel resends what the dead one had read.

Each test holds a model open through an mmap and through read() across the
restart, with requests in flight where it says so (a fetch held at a fault
proxy in front of nginx, so the kill lands while the daemon serves them), and
compares every byte with the source afterwards: never ENOTCONN, never a
wrong byte, only a pause.
"""
import array
import errno
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import MCFS, fuse_mounted, force_unmount, mcfs_mount, wait_for
from faultproxy import FaultProxy
from gen import MiB, write_random
from servers import Nginx, have_nginx

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="resuming a FUSE connection "
                                "needs root (the mount is unmounted with umount2)")


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def daemon_of(sup):
    """The supervisor's daemon child, once there is one."""
    kids = wait_for(lambda: children(sup.pid), timeout=10)
    assert kids, "the supervisor has no daemon child"
    return kids[0]


def next_daemon(m, sup, old, resumes):
    """Waits for the supervisor's next child to have resumed (its log line)."""
    assert wait_for(lambda: m.log().count("resuming ") >= resumes, timeout=20), m.log()
    new = daemon_of(sup)
    assert new != old
    return new


MAP_READER = r"""
import hashlib, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
print("mapped", flush=True)
for line in sys.stdin:
    off, n = map(int, line.split())
    print(hashlib.sha256(m[off:off + n]).hexdigest(), flush=True)
"""


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Reader:
    """One file open twice across a restart: read() here, and mapped by a
    process of its own (an mmap fault holds Python's lock while it waits,
    which would stop the test's fault proxy in this process). Reads that
    must wait run beside the test (start()). A SIGBUS of the mapper, an
    OSError here (ENOTCONN, EIO) is an error: never."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)
        self.mapper = subprocess.Popen([sys.executable, "-c", MAP_READER, path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.mapper.stdout.readline().strip() == "mapped"
        self.errors = []
        self.got = {}

    def mapped(self, off, n):
        """sha256 of the mapping's bytes [off, off + n)."""
        self.mapper.stdin.write("%d %d\n" % (off, n))
        self.mapper.stdin.flush()
        out = self.mapper.stdout.readline().strip()
        if not out:
            self.errors.append(("mmap", off, self.mapper.wait(10)))
        return out

    def start(self, what, off, n):
        def run():
            try:
                if what == "mmap":
                    self.got[(what, off)] = self.mapped(off, n)
                else:
                    self.got[(what, off)] = os.pread(self.fd, n, off)
            except OSError as e:
                self.errors.append((what, off, e))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def close(self):
        self.mapper.stdin.close()
        self.mapper.wait(10)
        os.close(self.fd)


@pytest.fixture
def http_store(tmp_path):
    if not have_nginx():
        pytest.skip("nginx not installed (deploy/install-deps.sh test installs nginx-light)")
    root = tmp_path / "store"
    root.mkdir()
    data = write_random(str(root / "model.safetensors"), 48 * MiB, seed=31)
    with Nginx(str(root), workdir=str(tmp_path / "nginx")) as ng:
        with FaultProxy(ng.port) as p:
            # Held: the model's reads only; a new daemon's start asks the store too.
            p.gate_match = r"^GET /model"
            yield p, data


OPTS = ["supervise=true", "block_size=1M", "readahead_max=0", "cache_dir="]


def test_kill9_with_reads_in_flight(tmp_path, http_store):
    """kill -9 while an mmap fault and a read() wait for the store: both get
    the right bytes from the next daemon, and nothing sees an error."""
    proxy, data = http_store
    with mcfs_mount(proxy.url, str(tmp_path / "mnt"), opts=OPTS) as m:
        old = daemon_of(m.proc)
        r = Reader(m.p("model.safetensors"))
        try:
            assert os.pread(r.fd, MiB, 0) == data[:MiB]  # open, mapped, read
            # nothing of the first daemon's in flight but what the test holds
            assert wait_for(lambda: m.stats()["inflight"] == 0, timeout=10)
            held = proxy.counts["held"]
            proxy.gate.clear()  # the next fetches wait at the proxy
            ts = [r.start("mmap", 8 * MiB, 2 * MiB), r.start("read", 20 * MiB, 3 * MiB)]
            assert wait_for(lambda: proxy.counts["held"] >= held + 2, timeout=10), \
                "the reads never reached the store: %r" % proxy.counts
            os.kill(old, signal.SIGKILL)
            new = next_daemon(m, m.proc, old, 1)
            proxy.gate.set()
            for t in ts:
                t.join(30)
            assert not any(t.is_alive() for t in ts), "a reader hangs after the restart"
            assert r.errors == []
            assert r.got[("mmap", 8 * MiB)] == sha(data[8 * MiB:10 * MiB])
            assert r.got[("read", 20 * MiB)] == data[20 * MiB:23 * MiB]
            # the rest of the file, through both, from the new daemon
            assert r.mapped(0, len(data)) == sha(data)
            assert os.pread(r.fd, len(data), 0) == data
            assert "2 open handles" in m.log(), m.log()
            assert daemon_of(m.proc) == new
        finally:
            r.close()
    assert not fuse_mounted(str(tmp_path / "mnt"))


def test_kill9_twice_and_new_opens(tmp_path):
    """Two crashes in a row, posix store: lookups, opens and listings made
    before, between and after keep working (inode numbers mean the same)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    a = write_random(str(src / "a.bin"), 24 * MiB, seed=1)
    b = write_random(str(src / "sub" / "b.bin"), 5 * MiB, seed=2)
    with mcfs_mount(str(src), str(tmp_path / "mnt"), opts=OPTS) as m:
        ino_a = os.stat(m.p("a.bin")).st_ino
        ino_sub = os.stat(m.p("sub")).st_ino
        r = Reader(m.p("a.bin"))
        d = os.open(m.p("sub"), os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert r.mapped(0, MiB) == sha(a[:MiB])
            for i in (1, 2):
                old = daemon_of(m.proc)
                os.kill(old, signal.SIGKILL)
                next_daemon(m, m.proc, old, i)
                assert r.mapped(i * 4 * MiB, 2 * MiB) == sha(a[i * 4 * MiB:(i * 4 + 2) * MiB])
                assert os.stat(m.p("a.bin")).st_ino == ino_a
                assert os.stat(m.p("sub")).st_ino == ino_sub
                assert sorted(os.listdir(m.p("sub"))) == ["b.bin"]
                assert os.listdir(d) == ["b.bin"]  # the directory opened before
                with open(m.p("sub", "b.bin"), "rb") as f:
                    assert f.read() == b
            assert sorted(os.listdir(m.p(""))) == ["a.bin", "sub"]
            assert os.pread(r.fd, len(a), 0) == a
        finally:
            os.close(d)
            r.close()


def test_upgrade_to_a_new_binary(tmp_path, http_store):
    """SIGUSR2 to the supervisor: the daemon hands the mount over and the
    binary at the path it was started from, replaced meanwhile (as a package
    upgrade does), takes it, while a read waits at the store."""
    proxy, data = http_store
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "mcfs"
    shutil.copy2(MCFS, exe)
    with mcfs_mount(proxy.url, str(tmp_path / "mnt"), opts=OPTS,
                    binary=str(exe)) as m:
        old = daemon_of(m.proc)
        r = Reader(m.p("model.safetensors"))
        try:
            assert os.pread(r.fd, MiB, 0) == data[:MiB]
            assert wait_for(lambda: m.stats()["inflight"] == 0, timeout=10)
            shutil.copy2(MCFS, str(exe) + ".new")
            os.replace(str(exe) + ".new", exe)  # a new inode at the same path
            new_ino = os.stat(exe).st_ino
            held = proxy.counts["held"]
            proxy.gate.clear()
            t = r.start("read", 30 * MiB, 2 * MiB)
            assert wait_for(lambda: proxy.counts["held"] >= held + 1, timeout=10)
            m.proc.send_signal(signal.SIGUSR2)
            new = next_daemon(m, m.proc, old, 1)
            proxy.gate.set()
            t.join(30)
            assert not t.is_alive() and r.errors == []
            assert r.got[("read", 30 * MiB)] == data[30 * MiB:32 * MiB]
            assert os.stat("/proc/%d/exe" % new).st_ino == new_ino, "not the new binary"
            assert "handing the mount over" in m.log() and "handed " in m.log(), m.log()
            assert r.mapped(0, len(data)) == sha(data)
            assert r.errors == []
        finally:
            r.close()


def test_sigusr2_without_a_holder_keeps_serving(tmp_path):
    """No supervisor, no systemd: SIGUSR2 is refused with a reason; the mount stays."""
    src = tmp_path / "src"
    src.mkdir()
    a = write_random(str(src / "a.bin"), MiB, seed=3)
    with mcfs_mount(str(src), str(tmp_path / "mnt")) as m:
        m.proc.send_signal(signal.SIGUSR2)
        assert wait_for(lambda: "not handing over" in m.log(), timeout=10), m.log()
        assert m.proc.poll() is None
        assert open(m.p("a.bin"), "rb").read() == a


def test_dead_mount_is_recovered_lazily(tmp_path):
    """A daemon killed with nothing holding its connection leaves a dead
    mount (ENOTCONN) whose reader still holds a file: a new mount on the same
    path unmounts it lazily, says so, and serves."""
    src = tmp_path / "src"
    src.mkdir()
    a = write_random(str(src / "a.bin"), 2 * MiB, seed=4)
    mnt = str(tmp_path / "mnt")
    with mcfs_mount(str(src), mnt) as m:
        f = open(m.p("a.bin"), "rb")
        m.proc.kill()
        m.proc.wait()
        with pytest.raises(OSError) as ei:
            os.listdir(mnt)  # an open reaches the connection (a stat may not)
        assert ei.value.errno == errno.ENOTCONN
        with mcfs_mount(str(src), mnt) as m2:
            assert "dead mount" in m2.log() and "lazily" in m2.log(), m2.log()
            assert open(m2.p("a.bin"), "rb").read() == a
        f.close()


def test_stop_with_open_files_exits_cleanly(tmp_path):
    """SIGTERM while a reader holds a file: the daemon unmounts (lazily: the
    reader's next read fails, the mount point is free) and exits 0, so a
    unit's stop ends inactive, not failed."""
    src = tmp_path / "src"
    src.mkdir()
    write_random(str(src / "a.bin"), MiB, seed=5)
    mnt = str(tmp_path / "mnt")
    for opts in ([], ["supervise=true"]):
        with mcfs_mount(str(src), mnt, opts=opts) as m:
            f = open(m.p("a.bin"), "rb")
            m.proc.send_signal(signal.SIGTERM)
            assert m.proc.wait(timeout=20) == 0, m.log()
            assert not fuse_mounted(mnt)
            f.close()


class FakeSystemd:
    """The service manager's side of sd_notify's FDSTORE: a datagram socket
    at NOTIFY_SOCKET that keeps the descriptors stored by name."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.store = {}
        self.messages = []

    def pump(self):
        while True:
            try:
                msg, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
            except (socket.timeout, BlockingIOError):
                return
            fields = dict(l.split("=", 1) for l in msg.decode().splitlines() if "=" in l)
            self.messages.append(fields)
            fds = array.array("i")
            for level, kind, body in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(body[:len(body) - len(body) % fds.itemsize])
            name = fields.get("FDNAME", "stored")
            if fields.get("FDSTOREREMOVE") == "1" and name in self.store:
                os.close(self.store.pop(name))
            if fields.get("FDSTORE") == "1":
                for fd in fds:
                    if name in self.store:
                        os.close(self.store[name])
                    self.store[name] = fd

    def close(self):
        for fd in self.store.values():
            os.close(fd)
        self.sock.close()


def test_systemd_descriptor_store(tmp_path):
    """The daemon stores its descriptors with the service manager; a new
    daemon started with them (LISTEN_FDS, LISTEN_FDNAMES, as systemd restarts
    a unit from its store) resumes, and the reader reads on."""
    src = tmp_path / "src"
    src.mkdir()
    a = write_random(str(src / "a.bin"), 16 * MiB, seed=6)
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    sd = FakeSystemd(str(tmp_path / "notify"))
    procs = []
    log = open(tmp_path / "log", "w+")
    try:
        cmd = [MCFS, "mount", str(src), mnt, "-f", "-o", "cache_dir=,block_size=1M"]
        env = dict(os.environ, NOTIFY_SOCKET=sd.path)
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log))
        assert wait_for(lambda: (sd.pump(), "mcfs-state" in sd.store)[1], timeout=20), \
            (sd.messages, open(log.name).read())
        assert wait_for(lambda: fuse_mounted(mnt), timeout=10)
        r = Reader(os.path.join(mnt, "a.bin"))
        try:
            assert r.mapped(0, MiB) == sha(a[:MiB])
            procs[0].kill()
            procs[0].wait()
            fuse_fd, state_fd = sd.store["mcfs-fuse"], sd.store["mcfs-state"]

            def place():
                os.dup2(fuse_fd, 3)
                os.dup2(state_fd, 4)
            shell = ('LISTEN_PID=$$ LISTEN_FDS=2 LISTEN_FDNAMES=mcfs-fuse:mcfs-state '
                     'exec "$@"')
            procs.append(subprocess.Popen(["sh", "-c", shell, "sh"] + cmd, env=env,
                                          stdout=log, stderr=log, preexec_fn=place,
                                          pass_fds=(3, 4)))
            assert wait_for(lambda: "resuming " in open(log.name).read(), timeout=20), \
                open(log.name).read()
            assert r.mapped(0, len(a)) == sha(a)
            assert os.pread(r.fd, len(a), 0) == a
            assert r.errors == []
        finally:
            r.close()
    finally:
        force_unmount(mnt)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        sd.close()
        log.close()
