"""Bad input to the CLI: a non-zero exit, a message that says what is wrong, no mount.

Missing or non-directory source, missing or non-directory mount point, a
mount point that is already mounted, unknown and bad options, a missing
config file, unknown flags, no arguments, `umount` of something not
mounted. Each runs with -f and without (daemon mode must report the error
before it returns, not in syslog afterwards).
"""
import os
import subprocess

import pytest

from conftest import cleanup_daemon, fuse_mounted, mcfs_mount, run_mcfs


def fails(args, *must_mention, timeout=20):
    try:
        r = run_mcfs(*args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("mcfs %s did not return in %ds" % (" ".join(args), timeout))
    msg = r.stdout + r.stderr
    assert r.returncode != 0, "mcfs %s exited 0:\n%s" % (" ".join(args), msg)
    for w in must_mention:
        alts = w if isinstance(w, tuple) else (w,)
        assert any(a.lower() in msg.lower() for a in alts), \
            "mcfs %s: message does not mention %r:\n%s" % (" ".join(args), w, msg)
    return msg


@pytest.fixture(autouse=True)
def no_mount_left(tmp):
    """Whatever a test expected, nothing it tried may stay mounted or running."""
    yield
    for name in ("mnt", "afile", "no-such-dir"):
        cleanup_daemon(str(tmp / name))


@pytest.fixture(params=["foreground", "daemon"])
def fg(request):
    return ["-f"] if request.param == "foreground" else []


def test_missing_source(tmp, fg):
    missing = str(tmp / "no-such-store")
    fails(["mount", missing, str(tmp / "mnt")] + fg, missing)
    fails(["mount", "file://" + missing, str(tmp / "mnt")] + fg, missing)
    assert not fuse_mounted(str(tmp / "mnt"))


def test_source_not_a_directory(tmp, fg):
    f = tmp / "src" / "file"
    f.write_bytes(b"x")
    fails(["mount", str(f), str(tmp / "mnt")] + fg, str(f), "directory")
    assert not fuse_mounted(str(tmp / "mnt"))


def test_unsupported_source_scheme(tmp, fg):
    fails(["mount", "ftp://example.invalid/x", str(tmp / "mnt")] + fg, "ftp://")


def test_missing_mountpoint(tmp, fg):
    missing = str(tmp / "no-such-dir")
    fails(["mount", str(tmp / "src"), missing] + fg, missing)
    assert not os.path.exists(missing), "mcfs created the missing mount point"


def test_mountpoint_not_a_directory(tmp, fg):
    f = tmp / "afile"
    f.write_bytes(b"x")
    fails(["mount", str(tmp / "src"), str(f)] + fg, str(f))
    assert not fuse_mounted(str(f))


def test_already_mounted(tmp, fg):
    (tmp / "src" / "a").write_bytes(b"first")
    other = tmp / "other"
    other.mkdir()
    mnt = str(tmp / "mnt")
    with mcfs_mount(str(tmp / "src"), mnt) as m:
        try:
            fails(["mount", str(other), mnt] + fg, mnt, "mounted", timeout=15)
        finally:
            # if a second mount was stacked on top, take it down, keep the first
            with open("/proc/mounts") as pm:
                n = sum(1 for l in pm if l.split()[1] == os.path.realpath(mnt))
            if n > 1:
                subprocess.run(["umount", "-l", mnt])
        assert open(m.p("a"), "rb").read() == b"first", "the first mount was disturbed"
    cleanup_daemon(mnt)


@pytest.mark.parametrize("opt,mentions", [
    ("bogus=1", ["bogus"]),
    ("blocksize=8M", ["blocksize"]),
    ("block_size=3M", ["block_size", ("3M", "3145728"), "power of two"]),
    ("block_size=128M", ["block_size", "128M", "power of two"]),
    ("block_size=lots", ["block_size", "lots", "power of two"]),
    ("ram_cache=1M", ["ram_cache", ("1M", "1.0 MiB", "1048576"), "4 blocks"]),
    ("connections=0", ["connections", "0", "1 to 256"]),
    ("attr_ttl=-1", ["attr_ttl", "-1", "seconds"]),
    ("odirect=maybe", ["odirect", "maybe", "true or false"]),
    ("log_level=loud", ["log_level", "loud", "debug"]),
    ("max_threads=0", ["max_threads", "0", "1 to 1024"]),
])
def test_bad_options(tmp, fg, opt, mentions):
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "-o", opt] + fg, *mentions)
    assert not fuse_mounted(str(tmp / "mnt"))


def test_missing_config_file(tmp, fg):
    conf = str(tmp / "nope.conf")
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "-c", conf] + fg, conf)
    assert not fuse_mounted(str(tmp / "mnt"))


def test_bad_command_lines(tmp):
    fails([], "usage")
    fails(["mount"], "usage")
    fails(["mount", str(tmp / "src")], "usage")
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "--frobnicate"], "frobnicate")
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "-o"])
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "extra-arg", "-f"])
    fails(["frobnicate"], "usage")
    fails(["umount"], "usage")
    assert not fuse_mounted(str(tmp / "mnt"))


def test_umount_not_mounted(tmp):
    fails(["umount", str(tmp / "mnt")], str(tmp / "mnt"), "not mounted")
    fails(["umount", str(tmp / "missing")], str(tmp / "missing"))


def test_help_config_lists_keys():
    r = run_mcfs("help-config")
    assert r.returncode == 0, r.stderr
    for key in ("block_size", "ram_cache", "attr_ttl", "negative_ttl", "connections",
                "odirect", "read_ahead_kb", "splice", "keep_cache", "max_threads", "log_level"):
        assert key in r.stdout, key
    assert "power of two" in r.stdout


def test_config_file_is_a_directory(tmp, fg):
    """-c DIR must not silently load nothing."""
    fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(tmp)] + fg, str(tmp),
          timeout=5)
    assert not fuse_mounted(str(tmp / "mnt"))
