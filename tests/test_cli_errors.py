"""Bad input to the CLI: a non-zero exit, a message that says what is wrong, no mount.

Missing or non-directory source, missing or non-directory mount point, a
mount point that is already mounted, unknown and bad options, a missing
config file, unknown flags, no arguments, `umount` of something not
mounted. Each runs with -f and without (daemon mode must report the error
before it returns, not in syslog afterwards).
"""
import os
import re
import subprocess

import pytest

from conftest import MCFS, cleanup_daemon, daemon_pids, fuse_mounted, mcfs_mount, run_mcfs


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
    ("block_size=3M", ["block_size", "'3M'", "power of two"]),
    ("block_size=128M", ["block_size", "128M", "power of two"]),
    ("block_size=lots", ["block_size", "lots", "power of two"]),
    ("ram_cache=1M", ["ram_cache", "'1M'", "4 blocks", "32M"]),
    ("connections=0", ["connections", "0", "1 to 256"]),
    ("attr_ttl=-1", ["attr_ttl", "-1", "seconds"]),
    ("odirect=maybe", ["odirect", "maybe", "true or false"]),
    ("log_level=loud", ["log_level", "loud", "debug"]),
    ("max_threads=0", ["max_threads", "0", "1 to 1024"]),
])
def test_bad_options(tmp, fg, opt, mentions):
    msg = fails(["mount", str(tmp / "src"), str(tmp / "mnt"), "-o", opt] + fg, *mentions)
    # echoed as typed, derived sizes in the same units: never a byte count (issue 16)
    for raw in ("3145728", "1048576", "33554432", " bytes"):
        assert raw not in msg, msg
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
    fails(["frobnicate"], "unknown command 'frobnicate'")
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


# ---- the first hour at the CLI (issue 16, item 8) ------------------------------

def test_mistyped_command_says_unknown_command(tmp):
    """A typo is "unknown command", with a guess; never an error about a directory."""
    mnt = str(tmp / "mnt")
    msg = fails(["stauts", mnt], "unknown command 'stauts'", "did you mean 'status'")
    assert "source directory" not in msg and "No such file" not in msg, msg
    msg = fails(["moutn", str(tmp / "src"), mnt], "unknown command 'moutn'",
                "did you mean 'mount'")
    assert "SOURCE and MOUNTPOINT" not in msg, msg
    assert not fuse_mounted(mnt)
    msg = fails(["frobnicate"], "unknown command 'frobnicate'")
    assert "did you mean" not in msg, msg
    fails(["help", "evcit"], "unknown command 'evcit'", "did you mean 'evict'")
    fails(["-x"], "unknown option '-x'")


def test_mount_without_the_word_mount_still_mounts(tmp):
    """mount(8)'s form `mcfs SOURCE MOUNTPOINT -o ...`: an absolute source, a URL, and a
    relative directory that exists (it has no '/', but is there)."""
    data = os.urandom(70000)
    (tmp / "src" / "f").write_bytes(data)
    mnt = str(tmp / "mnt")
    for source, cwd in ((str(tmp / "src"), None), ("file://" + str(tmp / "src"), None),
                        ("src", str(tmp))):
        try:
            r = subprocess.run([os.path.abspath(MCFS), source, mnt, "-o", "ro,cache_dir="],
                               capture_output=True, text=True, timeout=30, cwd=cwd)
            assert r.returncode == 0, (source, r.stderr)
            assert fuse_mounted(mnt), source
            with open(os.path.join(mnt, "f"), "rb") as f:
                assert f.read() == data, source
        finally:
            cleanup_daemon(mnt)


COMMANDS = ["mount", "umount", "unmount", "prefetch", "status", "evict", "refresh", "manifest",
            "help-config", "version", "help"]


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(cmd, flag):
    r = run_mcfs(cmd, flag, timeout=10)
    assert r.returncode == 0, (cmd, flag, r.stdout + r.stderr)
    name = "umount" if cmd == "unmount" else cmd
    out = r.stdout
    if cmd != "help":
        assert out.startswith("usage: mcfs %s" % name), out
    else:
        assert "usage: mcfs COMMAND" in out, out
    assert r.stderr == "", r.stderr


def test_help_after_other_arguments():
    r = run_mcfs("prefetch", "-q", "--help", timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("usage: mcfs prefetch"), r.stdout + r.stderr
    r = run_mcfs("umount", "-l", "-h", timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("usage: mcfs umount"), r.stdout + r.stderr


def test_help_config_shows_defaults():
    r = run_mcfs("help-config")
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^  (\w+)\s+(\S+)\s+(.*)$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    want = {"block_size": "8M", "ram_cache": "2G", "readahead_max": "512M",
            "connections": "16", "attr_ttl": "3600", "negative_ttl": "10", "odirect": "true",
            "splice": "false", "keep_cache": "true", "max_threads": "16",
            "log_level": "info", "cache_dir": "/var/cache/mcfs", "disk_cache": "50%",
            "timeout": "30", "retries": "5"}
    for key, default in want.items():
        assert rows.get(key) == default, (key, rows.get(key), r.stdout)
    assert "binary" in r.stdout and "1M = 1 MiB" in r.stdout


def error_lines(msg):
    return [l for l in msg.splitlines() if l and not l.startswith("usage:")]


def test_one_error_prefix(tmp):
    """Every error line reads "mcfs: error: ...", whoever prints it."""
    src, mnt = str(tmp / "src"), str(tmp / "mnt")
    cases = [
        ["frobnicate"],
        ["mount", src],
        ["mount", src, mnt, "--frobnicate", "-f"],
        ["mount", src, mnt, "-o", "bogus=1", "-f"],
        ["mount", src, mnt, "-o", "block_size=3M", "-f"],
        ["mount", src, mnt, "-c", str(tmp / "nope.conf"), "-f"],
        ["mount", src, str(tmp / "no-such-dir"), "-f"],
        ["mount", str(tmp / "no-such-store"), mnt, "-f"],
        ["mount", "ftp://example.invalid/x", mnt, "-f"],
        ["umount", mnt],
        ["umount"],
        ["prefetch"],
        ["prefetch", "-x", src],
        ["prefetch", str(tmp / "missing")],
        ["status"],
        ["status", src],
        ["evict"],
        ["evict", str(tmp / "missing")],
        ["refresh"],
        ["refresh", str(tmp / "missing")],
    ]
    for args in cases:
        msg = fails(args)
        lines = error_lines(msg)
        assert lines, (args, msg)
        for line in lines:
            if "-f" in args:  # a foreground daemon, once it runs, stamps its lines
                line = re.sub(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", "", line)
            assert line.startswith("mcfs: error: "), (args, msg)
    assert not fuse_mounted(mnt)


def test_prefetch_reports_binary_units(tmp):
    """One unit system: "6.0 MiB ... (N MiB/s)", never MB/s beside MiB."""
    (tmp / "src" / "six").write_bytes(os.urandom(6 << 20))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=1M"]) as m:
        r = run_mcfs("prefetch", m.p("six"), timeout=60)
        assert r.returncode == 0, r.stderr
        assert re.search(r"6\.0 MiB in [0-9.]+ s \([0-9.]+ [KMG]?i?B/s\)", r.stdout), r.stdout
        assert "MB/s" not in r.stdout and "GB/s" not in r.stdout, r.stdout


def test_http_base_404_says_http_404(tmp):
    """A base URL the server does not have: the mount error carries the HTTP status."""
    servers = pytest.importorskip("servers")
    if not servers.have_nginx():
        pytest.skip("nginx not installed (deploy/install-deps.sh test installs nginx-light)")
    mnt = str(tmp / "mnt")
    with servers.Nginx(str(tmp / "src"), workdir=str(tmp / "nginx")) as ng:
        url = ng.url + "/no-such-base"
        for fg in (["-f"], []):
            msg = fails(["mount", url, mnt, "-o", "cache_dir=,retries=0"] + fg, "HTTP 404",
                        url, timeout=30)
            assert "HTTP 404" in msg, msg
    assert not fuse_mounted(mnt)
