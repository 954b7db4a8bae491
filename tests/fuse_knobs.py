"""The kernel's FUSE knobs, and what the mcfs under test was built with (issue 14).

Root sets /proc/sys/fs/fuse/max_pages_limit (requests over 1 MiB) and
/sys/module/fuse/parameters/enable_uring (FUSE over io_uring); mcfs never
writes them. A test that needs another value sets it with `knob()`, which puts
the old value back afterwards, pass or fail.
"""
import contextlib
import re
import subprocess

import pytest

from conftest import MCFS

MAX_PAGES_LIMIT = "/proc/sys/fs/fuse/max_pages_limit"
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


def features():
    """What `mcfs --version` says of its libfuse, e.g.
    {"libfuse": "3.18.3", "built": "3.18", "requests over 1 MiB": True,
     "io_uring": True, "passthrough": True}."""
    out = subprocess.run([MCFS, "--version"], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"^libfuse (\S+) \(built with ([\d.]+)\): (.+)$", out, re.M)
    assert m, "no libfuse line in `mcfs --version`:\n" + out
    feats = {"libfuse": m.group(1), "built": m.group(2)}
    for part in m.group(3).split(", "):
        name, val = part.rsplit(" ", 1)
        assert val in ("yes", "no"), out
        feats[name] = val == "yes"
    return feats


def tsan_build():
    """True if the mcfs under test is built with ThreadSanitizer (MCFS_SANITIZE=thread)."""
    out = subprocess.run(["ldd", MCFS], capture_output=True, text=True).stdout
    return "libtsan" in out


def read_knob(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


@contextlib.contextmanager
def knob(path, value):
    """Sets a kernel knob to `value` for the block, then restores it.

    Skips, saying why, where the knob does not exist (an older kernel) or the
    kernel refuses the value.
    """
    old = read_knob(path)
    if old is None:
        pytest.skip("%s does not exist: the kernel predates the feature" % path)
    try:
        with open(path, "w") as f:
            f.write(value + "\n")
    except OSError as e:
        pytest.skip("the kernel refuses %s = %s: %s" % (path, value, e))
    try:
        yield old
    finally:
        with open(path, "w") as f:
            f.write(old + "\n")
