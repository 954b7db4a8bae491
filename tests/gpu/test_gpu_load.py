"""GPU fast path on a real GPU (the device machine): mcfs.load_file against
safetensors.torch.load_file, bitwise, for many dtypes and shapes, odd offsets,
1000 tensors, tiny blocks and RAM tiers, an http store, four processes at
once, the documented errors, and Ctrl-C. Skips with the reason without a GPU.
"""
import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from gpuutil import ROOT, assert_matches_file, assert_same, need_gpu, write_raw
from conftest import mcfs_mount

import mcfs
from mcfs import _abi

PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "gpu", "python"))

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
          "int64", "bool", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64",
          "complex64"]


def random_tensor(torch, dtype, shape, gen):
    n = 1
    for d in shape:
        n *= d
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    nbytes = n * dtype.itemsize
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).view(dtype) \
        .reshape(shape)


def many_dtypes(torch):
    gen = torch.Generator().manual_seed(1)
    out = {}
    for i, name in enumerate(DTYPES):
        dt = getattr(torch, name, None)
        if dt is None:
            continue
        for j, shape in enumerate([(), (0,), (3, 0, 2), (7,), (5, 3), (2, 3, 4, 5), (1031,)]):
            out["%s_%d_%d" % (name, i, j)] = random_tensor(torch, dt, shape, gen)
    out["big"] = random_tensor(torch, torch.bfloat16, (4096, 3000), gen)  # crosses blocks
    return out


def test_many_dtypes_bitwise(tmp):
    torch = need_gpu()
    from safetensors.torch import load_file, save_file
    save_file(many_dtypes(torch), str(tmp / "src" / "m.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=256M"]) as m:
        got = mcfs.load_file(m.p("m.safetensors"), device="cuda:0")
        want = load_file(str(tmp / "src" / "m.safetensors"), device="cuda:0")
        assert_same(torch, got, want)
        # views of one allocation
        bases = {t.untyped_storage().data_ptr() for t in got.values() if t.numel()}
        assert len(bases) == 1, "tensors are not views of one allocation"
        s0 = m.stats()
        again = mcfs.load_file(m.p("m.safetensors"), device="cuda:0")
        assert m.stats()["fetches"] == s0["fetches"], "second load did not come from RAM"
        assert_same(torch, again, want)


def test_odd_offsets_and_zero_sizes(tmp):
    torch = need_gpu()
    gen = torch.Generator().manual_seed(2)
    rb = lambda n: bytes(torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen).numpy())
    entries = [("a_u8", "U8", [3], rb(3)), ("b_f32", "F32", [5, 2], rb(40)),
               ("c_empty", "BF16", [0, 4], b""), ("d_bf16", "BF16", [7], rb(14)),
               ("e_i64", "I64", [3], rb(24)), ("f_scalar", "F64", [], rb(8)),
               ("g_f8", "F8_E4M3", [9], rb(9)), ("h_f16", "F16", [2, 2], rb(8))]
    write_raw(str(tmp / "src" / "odd.safetensors"), entries)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        got = mcfs.load_file(m.p("odd.safetensors"), device="cuda:0")
        assert_matches_file(torch, got, str(tmp / "src" / "odd.safetensors"))
        assert got["b_f32"].shape == (5, 2) and got["c_empty"].shape == (0, 4)


def test_thousand_tensors(tmp):
    torch = need_gpu()
    from safetensors.torch import load_file, save_file
    gen = torch.Generator().manual_seed(3)
    ts = {"t%04d" % i: random_tensor(torch, torch.float16, (i % 37 + 1, 3), gen)
          for i in range(1000)}
    save_file(ts, str(tmp / "src" / "k.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        got = mcfs.load_file(m.p("k.safetensors"), device="cuda")
        want = load_file(str(tmp / "src" / "k.safetensors"), device="cuda")
        assert_same(torch, got, want)


def test_tiny_blocks_and_ram_tier(tmp):
    """1 MiB blocks, 8 slots: the copy engine holds one block at a time and the
    file (24 MiB) is evicted while it loads."""
    torch = need_gpu()
    from safetensors.torch import load_file, save_file
    gen = torch.Generator().manual_seed(4)
    save_file({"x": random_tensor(torch, torch.float32, (3 << 20,), gen),
               "y": random_tensor(torch, torch.int8, (12345,), gen)},
              str(tmp / "src" / "s.safetensors"))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=8M", "block_size=1M"]) as m:
        got = mcfs.load_file(m.p("s.safetensors"), device="cuda:0")
        assert_same(torch, got, load_file(str(tmp / "src" / "s.safetensors"), device="cuda:0"))


def test_http_store(tmp):
    torch = need_gpu()
    from servers import Nginx, have_nginx
    if not have_nginx():
        pytest.skip("nginx is not installed")
    from safetensors.torch import load_file, save_file
    gen = torch.Generator().manual_seed(5)
    save_file({"w": random_tensor(torch, torch.bfloat16, (5 << 20,), gen)},
              str(tmp / "src" / "h.safetensors"))
    with Nginx(str(tmp / "src")) as ng:
        with mcfs_mount(ng.url, str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
            got = mcfs.load_file(m.p("h.safetensors"), device="cuda:0")
            assert_same(torch, got, load_file(str(tmp / "src" / "h.safetensors"),
                                              device="cuda:0"))


LOADER = r"""
import hashlib, os, sys, time, torch, mcfs
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
t = mcfs.load_file(sys.argv[1], device="cuda:0")
h = hashlib.sha256()
for k in sorted(t):
    x = t[k].contiguous().reshape(-1)
    if x.numel():
        h.update(x.view(torch.uint8).cpu().numpy().tobytes())
print(h.hexdigest())
"""


def test_four_processes_one_fetch_per_block(tmp):
    torch = need_gpu()
    from safetensors.torch import save_file
    gen = torch.Generator().manual_seed(6)
    save_file({"a": random_tensor(torch, torch.bfloat16, (40 << 20,), gen),
               "b": random_tensor(torch, torch.float32, (1000,), gen)},
              str(tmp / "src" / "p.safetensors"))
    size = os.path.getsize(str(tmp / "src" / "p.safetensors"))
    go = str(tmp / "go")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=512M", "readahead_max=0"]) as m:
        s0 = m.stats()
        procs = [subprocess.Popen([PY, "-c", LOADER, m.p("p.safetensors"), go], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        time.sleep(3)  # torch import and CUDA init in all four
        open(go, "w").close()
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (o, e) in zip(procs, outs):
            assert p.returncode == 0, e
        assert len({o.strip() for o, _ in outs}) == 1
        nblocks = (size + (8 << 20) - 1) // (8 << 20)
        fetched = m.stats()["fetches"] - s0["fetches"]
        assert fetched == nblocks, "%d fetches for %d blocks" % (fetched, nblocks)


def _req_for(torch, buf, nbytes, fd):
    """A load of the file's first nbytes into buf, which this process is bound to."""
    from mcfs._loader import bind_tensor
    db = bind_tensor(torch, fd, buf)
    r = _abi.LoadReq(abi_version=_abi.ABI, device=db.device, dst_offset=db.offset)
    r.ipc_handle[:] = db.handle
    r.device_uuid[:] = db.uuid
    r.nranges = 1
    r.ranges[0].file_off = 0
    r.ranges[0].len = nbytes
    return r


def _errno_of(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno


def test_documented_errors(tmp):
    torch = need_gpu()
    from mcfs._cuda import devbuf_from_ptr
    with open(str(tmp / "src" / "f.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        fd = os.open(m.p("f.bin"), os.O_RDONLY)
        try:
            buf = torch.empty(2 << 20, dtype=torch.uint8, device="cuda:0")

            def code(r):
                return _errno_of(lambda: _abi.ioctl(fd, _abi.IOC_LOAD, r))

            def bind_code(handle):
                db = devbuf_from_ptr(buf.data_ptr())
                db.handle = handle
                return _errno_of(lambda: _abi.bind(fd, db, lambda nonce: None))

            r = _req_for(torch, buf, 1 << 20, fd)
            assert code(r) == 0
            assert bytes(buf[:1 << 20].cpu().numpy()) == open(m.p("f.bin"), "rb").read(1 << 20)
            r = _req_for(torch, buf, 1 << 20, fd)
            r.abi_version = 7
            assert code(r) == errno.EPROTO
            r = _req_for(torch, buf, 1 << 20, fd)
            r.ranges[0].len = 4 << 20  # past EOF
            assert code(r) == errno.ERANGE
            r = _req_for(torch, buf, 1 << 20, fd)
            r.dst_size = 2 << 20
            r.ranges[0].dst_off = (2 << 20) - 100  # past the caller's buffer
            assert code(r) == errno.EOVERFLOW
            junk = os.urandom(64)
            r = _req_for(torch, buf, 1 << 20, fd)
            r.ipc_handle[:] = junk
            assert code(r) == errno.EPERM  # never bound: not even opened
            assert bind_code(junk) == errno.ENXIO
            # the handle of a process that has exited (a crashed client's)
            stale = subprocess.run(
                [PY, "-c", "import torch\nfrom mcfs._cuda import devbuf_from_ptr\n"
                 "b = torch.empty(4 << 20, dtype=torch.uint8, device='cuda:0')\n"
                 "print(bytes(devbuf_from_ptr(b.data_ptr()).handle).hex())"],
                env=ENV, capture_output=True, text=True, timeout=120)
            assert stale.returncode == 0, stale.stderr
            r = _req_for(torch, buf, 1 << 20, fd)
            r.ipc_handle[:] = bytes.fromhex(stale.stdout.strip())
            assert code(r) == errno.EPERM
            assert bind_code(bytes.fromhex(stale.stdout.strip())) == errno.ENXIO
            r = _req_for(torch, buf, 1 << 20, fd)
            r.device_uuid[:] = b"\x01" * 16
            assert code(r) == errno.ENODEV
            r = _req_for(torch, buf, 1 << 20, fd)
            assert code(r) == 0, "the daemon's GPU path broke after the errors"
        finally:
            os.close(fd)


VICTIM = r"""
import os, sys, torch
from mcfs import _abi
from mcfs._loader import bind_tensor
fd = os.open(sys.argv[1], os.O_RDONLY)
buf = torch.full((4 << 20,), 7, dtype=torch.uint8, device="cuda:0")
db = bind_tensor(torch, fd, buf)  # bound: the daemon holds its mapping open
buf[:16].fill_(7)
torch.cuda.synchronize()
print(bytes(db.handle).hex(), db.offset, flush=True)
sys.stdin.readline()  # the attacker has tried
print(int((buf != 7).sum().item()), flush=True)
r = _abi.LoadReq(abi_version=_abi.ABI, device=db.device, dst_offset=db.offset, nranges=1)
r.ipc_handle[:] = db.handle
r.device_uuid[:] = db.uuid
r.ranges[0].file_off, r.ranges[0].len = 0, 1 << 20
_abi.ioctl(fd, _abi.IOC_LOAD, r)
torch.cuda.synchronize()
print(bytes(buf[:1 << 20].cpu().numpy()) == open(sys.argv[1], "rb").read(1 << 20), flush=True)
"""


def test_another_process_handle_is_refused(tmp):
    """Issue 22, item 6: a process that learnt another's IPC handle bytes cannot
    have the daemon write into that process's GPU memory: its load is EPERM,
    and so is its bind, whose nonce it can only write into its own memory;
    the victim's bytes stay as they were, and its own load still works."""
    torch = need_gpu()
    from mcfs._cuda import devbuf_from_ptr
    with open(str(tmp / "src" / "f.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        victim = subprocess.Popen([PY, "-c", VICTIM, m.p("f.bin")], env=ENV, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        try:
            handle_hex, offset = victim.stdout.readline().split()
            handle = bytes.fromhex(handle_hex)
            fd = os.open(m.p("f.bin"), os.O_RDONLY)
            try:
                own = torch.empty(4 << 20, dtype=torch.uint8, device="cuda:0")
                mine = devbuf_from_ptr(own.data_ptr())
                r = _abi.LoadReq(abi_version=_abi.ABI, device=0, dst_offset=int(offset),
                                 nranges=1)
                r.ipc_handle[:] = handle
                r.device_uuid[:] = mine.uuid
                r.ranges[0].file_off, r.ranges[0].len = 0, 1 << 20
                assert _errno_of(lambda: _abi.ioctl(fd, _abi.IOC_LOAD, r)) == errno.EPERM
                forged = devbuf_from_ptr(own.data_ptr())
                forged.handle, forged.offset = handle, int(offset)

                def write_own(nonce):  # all an attacker can write: its own memory
                    own[:16].copy_(torch.frombuffer(bytearray(nonce), dtype=torch.uint8))
                    torch.cuda.synchronize()
                assert _errno_of(lambda: _abi.bind(fd, forged, write_own)) == errno.EPERM
                assert _errno_of(lambda: _abi.ioctl(fd, _abi.IOC_LOAD, r)) == errno.EPERM
            finally:
                os.close(fd)
            out, err = victim.communicate("go\n", timeout=120)
            assert victim.returncode == 0, err
            changed, loaded = out.split()
            assert changed == "0", "%s bytes of the victim's buffer were written" % changed
            assert loaded == "True"
            assert "could not show that it can write" in m.log()
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait()


def test_unexportable_memory_clear_error(tmp):
    need_gpu()
    from safetensors.numpy import save_file
    import numpy as np
    save_file({"x": np.zeros(1000, dtype=np.float32)}, str(tmp / "src" / "e.safetensors"))
    code = ("import mcfs, errno, sys\n"
            "try:\n    mcfs.load_file(sys.argv[1], device='cuda:0')\n"
            "except OSError as e:\n    print('ERR', e.errno == errno.EOPNOTSUPP, e)\n"
            "else:\n    print('OK')\n")
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"), opts=["ram_cache=64M"]) as m:
        env = dict(ENV, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        out = subprocess.run([PY, "-c", code, m.p("e.safetensors")], env=env,
                             capture_output=True, text=True, timeout=120)
        print(out.stdout, out.stderr)
        # With expandable segments the buffer is a VMM allocation: a clear EOPNOTSUPP.
        assert out.stdout.startswith("ERR True") and "expandable_segments" in out.stdout, \
            out.stdout + out.stderr


INTERRUPTED = r"""
import errno, signal, sys, torch, mcfs
# Ctrl-C as a program that handles it sees it: the handler runs, and the
# interrupted ioctl fails with EINTR (mcfs._abi retries no ioctl), which
# mcfs.load_file raises as McfsError. With Python's default handler the
# KeyboardInterrupt would hide whether the daemon stopped the load or
# finished it first.
signals = []
signal.signal(signal.SIGINT, lambda sig, frame: signals.append(sig))
path = sys.argv[1]
torch.zeros(1, device="cuda:0")  # CUDA is up before the load
with open(path, "rb") as f:      # lookup, open and block 0 (the header) are cached
    f.read(4096)
print("ready", flush=True)
sys.stdin.readline()             # the parent holds the store's answers now
try:
    mcfs.load_file(path, device="cuda:0")
    print("finished signals=%d" % len(signals), flush=True)
except OSError as e:
    print("errno=%s signals=%d" % (errno.errorcode.get(e.errno, e.errno), len(signals)),
          flush=True)
"""


def test_ctrl_c_stops_the_load(tmp):
    """Ctrl-C during a load stops it in the daemon: the caller gets EINTR, not
    the whole file, and the daemon goes on serving loads.

    No timing is guessed: the store sits behind a proxy that holds its answers
    while the load is in the daemon (the load's first block read is held), the
    signal is sent, the test waits until the daemon has received the kernel's
    FUSE INTERRUPT (libfuse's -d trace says so), and only then are the store's
    answers let through. The load must then end with EINTR at its next block;
    a daemon that ignored the interrupt would copy the rest and succeed.
    """
    torch = need_gpu()
    from servers import Nginx, have_nginx
    from faultproxy import FaultProxy
    from conftest import wait_for
    if not have_nginx():
        pytest.skip("nginx is not installed (the test holds the store's answers behind a proxy)")
    from safetensors.torch import save_file
    size = 128 << 20
    save_file({"x": torch.zeros(size, dtype=torch.uint8)}, str(tmp / "src" / "i.safetensors"))
    # 1 MiB blocks, one connection, no readahead: the load needs ~128 store reads, one at
    # a time; attributes stay fresh and opens trust them (open_check=ttl: no HEAD that the
    # held proxy would block at the load's own open), so the only store requests once
    # ready are the load's block reads.
    opts = ["ram_cache=16M", "block_size=1M", "connections=1", "readahead_max=0",
            "attr_ttl=3600", "open_check=ttl"]
    with Nginx(str(tmp / "src")) as ng, FaultProxy(ng.port) as px, \
            mcfs_mount(px.url, str(tmp / "mnt"), opts=opts, extra_args=["-d"]) as m:
        p = subprocess.Popen([PY, "-c", INTERRUPTED, m.p("i.safetensors")], env=ENV,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
            px.gate.clear()
            p.stdin.write("go\n")
            p.stdin.flush()
            assert wait_for(lambda: px.counts["held"] >= 1, timeout=60), \
                "the load never asked the store for a block: %s" % px.counts
            assert all(ln.startswith("GET /i.safetensors") for ln in px.held_lines), \
                px.held_lines
            interrupts = m.log().count("INTERRUPT:")
            p.send_signal(signal.SIGINT)
            assert wait_for(lambda: m.log().count("INTERRUPT:") > interrupts, timeout=30), \
                "the daemon never received the FUSE INTERRUPT"
        except BaseException:
            p.kill()
            raise
        finally:
            px.gate.set()
        out, err = p.communicate(timeout=120)
        print(out, err)
        assert "errno=EINTR signals=1" in out, \
            "the load was not interrupted (want EINTR): %r %r" % (out, err)
        # the daemon is healthy: still running, counters readable, and a load completes
        assert m.proc.poll() is None, "the daemon exited after the interrupt"
        m.stats()
        got = mcfs.load_file(m.p("i.safetensors"), device="cuda:0")
        assert got["x"].numel() == size and int(got["x"].count_nonzero()) == 0
