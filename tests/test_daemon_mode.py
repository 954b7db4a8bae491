"""Without -f, `mcfs mount` daemonises: it returns 0 only once the mount is up,
lets go of the caller's stdout/stderr, and `mcfs umount` takes the mount
down and ends the daemon.
"""
import os
import subprocess

from conftest import MCFS, cleanup_daemon, daemon_pids, fuse_mounted, run_mcfs, wait_for
from gen import MiB, write_random


def test_daemon_mount_and_umount(tmp):
    data = write_random(str(tmp / "src" / "f.bin"), 3 * MiB + 1, seed=1)
    mnt = str(tmp / "mnt")
    try:
        # capture_output: if the daemon kept the pipes open, this would not return
        r = run_mcfs("mount", str(tmp / "src"), mnt, "-o", "block_size=1M,cache_dir=",
                     timeout=20)
        assert r.returncode == 0, r.stdout + r.stderr
        assert fuse_mounted(mnt), "mcfs returned 0 before the mount was up"
        pids = daemon_pids(mnt)
        assert len(pids) == 1, "daemon processes serving the mount: %s" % pids
        assert os.getppid() != pids[0]
        assert open(os.path.join(mnt, "f.bin"), "rb").read() == data
        assert "store_reads" in os.getxattr(mnt, "user.mcfs.stats").decode()

        r = run_mcfs("umount", mnt, timeout=20)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not fuse_mounted(mnt)
        assert wait_for(lambda: not daemon_pids(mnt), timeout=10), \
            "daemon still running after umount: %s" % daemon_pids(mnt)
    finally:
        cleanup_daemon(mnt)


def test_daemon_is_detached(tmp):
    """The daemon is its own session leader, in / , not holding the caller's terminal."""
    mnt = str(tmp / "mnt")
    try:
        r = run_mcfs("mount", "file://" + str(tmp / "src"), mnt, "-o", "cache_dir=", timeout=20)
        assert r.returncode == 0, r.stderr
        pids = daemon_pids(mnt)
        assert len(pids) == 1, pids
        pid = pids[0]
        assert os.getsid(pid) == pid, "the daemon did not start a new session"
        assert os.readlink("/proc/%d/cwd" % pid) == "/", "the daemon's cwd pins a directory"
        for fd in ("0", "1", "2"):
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            assert target == "/dev/null", "fd %s of the daemon is %s" % (fd, target)
    finally:
        cleanup_daemon(mnt)


def test_umount_busy_then_lazy(tmp):
    """A file is open: `mcfs umount` refuses and says why; `mcfs umount -l`
    detaches the mount and returns at once, like umount -l; the daemon ends
    when the file is closed."""
    (tmp / "src" / "f").write_bytes(b"open me")
    mnt = str(tmp / "mnt")
    try:
        r = run_mcfs("mount", str(tmp / "src"), mnt, "-o", "cache_dir=", timeout=20)
        assert r.returncode == 0, r.stderr
        f = open(os.path.join(mnt, "f"), "rb")
        try:
            r = run_mcfs("umount", mnt, timeout=20)
            if r.returncode != 0:
                assert "busy" in (r.stderr + r.stdout).lower(), r.stderr
                assert fuse_mounted(mnt)
                try:
                    r = run_mcfs("umount", "-l", mnt, timeout=10)
                except subprocess.TimeoutExpired:
                    raise AssertionError("`mcfs umount -l` blocks while a file is open "
                                         "(mounted: %s)" % fuse_mounted(mnt))
                assert r.returncode == 0, r.stderr
            assert not fuse_mounted(mnt)
            assert f.read() in (b"open me", b"")  # the open file does not hang
        except OSError:
            pass  # ENOTCONN from the detached file is fine too
        finally:
            f.close()
        assert wait_for(lambda: not daemon_pids(mnt), timeout=10), daemon_pids(mnt)
    finally:
        cleanup_daemon(mnt)


def test_relative_paths_with_spaces(tmp):
    """Relative SOURCE and MOUNTPOINT (with spaces) are resolved before the
    daemon changes directory; `mcfs umount` finds the mount by that name."""
    src, mnt = tmp / "my store", tmp / "my mount"
    src.mkdir()
    mnt.mkdir()
    (src / "f").write_bytes(b"relative")
    try:
        r = subprocess.run([MCFS, "mount", "my store", "my mount", "-o", "cache_dir="],
                           cwd=str(tmp), capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert fuse_mounted(str(mnt))
        assert (mnt / "f").read_bytes() == b"relative"
        r = subprocess.run([MCFS, "umount", "my mount"], cwd=str(tmp),
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert not fuse_mounted(str(mnt))
        assert wait_for(lambda: not daemon_pids(str(mnt)), timeout=10)
    finally:
        cleanup_daemon(str(mnt))
