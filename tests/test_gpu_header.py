"""The safetensors header parser of the GPU path (Python twin of
gpu/safetensors.c; the C one has its own ctest table, gpu/safetensors_test.c):
good headers parse, and each malformed one - huge lengths, overlapping or
out-of-file offsets, bad JSON, unknown dtypes - is a HeaderError naming the
fault. A mutation fuzz checks that nothing else escapes.
"""
import json
import os
import random
import struct
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "gpu", "python"))

import mcfs  # noqa: E402
from mcfs import HeaderError, parse_header  # noqa: E402

T = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}  # noqa: E731

BAD = [
    (b"", 0, "not valid JSON"),
    (b"{", 0, "not valid JSON"),
    (b"[1,2]", 0, "not a JSON object"),
    (b"\xff\xfe", 0, "not valid JSON"),
    (json.dumps({"a": 1}).encode(), 0, "not an object"),
    (json.dumps({"a": {"shape": [1], "data_offsets": [0, 4]}}).encode(), 4, "dtype"),
    (json.dumps({"a": T("F33", [1], 0, 4)}).encode(), 4, "unknown dtype"),
    (json.dumps({"a": T("F32", [-1], 0, 4)}).encode(), 4, "shape[0]"),
    (json.dumps({"a": T("F32", [1.5], 0, 4)}).encode(), 4, "shape[0]"),
    (json.dumps({"a": T("F32", [1] * 17, 0, 4)}).encode(), 4, "dimensions"),
    (json.dumps({"a": T("F32", [1], 4, 0)}).encode(), 4, "end before"),
    (json.dumps({"a": T("F32", [1], 0, 4)}).encode(), 2, "past the data"),
    (json.dumps({"a": T("F32", [2], 0, 4)}).encode(), 4, "needs 8 bytes"),
    (json.dumps({"a": T("F4", [3], 0, 2)}).encode(), 2, "whole bytes"),
    (json.dumps({"a": T("F32", [1], 0, 4), "b": T("F32", [1], 2, 6)}).encode(), 8, "overlap"),
    (json.dumps({"a": T("F32", [1], 0, 4), "b": T("F32", [1], 8, 12)}).encode(), 12, "gap"),
    (json.dumps({"a": T("F32", [1], 0, 4)}).encode(), 8, "cover 4 bytes"),
    (b'{"a":' + json.dumps(T("U8", [0], 0, 0)).encode() + b',"a":'
     + json.dumps(T("U8", [0], 0, 0)).encode() + b"}", 0, "twice"),
    (json.dumps({"__metadata__": {"k": 1}}).encode(), 0, "not a string"),
    (json.dumps({"a": T("F32", [1], 0, 1e300)}).encode(), 4, "non-negative integers"),
]


@pytest.mark.parametrize("raw,data_len,want", BAD, ids=[w for _, _, w in BAD])
def test_malformed_headers_are_clear_errors(raw, data_len, want):
    with pytest.raises(HeaderError) as e:
        parse_header(raw, data_len)
    assert want in str(e.value)


def write(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_huge_length_prefix(tmp_path):
    p = str(tmp_path / "x.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", 1 << 62) + b"{}")
    with pytest.raises(HeaderError, match="does not fit"):
        mcfs.read_header(p)
    with open(p, "wb") as f:
        f.write(b"\x01\x02")
    with pytest.raises(HeaderError, match="too short"):
        mcfs.read_header(p)


def test_good_header_all_dtypes(tmp_path):
    from mcfs._header import DTYPE_BITS
    header, at, shapes = {"__metadata__": {"format": "pt"}}, 0, {}
    for i, (dt, bits) in enumerate(sorted(DTYPE_BITS.items())):
        shape = [4, 2] if bits % 8 == 0 else [8]
        n = 8 * bits // 8
        header["t%d_%s" % (i, dt)] = T(dt, shape, at, at + n)
        shapes["t%d_%s" % (i, dt)] = (dt, tuple(shape))
        at += n
    header["empty"] = T("BF16", [0, 3], at, at)
    p = str(tmp_path / "g.safetensors")
    write(p, header, b"\x00" * at)
    h = mcfs.read_header(p)
    assert h.metadata == {"format": "pt"}
    assert {t.name: (t.dtype, t.shape) for t in h.tensors if t.name != "empty"} == shapes
    assert h.data_offset == os.path.getsize(p) - at and h.data_len == at


def test_fuzzed_headers_never_escape():
    good = json.dumps({"a": T("F16", [2, 2], 0, 8), "b": T("I64", [1], 8, 16)}).encode()
    rnd = random.Random(7)
    alphabet = b'{}[]",:0123456789-.eE \\ab'
    accepted = 0
    for _ in range(5000):
        b = bytearray(good)
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(b))
            op = rnd.randrange(3)
            if op == 0:
                b[i] = rnd.choice(alphabet)
            elif op == 1:
                del b[i:]
                if not b:
                    b = bytearray(b"{")
            else:
                b.insert(i, rnd.choice(alphabet))
        try:
            h = parse_header(bytes(b), 16)
        except HeaderError as e:
            assert str(e)
            continue
        accepted += 1
        at = 0
        for t in h.tensors:
            assert t.begin == at
            at = t.end
        assert at == 16
    assert accepted < 5000
