"""The module table is enforced by the build (issue 12).

Each CMake target carries its own include directories, PUBLIC for what other
modules may use and PRIVATE for the rest. This test compiles a one-line probe
with exactly the include flags the build gives each module's sources (read
from CMake's flags.make) and checks that a module's allowed headers compile
and its forbidden ones do not: fs/ and gpu/ reach cache/ only through cache.h,
nobody outside cache/ reaches cache/remote or LMDB, fs/ sees gpu.h but not
gpu/'s internals, gpu/ knows nothing of fs/ or the ioctl wire structs, and the
client library sees the ABI header but none of the daemon.
"""
import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")

# target (its flags.make) -> (headers it may include, headers it must not reach)
RULES = {
    "fs/CMakeFiles/mcfs.dir": (
        ["cache.h", "cfg.h", "mcfs.h", "gpu.h", "mcfs/mcfs_ioctl.h"],
        ["remote.h", "remote_int.h", "fetch_int.h", "net_int.h", "manifest.h", "meta.h",
         "disk.h", "cache_int.h", "gpu_int.h", "safetensors.h"],
    ),
    "gpu/CMakeFiles/mcfs_gpu.dir": (
        ["cache.h", "cfg.h", "mcfs.h", "safetensors.h"],
        ["remote.h", "meta.h", "cache_int.h", "fs_int.h", "inode.h", "mcfs/mcfs_ioctl.h"],
    ),
    "gpu/CMakeFiles/mcfs_client.dir": (
        ["mcfs/mcfs_ioctl.h", "mcfs_client.h", "safetensors.h"],
        ["cache.h", "gpu.h", "cfg.h", "fs_int.h"],
    ),
    "config/CMakeFiles/mcfs_config.dir": (
        ["cfg.h", "mcfs.h"],
        ["cache.h", "gpu.h", "remote.h"],
    ),
}


def flags_of(target_dir):
    path = os.path.join(BUILD, target_dir, "flags.make")
    if not os.path.exists(path):
        pytest.skip("%s is missing: build first (cmake --build build)" % path)
    inc, defs = "", ""
    with open(path) as f:
        for line in f:
            if line.startswith("C_INCLUDES = "):
                inc = line.split("=", 1)[1]
            elif line.startswith("C_DEFINES = "):
                defs = line.split("=", 1)[1]
    return shlex.split(defs) + shlex.split(inc)


def compiles(tmp_path, flags, header):
    probe = tmp_path / "probe.c"
    probe.write_text('#define _GNU_SOURCE\n#include "%s"\nint probe_unused;\n' % header)
    r = subprocess.run(["cc", "-std=c11", "-fsyntax-only", *flags, str(probe)],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stderr


@pytest.mark.parametrize("target", sorted(RULES))
def test_module_sees_only_what_the_table_allows(tmp_path, target):
    flags = flags_of(target)
    allowed, forbidden = RULES[target]
    for h in allowed:
        ok, err = compiles(tmp_path, flags, h)
        assert ok, "%s should reach %s:\n%s" % (target, h, err)
    for h in forbidden:
        ok, _ = compiles(tmp_path, flags, h)
        assert not ok, "%s reaches %s, which the module table forbids" % (target, h)
