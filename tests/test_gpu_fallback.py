"""mcfs.load_file falls back to safetensors, with a one-line notice on
stderr, for a file outside mcfs and for a mount whose daemon has no GPU. The
package imports with no build step. Without torch (CI), a stand-in
`torch`/`safetensors.torch` pair records the fallback call, so the decision
and the notice are still tested; with torch the real libraries are used.
"""
import os
import re
import subprocess
import sys
import textwrap

from conftest import ROOT, mcfs_mount, need_root

PKG = os.path.join(ROOT, "gpu", "python")

STUBS = textwrap.dedent("""
    import sys, types
    try:
        import torch  # noqa: F401
        import safetensors.torch  # noqa: F401
    except ImportError:
        torch = types.ModuleType("torch")
        class _Dev:
            def __init__(self, s, index=None):
                self.type, _, i = str(s).partition(":")
                self.index = int(i) if i else index
            def __str__(self):
                return self.type + (":%d" % self.index if self.index is not None else "")
        torch.device = _Dev
        torch.cuda = types.SimpleNamespace(is_available=lambda: False)
        sys.modules["torch"] = torch
        st = types.ModuleType("safetensors.torch")
        st.load_file = lambda path, device="cpu": {"stub": (path, device)}
        sys.modules["safetensors.torch"] = st
""")


def run_py(code, *args):
    env = dict(os.environ, PYTHONPATH=PKG)
    return subprocess.run([sys.executable, "-c", STUBS + textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def make_st(path):
    import json
    import struct
    h = json.dumps({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\x00\x00\x80?\x00\x00\x00@")


def test_import_needs_no_build():
    out = subprocess.run([sys.executable, "-c",
                          'import sys; sys.path.insert(0, "gpu/python"); import mcfs; '
                          'print(mcfs.ABI)'], cwd=ROOT, capture_output=True, text=True)
    with open(os.path.join(ROOT, "include", "mcfs", "mcfs_ioctl.h")) as f:
        abi = re.search(r"#define MCFS_IOCTL_ABI (\d+)", f.read()).group(1)
    assert out.returncode == 0 and out.stdout.strip() == abi, out.stderr


CODE = """
    import sys, mcfs
    t = mcfs.load_file(sys.argv[1], device="cuda:0")
    print(sorted(t))
"""


def test_fallback_outside_mcfs(tmp_path):
    p = str(tmp_path / "a.safetensors")
    make_st(p)
    out = run_py(CODE, p)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stderr.splitlines() if l.startswith("mcfs:")]
    assert len(lines) == 1, out.stderr
    assert "loading with safetensors instead" in lines[0] and p in lines[0]
    assert "['stub']" in out.stdout or "['x']" in out.stdout


def test_fallback_on_a_mount_without_gpu(tmp):
    need_root()
    make_st(str(tmp / "src" / "a.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        out = run_py(CODE, m.p("a.safetensors"))
        assert out.returncode == 0, out.stderr
        lines = [l for l in out.stderr.splitlines() if l.startswith("mcfs:")]
        assert len(lines) == 1 and "loading with safetensors instead" in lines[0], out.stderr
        # the reason names what is missing: no GPU here, or none in the daemon
        assert "GPU" in lines[0] or "CUDA" in lines[0], lines[0]


def test_cpu_device_falls_back(tmp_path):
    p = str(tmp_path / "a.safetensors")
    make_st(p)
    out = run_py("""
        import sys, mcfs
        print(sorted(mcfs.load_file(sys.argv[1], device="cpu")))
    """, p)
    assert out.returncode == 0, out.stderr
    assert "not a CUDA device" in out.stderr
