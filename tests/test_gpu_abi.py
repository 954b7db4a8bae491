"""The ioctl ABI through a real mount (no GPU needed): a wrong abi_version is
EPROTO, a range past EOF is ERANGE, a non-safetensors default load is EBADMSG,
an unknown command is ENOTTY, MCFS_IOC_INFO answers and says why the GPU path
is off, and MCFS_IOC_PREFETCH warms blocks. On a machine with no GPU a valid
load is ENODEV. The Python structs match the C header's sizes.
"""
import errno
import fcntl
import os
import subprocess
import sys
import time

import pytest

from conftest import MCFS, ROOT, mcfs_mount, need_root

sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
import mcfs  # noqa: E402
from mcfs import _abi  # noqa: E402


def ioctl_errno(fd, cmd, req):
    try:
        _abi.ioctl(fd, cmd, req)
        return 0
    except OSError as e:
        return e.errno


def test_struct_sizes_match_the_c_header():
    hdr = open(os.path.join(ROOT, "include", "mcfs", "mcfs_ioctl.h")).read()
    assert "sizeof(struct mcfs_load_req) == %d" % len(bytes(_abi.LoadReq())) in hdr
    assert "sizeof(struct mcfs_info) == %d" % len(bytes(_abi.Info())) in hdr
    assert "sizeof(struct mcfs_prefetch_req) == %d" % len(bytes(_abi.PrefetchReq())) in hdr
    assert "sizeof(struct mcfs_bind_req) == %d" % len(bytes(_abi.BindReq())) in hdr
    assert "#define MCFS_IOCTL_ABI %d" % _abi.ABI in hdr
    assert "sizeof(struct mcfs_range) == %d" % len(bytes(_abi.Range())) in hdr
    assert _abi.IOC_LOAD == 0xFCB06D01
    assert _abi.IOC_BIND == 0xC0786D04


@pytest.fixture
def mounted(tmp):
    need_root()
    with open(str(tmp / "src" / "f.bin"), "wb") as f:
        f.write(os.urandom((3 << 20) + 5))
    with open(str(tmp / "src" / "e.bin"), "wb") as f:
        f.write(b"\xff" * 8 + b"x" * 8)
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["ram_cache=64M", "block_size=1M"]) as m:
        yield m


def test_abi_mismatch_is_eproto(mounted):
    fd = os.open(mounted.p("f.bin"), os.O_RDONLY)
    try:
        assert ioctl_errno(fd, _abi.IOC_LOAD, _abi.LoadReq(abi_version=_abi.ABI + 1)) \
            == errno.EPROTO
        assert ioctl_errno(fd, _abi.IOC_LOAD, _abi.LoadReq(abi_version=0)) == errno.EPROTO
        assert ioctl_errno(fd, _abi.IOC_PREFETCH, _abi.PrefetchReq(abi_version=9)) \
            == errno.EPROTO
        assert ioctl_errno(fd, _abi.IOC_BIND, _abi.BindReq(abi_version=_abi.ABI - 1)) \
            == errno.EPROTO
        assert "ABI %d" % (_abi.ABI + 1) in mounted.log()
    finally:
        os.close(fd)


def test_request_validation(mounted):
    fd = os.open(mounted.p("f.bin"), os.O_RDONLY)
    efd = os.open(mounted.p("e.bin"), os.O_RDONLY)
    try:
        r = _abi.LoadReq(abi_version=_abi.ABI, nranges=1)
        r.ranges[0].file_off = 3 << 20
        r.ranges[0].len = 6  # one byte past EOF
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.ERANGE
        r.ranges[0].file_off = 2 ** 64 - 1
        r.ranges[0].len = 2
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.EINVAL
        # strided ranges (ABI 3): rows of len bytes src_stride apart
        r.ranges[0].file_off = 0
        r.ranges[0].len = 8
        r.ranges[0].count = 4
        r.ranges[0].src_stride = 7  # rows would overlap
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.EINVAL
        r.ranges[0].src_stride = 1 << 20
        r.ranges[0].count = 3
        r.ranges[0].file_off = (1 << 20) - 1  # the last row ends 2 bytes past EOF
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.ERANGE
        r.ranges[0].count = 4
        r.ranges[0].count, r.ranges[0].src_stride = 5, 2 ** 62
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.EINVAL  # end overflows
        assert ioctl_errno(fd, _abi.IOC_LOAD,
                           _abi.LoadReq(abi_version=_abi.ABI, nranges=_abi.LOAD_MAX_RANGES + 1)) \
            == errno.EINVAL
        assert ioctl_errno(fd, _abi.IOC_LOAD, _abi.LoadReq(abi_version=_abi.ABI, flags=0x80)) \
            == errno.EINVAL
        assert ioctl_errno(fd, _abi.IOC_BIND, _abi.BindReq(abi_version=_abi.ABI, flags=0x2)) \
            == errno.EINVAL
        # no ranges: the safetensors data section, and e.bin's length prefix is garbage
        assert ioctl_errno(efd, _abi.IOC_LOAD, _abi.LoadReq(abi_version=_abi.ABI)) \
            == errno.EBADMSG
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, _abi._iowr("m", 0x7f, 16), bytearray(16), True)
        assert e.value.errno == errno.ENOTTY
    finally:
        os.close(fd)
        os.close(efd)


def test_info_and_no_gpu(mounted):
    i = mcfs.info(mounted.p("f.bin"))
    assert i["daemon_abi"] == _abi.ABI and i["block_size"] == 1 << 20
    assert i["ram_bytes"] == 64 << 20
    if i["gpu_ok"]:
        pytest.skip("this machine has a GPU: tests/gpu covers loads")
    assert i["reason"], "the daemon must say why the GPU path is off"
    assert "GPU fast path off" in mounted.log()
    fd = os.open(mounted.p("f.bin"), os.O_RDONLY)
    try:
        r = _abi.LoadReq(abi_version=_abi.ABI, nranges=1)
        r.ranges[0].len = 100
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.ENODEV
        r.ranges[0].count, r.ranges[0].src_stride = 3, 1 << 20  # a valid strided range
        assert ioctl_errno(fd, _abi.IOC_LOAD, r) == errno.ENODEV
        for flags in (0, _abi.BIND_F_PROVE):
            assert ioctl_errno(fd, _abi.IOC_BIND,
                               _abi.BindReq(abi_version=_abi.ABI, flags=flags)) == errno.ENODEV
    finally:
        os.close(fd)
    assert mcfs.info(os.path.join(ROOT, "include", "mcfs", "mcfs_ioctl.h")) is None  # not on mcfs


def test_prefetch_warms_the_file(mounted):
    s0 = mounted.stats()
    total = 4  # 3 MiB + 5 bytes in 1 MiB blocks
    off, seen = 0, 0
    deadline = time.time() + 10
    while off < (3 << 20) + 5 and time.time() < deadline:
        started, cached, n, off2 = mcfs.prefetch(mounted.p("f.bin"), off, 0)
        assert n == total - off // (1 << 20)
        seen += started + cached
        off = off2
    assert off == (3 << 20) + 5 and seen >= total
    deadline = time.time() + 10
    while mounted.stats()["fetches"] - s0["fetches"] < total and time.time() < deadline:
        time.sleep(0.05)
    assert mounted.stats()["fetches"] - s0["fetches"] == total
    with open(mounted.p("f.bin"), "rb") as f:
        f.read()
    assert mounted.stats()["fetches"] - s0["fetches"] == total, "reads after prefetch fetched"
    with pytest.raises(OSError) as e:
        mcfs.prefetch(mounted.p("f.bin"), 4 << 20, 0)
    assert e.value.errno == errno.ERANGE


def test_mcfs_binary_links_the_gpu_module():
    if not os.path.exists(MCFS):
        pytest.skip("mcfs not built")
    out = subprocess.run(["nm", MCFS], capture_output=True, text=True).stdout
    assert " gpu_load" in out and " fs_ioctl" in out
