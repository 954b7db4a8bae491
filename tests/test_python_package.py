"""The Python package installs with pip and speaks one ioctl ABI (issue 13).

- gpu/python builds into a wheel offline (setuptools, no network: pip's
  --no-build-isolation), which installs into a fresh venv: the package, its
  version (the daemon's MCFS_VERSION), and mcfs_switch.pth;
- the .pth turns the safetensors switch on only when MCFS_SAFETENSORS is set,
  and imports nothing otherwise;
- a daemon that speaks another ioctl ABI is refused with McfsError(EPROTO)
  naming both versions (the package is made to speak the daemon's ABI + 1).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, mcfs_mount, need_root
from test_gpu_fallback import STUBS

PKG = os.path.join(ROOT, "gpu", "python")
with open(os.path.join(ROOT, "include", "mcfs", "mcfs_ioctl.h")) as _f:
    HEADER_ABI = int(re.search(r"#define MCFS_IOCTL_ABI (\d+)", _f.read()).group(1))


def daemon_version():
    with open(os.path.join(ROOT, "common", "mcfs.h")) as f:
        return re.search(r'#define MCFS_VERSION "([^"]+)"', f.read()).group(1)


def builder():
    """A Python that builds the wheel offline: setuptools >= 61 and wheel."""
    code = ("import setuptools, wheel, sys; "
            "sys.exit(int(setuptools.__version__.split('.')[0]) < 61)")
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", code],
                                                 capture_output=True).returncode == 0:
            return py
    pytest.skip("no Python here has setuptools>=61 and wheel to build offline (Debian: "
                "python3-setuptools python3-wheel, which python3-pip brings)")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv of this Python (its site-packages visible) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"
    shutil.copytree(PKG, str(src), ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                  "*.egg-info"))
    r = subprocess.run([builder(), "-m", "pip", "wheel", "--no-index", "--no-build-isolation",
                        "--no-deps", "-q", "-w", str(tmp / "whl"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = glob.glob(str(tmp / "whl" / "*.whl"))
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env)],
                   check=True, timeout=300)
    py = str(env / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "-q", whl],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return py, whl


def run_in(py, code, env=None, cwd="/"):
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MCFS_SAFETENSORS")}
    e.update(env or {})
    return subprocess.run([py, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=120)


def test_wheel_contents_and_version(venv):
    py, whl = venv
    v = daemon_version()
    assert os.path.basename(whl).startswith("mcfs-%s-py3-none-any" % v), whl
    out = run_in(py, """
        import mcfs, os, sys, sysconfig
        print(mcfs.__version__)
        print(os.path.dirname(os.path.dirname(mcfs.__file__)) == sysconfig.get_paths()["purelib"])
        print(os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "mcfs_switch.pth")))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [v, "True", "True"], out.stdout


def test_pth_switch_only_with_the_variable(venv):
    py, _ = venv
    code = """
        import sys
        print("mcfs" in sys.modules, "safetensors" in sys.modules)
    """
    for val in (None, "0", "", "off"):
        out = run_in(py, code, env={} if val is None else {"MCFS_SAFETENSORS": val})
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["False", "False"], (val, out.stdout)
    out = run_in(py, code, env={"MCFS_SAFETENSORS": "1"})
    assert out.returncode == 0, out.stderr
    # the package is loaded, safetensors is not: it is patched when imported
    assert out.stdout.split() == ["True", "False"], out.stdout
    pytest.importorskip("safetensors", reason="the safetensors package is not installed")
    out = run_in(py, """
        import sys
        from safetensors import safe_open          # captured at import, as transformers does
        import safetensors.numpy, mcfs._switch as sw
        print(safe_open is sw.safe_open, safetensors.numpy.safe_open is sw.safe_open,
              sw.original_safe_open().__module__)
    """, env={"MCFS_SAFETENSORS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "builtins"], out.stdout


def make_st(path):
    import json
    import struct
    h = json.dumps({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\x00\x00\x80?\x00\x00\x00@")


def run_pkg(code, *args):
    env = dict(os.environ, PYTHONPATH=PKG)
    env.pop("MCFS_SAFETENSORS", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_another_abi_is_refused(tmp):
    need_root()
    make_st(str(tmp / "src" / "a.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        out = run_pkg("""
            import errno, sys, mcfs
            from mcfs import _abi
            _abi.ABI = _abi.ABI + 1     # a package from another release
            try:
                mcfs.prefetch(sys.argv[1])
            except mcfs.McfsError as e:
                print(e.errno == errno.EPROTO)
                print(e)
        """, m.p("a.safetensors"))
        assert out.returncode == 0, out.stderr
        ok, msg = out.stdout.split("\n", 1)
        assert ok == "True", out.stdout
        assert ("daemon speaks ioctl ABI %d" % HEADER_ABI) in msg, msg
        assert ("speaks ABI %d" % (HEADER_ABI + 1)) in msg, msg
        assert "pip install ./gpu/python" in msg and m.p("a.safetensors") in msg, msg
        # load_file refuses too, before it looks for a GPU (torch or a
        # stand-in, as in test_gpu_fallback)
        out = run_pkg(STUBS + textwrap.dedent("""
            import errno, sys, mcfs
            from mcfs import _abi
            _abi.ABI = _abi.ABI + 1
            try:
                mcfs.load_file(sys.argv[1], device="cuda:0")
            except mcfs.McfsError as e:
                print(e.errno == errno.EPROTO, "ABI %d" % (_abi.ABI - 1) in str(e)
                      and "ABI %d" % _abi.ABI in str(e))
        """), m.p("a.safetensors"))
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr
