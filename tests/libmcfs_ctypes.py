"""ctypes mirrors of libmcfs's selection API (gpu/libmcfs/mcfs_client.h), for
the tests that call it: tests/test_gpu_select.py and tests/gpu/."""
import ctypes
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))
from mcfs import _abi  # noqa: E402

LIB = os.environ.get("MCFS_LIB", os.path.join(ROOT, "build", "gpu", "libmcfs.so.2"))


class StTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_uint),
                ("shape", ctypes.c_uint64 * 16), ("begin", ctypes.c_uint64),
                ("end", ctypes.c_uint64)]


class StHeader(ctypes.Structure):
    _fields_ = [("header_len", ctypes.c_uint64), ("data_offset", ctypes.c_uint64),
                ("data_len", ctypes.c_uint64), ("ntensors", ctypes.c_size_t),
                ("tensors", ctypes.POINTER(StTensor)), ("metadata_json", ctypes.c_char_p)]


class Slice(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("dim", ctypes.c_int32),
                ("world", ctypes.c_uint32), ("start", ctypes.c_uint64),
                ("stop", ctypes.c_uint64), ("rank", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class Cut(ctypes.Structure):
    _fields_ = [("dim", ctypes.c_int32), ("start", ctypes.c_uint64), ("stop", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64)]


class Selection(ctypes.Structure):
    _fields_ = [("header", ctypes.POINTER(StHeader)), ("n", ctypes.c_size_t),
                ("tensors", ctypes.POINTER(ctypes.POINTER(StTensor))),
                ("dst", ctypes.POINTER(ctypes.c_uint64)), ("bytes", ctypes.c_uint64),
                ("copy_bytes", ctypes.c_uint64), ("nranges", ctypes.c_size_t),
                ("ranges", ctypes.POINTER(_abi.Range)), ("owns_header", ctypes.c_int),
                ("cuts", ctypes.POINTER(Cut))]


def libmcfs():
    """The built libmcfs.so with the selection calls typed, or a skip."""
    if not os.path.exists(LIB):
        pytest.skip("%s is not built (cmake --build build)" % LIB)
    lib = ctypes.CDLL(LIB)
    lib.mcfs_st_parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.POINTER(StHeader)), ctypes.c_char_p,
                                  ctypes.c_size_t]
    lib.mcfs_select.argtypes = [ctypes.POINTER(StHeader), ctypes.POINTER(ctypes.c_char_p),
                                ctypes.c_size_t, ctypes.POINTER(ctypes.POINTER(Selection)),
                                ctypes.c_char_p, ctypes.c_size_t]
    lib.mcfs_select_slices.argtypes = [ctypes.POINTER(StHeader), ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.c_size_t, ctypes.POINTER(Slice), ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.POINTER(Selection)),
                                       ctypes.c_char_p, ctypes.c_size_t]
    lib.mcfs_shard_bounds.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                      ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint64)]
    lib.mcfs_load_tensors_sliced.restype = ctypes.c_int64
    lib.mcfs_load_tensors_sliced.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
        ctypes.POINTER(Slice), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64,
        ctypes.POINTER(ctypes.POINTER(Selection)), ctypes.c_char_p, ctypes.c_size_t]
    lib.mcfs_selection_free.argtypes = [ctypes.POINTER(Selection)]
    lib.mcfs_st_free.argtypes = [ctypes.POINTER(StHeader)]
    lib.mcfs_load_tensors.restype = ctypes.c_int64
    lib.mcfs_load_tensors.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64,
                                      ctypes.POINTER(ctypes.POINTER(Selection)),
                                      ctypes.c_char_p, ctypes.c_size_t]
    return lib
