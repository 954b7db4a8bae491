"""The GPU fast path is compiled in, against a CUDA 12 runtime (issue 13).

`mcfs --version` says whether the GPU path is built and with which runtime.
A build configured with the GPU path on (the default, and tests/run.sh's main
build) must have it: deploy/install-deps.sh fetches the CUDA 12 runtime, so
a missing one is a failure here, not a quiet build without the fast path. The
sanitizer builds are configured with MCFS_CUDA=OFF and say so.

A CUDA 12 runtime because its static cudart runs on drivers from 525 on (CUDA
13's needs 580); the headers must all come from that one runtime, never from
a CUDA 13 toolkit elsewhere on the machine (/usr/local/include,
/usr/local/cuda), which the compiler's depfiles show.
"""
import glob
import os
import re
import subprocess

import pytest

from conftest import MCFS


def build_dir():
    return os.path.dirname(os.path.dirname(os.path.abspath(MCFS)))


def cache_var(name):
    path = os.path.join(build_dir(), "CMakeCache.txt")
    if not os.path.exists(path):
        pytest.skip("no CMakeCache.txt beside %s: not a CMake build tree" % MCFS)
    with open(path) as f:
        for line in f:
            m = re.match(r"%s:[A-Z]+=(.*)$" % re.escape(name), line.rstrip("\n"))
            if m:
                return m.group(1)
    return None


def version():
    if not os.path.exists(MCFS):
        pytest.skip("mcfs not built at %s" % MCFS)
    out = subprocess.run([MCFS, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[0]  # the second line is libfuse's


def test_version_names_the_gpu_runtime():
    v = version()
    assert v.startswith("mcfs "), v
    if cache_var("MCFS_CUDA") in ("OFF", "FALSE", "0", "NO"):
        assert v.endswith("(GPU fast path: not built: configured with MCFS_CUDA=OFF)"), v
        return
    assert re.search(r"\(GPU fast path: CUDA runtime 12\.\d+, linked statically; needs NVIDIA "
                     r"driver 525 or newer\)$", v), \
        "the default build lacks the CUDA 12 GPU path (run deploy/install-deps.sh): " + v


def test_one_cuda_12_header_set():
    if cache_var("MCFS_CUDA") in ("OFF", "FALSE", "0", "NO"):
        pytest.skip("configured with MCFS_CUDA=OFF")
    deps = glob.glob(os.path.join(build_dir(), "gpu", "CMakeFiles", "mcfs_gpu.dir", "*.c.o.d"))
    if not deps:
        pytest.skip("no compiler depfiles under %s/gpu (another CMake generator)" % build_dir())
    used = set()
    for d in deps:
        with open(d) as f:
            used |= {p for p in f.read().split() if p.endswith(".h")}
    api = [p for p in used if p.endswith("/cuda_runtime_api.h")]
    assert len(api) == 1, api
    inc = os.path.dirname(api[0])
    with open(api[0]) as f:
        m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
    assert m and int(m.group(1)) // 1000 == 12, "%s is CUDA %s" % (inc, m and m.group(1))
    # every header from outside the system, the tree and the build comes from
    # that runtime (none from a CUDA 13 in /usr/local/include or /usr/local/cuda)
    here = (os.path.realpath(os.path.join(os.path.dirname(__file__), "..")) + "/",
            os.path.realpath(build_dir()) + "/", "/usr/include/", "/usr/lib/")
    foreign = sorted(p for p in used if not os.path.realpath(p).startswith(here)
                     and not p.startswith(here) and not p.startswith(inc + "/"))
    assert not foreign, "headers from outside %s: %s" % (inc, foreign)


def test_no_shared_cudart():
    """cudart is linked statically: the daemon starts where no CUDA is installed."""
    if not os.path.exists(MCFS):
        pytest.skip("mcfs not built at %s" % MCFS)
    out = subprocess.run(["ldd", MCFS], capture_output=True, text=True).stdout
    assert "libcudart" not in out and "libcuda.so" not in out, out
