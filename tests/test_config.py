"""Configuration reaches the daemon: -o, -c FILE (top level or [mcfs]), -o over the file.

The block size is observed, not trusted: one 1-byte O_DIRECT read of a
cold file (readahead off) fetches exactly one block, so store_bytes and the
file's user.mcfs.cached say which block size is in force. read_ahead_kb is
seen on the mount's backing device in sysfs. A bad config file names
file:line, key and value.
"""
import os
import subprocess

from conftest import MCFS, cleanup_daemon, fuse_mounted, mcfs_mount, run_mcfs, wait_for
from gen import MiB, cached_bytes, pread_direct, write_random


def block_size_in_force(m, name):
    s0 = m.stats()
    assert pread_direct(m.p(name), 0, 1) != b""
    s1 = m.stats()
    fetched = s1["store_bytes"] - s0["store_bytes"]
    assert cached_bytes(m.p(name)) == fetched, (cached_bytes(m.p(name)), fetched)
    return fetched


def test_option_sets_block_size(tmp):
    write_random(str(tmp / "src" / "f"), 10 * MiB, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=2M", "readahead_max=0"]) as m:
        assert block_size_in_force(m, "f") == 2 * MiB


def test_default_block_size_is_8m(tmp):
    write_random(str(tmp / "src" / "f"), 20 * MiB, seed=1)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["readahead_max=0"]) as m:
        assert block_size_in_force(m, "f") == 8 * MiB


def test_config_file_and_override(tmp):
    write_random(str(tmp / "src" / "f"), 10 * MiB, seed=1)
    top = tmp / "top.conf"
    top.write_text("# top-level keys\nblock_size = 4M\nreadahead_max = 0\n")
    sect = tmp / "sect.conf"
    sect.write_text("; in a section\n[mcfs]\nblock_size = 1M\nreadahead_max = 0\n"
                    "ram_cache = 16M\n")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), extra_args=["-c", str(top)]) as m:
        assert block_size_in_force(m, "f") == 4 * MiB
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), extra_args=["-c", str(sect)]) as m:
        assert block_size_in_force(m, "f") == 1 * MiB
    # -o wins over the file, whatever the order on the command line
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["block_size=2M"],
                    extra_args=["-c", str(sect)]) as m:
        assert block_size_in_force(m, "f") == 2 * MiB
    file_first = ["-c", str(top), "-o", "block_size=1M"]
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), extra_args=file_first) as m:
        assert block_size_in_force(m, "f") == 1 * MiB


def test_bad_config_file(tmp):
    try:
        _bad_config_file(tmp)
    finally:
        cleanup_daemon(str(tmp / "mnt"))


def _bad_config_file(tmp):
    conf = tmp / "bad.conf"
    conf.write_text("[mcfs]\nblock_size = 1M\nconnections = many\n")
    r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(conf), "-f",
                 timeout=10)
    msg = r.stdout + r.stderr
    assert r.returncode != 0
    assert "%s:3" % conf in msg and "connections" in msg and "many" in msg, msg
    conf.write_text("block_size = 1M\n[other]\nx = 1\n")
    r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(conf), "-f",
                 timeout=20)
    assert r.returncode != 0 and "[other]" in r.stderr + r.stdout, r.stderr
    conf.write_text("block_size = 1M\nno equals here\n")
    r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(conf), "-f",
                 timeout=20)
    assert r.returncode != 0 and "%s:2" % conf in r.stderr + r.stdout, r.stderr
    # a bad -o is reported even when the file is fine, and vice versa
    conf.write_text("block_size = 1M\n")
    r = run_mcfs("mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(conf), "-o",
                 "block_size=5M", "-f", timeout=20)
    assert r.returncode != 0 and "block_size" in r.stderr + r.stdout
    assert not fuse_mounted(str(tmp / "mnt"))


def bdi_read_ahead_kb(path):
    dev = os.stat(path).st_dev
    p = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(dev), os.minor(dev))
    with open(p) as f:
        return int(f.read())


def test_read_ahead_kb(tmp):
    # in the foreground the daemon sets it just after the mount appears: allow 5 s
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["read_ahead_kb=1024"]) as m:
        assert wait_for(lambda: bdi_read_ahead_kb(m.path) == 1024, timeout=5), \
            bdi_read_ahead_kb(m.path)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["read_ahead_kb=4096"]) as m:
        assert wait_for(lambda: bdi_read_ahead_kb(m.path) == 4096, timeout=5), \
            bdi_read_ahead_kb(m.path)


def test_read_ahead_kb_set_before_daemon_mode_returns(tmp):
    """`mcfs mount` (daemon mode) returns once the mount is ready, tuning included."""
    mnt = str(tmp / "mnt")
    try:
        r = run_mcfs("mount", str(tmp / "src"), mnt, "-o", "read_ahead_kb=2048,cache_dir=",
                     timeout=20)
        assert r.returncode == 0, r.stderr
        assert bdi_read_ahead_kb(mnt) == 2048
    finally:
        cleanup_daemon(mnt)


def test_mount_options_are_ignored(tmp):
    (tmp / "src" / "f").write_bytes(b"hello")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ro", "nodev", "nosuid", "noatime", "_netdev", "block_size=1M"]) as m:
        assert open(m.p("f"), "rb").read() == b"hello"


# ---- what a config file holds is quoted safely (issue 16, item 8) -------------

def mount_with_conf(tmp, text):
    """Mounts with -c holding `text` (bytes); returns (exit status, stderr bytes)."""
    conf = tmp / "bin.conf"
    conf.write_bytes(text)
    try:
        r = subprocess.run([MCFS, "mount", str(tmp / "src"), str(tmp / "mnt"), "-c", str(conf),
                            "-f"], capture_output=True, timeout=20)
    finally:
        cleanup_daemon(str(tmp / "mnt"))
    return r.returncode, r.stderr


def test_binary_config_file_is_escaped(tmp):
    """Garbage in a config file reaches the terminal escaped: no control byte, no
    invalid UTF-8, and the bytes still readable as \\xNN."""
    garbage = b"block_size = 1M\n\x01\x02\xff\x1b[2J\x1b]0;title\x07 = \x1b[31mred\n"
    rc, err = mount_with_conf(tmp, garbage)
    assert rc != 0
    text = err.decode("utf-8")  # raises if a raw invalid byte got through
    assert not any(ord(c) < 0x20 and c != "\n" for c in text), repr(err)
    assert "\\x01\\x02\\xff\\x1b[2J" in text, text
    assert text.startswith("mcfs: error: ") and "bin.conf:2:" in text, text
    assert not fuse_mounted(str(tmp / "mnt"))


def test_nul_in_config_value_is_refused(tmp):
    """libinih would end the value at the NUL and drop the rest: refused, naming the key."""
    rc, err = mount_with_conf(tmp, b"[mcfs]\nconnections = 4\nblock_size = 1M\0 oops\n")
    text = err.decode("utf-8")
    assert rc != 0, text
    assert "bin.conf:3:" in text and "block_size" in text and "NUL" in text, text
    assert not fuse_mounted(str(tmp / "mnt"))
    # a whole binary file: refused, not half read
    rc, err = mount_with_conf(tmp, bytes(range(256)) * 4)
    assert rc != 0 and b"NUL" in err, err
    assert not fuse_mounted(str(tmp / "mnt"))
