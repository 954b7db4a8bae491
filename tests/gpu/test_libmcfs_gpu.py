"""libmcfs, the C client, on a real GPU: mcfs_load_file() into device memory
the test allocates (through PyTorch, so its caching allocator's blocks), at
the start of an allocation and at an offset inside one, compared byte for
byte with the file's data section; the bytes around the destination stay
untouched; a buffer too small, a file off mcfs and host memory give their
documented errors with a reason. Skips with the reason without a GPU.
"""
import ctypes
import errno
import os
import struct

import pytest

from gpuutil import ROOT, need_gpu
from conftest import mcfs_mount

LIB = os.environ.get("MCFS_LIB", os.path.join(ROOT, "build", "gpu", "libmcfs.so.2"))


def libmcfs():
    if not os.path.exists(LIB):
        pytest.skip("%s is not built (cmake --build build)" % LIB)
    lib = ctypes.CDLL(LIB)
    lib.mcfs_load_file.restype = ctypes.c_int64
    lib.mcfs_load_file.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_uint64,
                                   ctypes.c_char_p, ctypes.c_size_t]
    return lib


def load(lib, path, dptr, cap):
    err = ctypes.create_string_buffer(512)
    n = lib.mcfs_load_file(path.encode(), ctypes.c_void_p(dptr), cap, err, len(err))
    return n, err.value.decode(errors="replace")


def data_section(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    return raw[8 + hlen:]


def model(torch, path):
    from safetensors.torch import save_file
    gen = torch.Generator().manual_seed(21)
    t = {"w%d" % i: torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
         for i, n in enumerate([3 * (1 << 20) + 5, 17, 9 * (1 << 20) + 1001, 0, 4096])}
    save_file(t, path)


def test_load_file_into_device_memory(tmp):
    torch = need_gpu()
    lib = libmcfs()
    src = str(tmp / "src" / "m.safetensors")
    model(torch, src)
    want = data_section(src)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["block_size=1M", "ram_cache=64M"]) as m:
        path = m.p("m.safetensors")
        # at the start of an allocation
        buf = torch.empty(len(want), dtype=torch.uint8, device="cuda:0")
        n, err = load(lib, path, buf.data_ptr(), len(want))
        torch.cuda.synchronize()
        assert n == len(want), err
        assert bytes(buf.cpu().numpy().tobytes()) == want
        # inside a larger allocation, 4099 bytes in: the bytes around stay
        pad = 4099
        big = torch.full((len(want) + 2 * pad,), 0xA5, dtype=torch.uint8, device="cuda:0")
        n, err = load(lib, path, big.data_ptr() + pad, len(want) + pad)
        torch.cuda.synchronize()
        assert n == len(want), err
        got = bytes(big.cpu().numpy().tobytes())
        assert got[pad:pad + len(want)] == want
        assert got[:pad] == b"\xa5" * pad and got[pad + len(want):] == b"\xa5" * pad
        # a buffer too small: refused before any byte moves
        small = torch.full((len(want) - 1,), 0x5A, dtype=torch.uint8, device="cuda:0")
        n, err = load(lib, path, small.data_ptr(), len(want) - 1)
        assert n == -errno.ENOSPC and "buffer" in err, (n, err)
        assert bytes(small.cpu().numpy().tobytes()) == b"\x5a" * (len(want) - 1)
        # host memory is no device buffer
        host = ctypes.create_string_buffer(len(want))
        n, err = load(lib, path, ctypes.addressof(host), len(want))
        assert n == -errno.ENODEV and err, (n, err)
    # a file that is not on mcfs
    n, err = load(lib, src, buf.data_ptr(), len(want))
    assert n == -errno.ENOTTY and err, (n, err)
