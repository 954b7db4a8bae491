"""The module table is enforced by the build (issue 12).

Each CMake target carries its own include directories, PUBLIC for what other
modules may use and PRIVATE for the rest. This test compiles a one-line probe
with exactly the include flags the build gives each module's sources (read
from CMake's flags.make) and checks that a module's allowed headers compile
and its forbidden ones do not: fs/ and gpu/ reach cache/ only through cache.h
and its purpose headers (CACHE_PUBLIC), nobody outside cache/ reaches
cache/remote or LMDB, fs/ sees gpu.h but not gpu/'s internals, gpu/ knows nothing of fs/ or the ioctl wire structs, and the
client library sees the ABI header but none of the daemon.

Only headers of this tree count (issue 22, item 10): `make install` puts
mcfs/mcfs_ioctl.h in /usr/local/include, where any compile finds it, so a
probe that merely compiles would say gpu/ reaches it on every machine where
mcfs is installed. The probe asks the compiler where the header resolved
(-H): a forbidden header is reached only if it resolves into the tree, and an
allowed one must resolve to the tree's copy, not to an installed one.
"""
import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")

# cache/'s public headers: cache.h and one header per purpose (cache.h lists them)
CACHE_PUBLIC = ["cache.h", "cache_ram.h", "cache_metadata.h", "cache_disk.h", "cache_readahead.h",
                "cache_read.h", "cache_stats.h", "cache_attr.h", "counters.h"]

# target (its flags.make) -> (headers it may include, headers it must not reach)
RULES = {
    "fs/CMakeFiles/mcfs.dir": (
        CACHE_PUBLIC + ["cfg.h", "mcfs.h", "gpu.h", "mcfs/mcfs_ioctl.h"],
        ["remote.h", "remote_int.h", "fetch_int.h", "net_int.h", "manifest.h", "meta.h",
         "disk.h", "cache_int.h", "gpu_int.h", "safetensors.h"],
    ),
    "gpu/CMakeFiles/mcfs_gpu.dir": (
        CACHE_PUBLIC + ["cfg.h", "mcfs.h", "safetensors.h"],
        ["remote.h", "meta.h", "cache_int.h", "fs_int.h", "inode.h", "mcfs/mcfs_ioctl.h"],
    ),
    "gpu/CMakeFiles/mcfs_client.dir": (
        ["mcfs/mcfs_ioctl.h", "mcfs_client.h", "safetensors.h"],
        CACHE_PUBLIC + ["gpu.h", "cfg.h", "fs_int.h"],
    ),
    "config/CMakeFiles/mcfs_config.dir": (
        ["cfg.h", "mcfs.h"],
        CACHE_PUBLIC + ["gpu.h", "remote.h"],
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


def resolves(tmp_path, flags, header):
    """Compiles a probe that includes `header`: returns (the real path the
    include resolved to, or None if the probe does not compile; the
    compiler's messages)."""
    probe = tmp_path / "probe.c"
    probe.write_text('#define _GNU_SOURCE\n#include "%s"\nint probe_unused;\n' % header)
    # -H lists each header opened, one line each, its depth in dots: ". PATH"
    r = subprocess.run(["cc", "-std=c11", "-fsyntax-only", "-H", *flags, str(probe)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr
    first = [ln for ln in r.stderr.splitlines() if ln.startswith(". ")]
    assert first, "cc -H named no header for %s:\n%s" % (header, r.stderr)
    return os.path.realpath(first[0][2:].strip()), r.stderr


def in_tree(path):
    return path is not None and path.startswith(os.path.realpath(ROOT) + os.sep)


def check_rules(tmp_path, target, extra=()):
    flags = flags_of(target) + list(extra)
    allowed, forbidden = RULES[target]
    for h in allowed:
        path, err = resolves(tmp_path, flags, h)
        assert path, "%s should reach %s:\n%s" % (target, h, err)
        assert in_tree(path), "%s reaches %s as %s, not this tree's" % (target, h, path)
    for h in forbidden:
        path, _ = resolves(tmp_path, flags, h)
        assert not in_tree(path), "%s reaches %s (%s), which the module table forbids" % (
            target, h, path)


@pytest.mark.parametrize("target", sorted(RULES))
def test_module_sees_only_what_the_table_allows(tmp_path, target):
    check_rules(tmp_path, target)


@pytest.mark.parametrize("target", sorted(RULES))
def test_installed_headers_do_not_count(tmp_path, target):
    """As on a machine where mcfs is installed, and more: a system include
    directory (-isystem, searched where /usr/local/include is) holding a copy
    of every header the table names. The rules hold as they do without it."""
    system = tmp_path / "usr-local-include"
    for h in {h for allowed, forbidden in RULES.values() for h in allowed + forbidden}:
        (system / h).parent.mkdir(parents=True, exist_ok=True)
        (system / h).write_text("/* an installed copy of %s */\n" % h)
    # the copy is found where no -I of the tree names the header
    path, err = resolves(tmp_path, ["-isystem", str(system)], "mcfs/mcfs_ioctl.h")
    assert path and not in_tree(path), (path, err)
    check_rules(tmp_path, target, ["-isystem", str(system)])
