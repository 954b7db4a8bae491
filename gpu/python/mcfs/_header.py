"""A strict safetensors header parser, the Python twin of gpu/safetensors.c.

It refuses what the reference implementation refuses (header over 100 MB,
bad JSON, unknown dtypes, sizes that do not match shapes, tensors that
overlap, leave gaps or run past the data section, duplicate names), each with
a HeaderError naming the tensor and the values.
"""
import json
import os
import struct

MAX_HEADER = 100_000_000
MAX_DIMS = 16

# name -> bits per element
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


class HeaderError(ValueError):
    """The file is not a valid safetensors file; the message says why."""


class Tensor:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    def __repr__(self):
        return "Tensor(%r, %s, %r, [%d, %d])" % (self.name, self.dtype, self.shape, self.begin,
                                                 self.end)


class Header:
    """tensors: sorted by offset; data_offset: file offset of the data section."""

    def __init__(self, tensors, metadata, header_len, data_len):
        self.tensors = tensors
        self.metadata = metadata
        self.header_len = header_len
        self.data_offset = 8 + header_len
        self.data_len = data_len


def _uint(v):
    return type(v) is int and v >= 0


def _no_dupes(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise HeaderError("tensor %r appears twice" % k if k != "__metadata__"
                              else '"__metadata__" appears twice')
        d[k] = v
    return d


def _tensor(name, e, data_len):
    if not isinstance(e, dict):
        raise HeaderError("tensor %r: entry is not an object" % name)
    dt = e.get("dtype")
    if not isinstance(dt, str):
        raise HeaderError('tensor %r: missing or non-string "dtype"' % name)
    if dt not in DTYPE_BITS:
        raise HeaderError("tensor %r: unknown dtype %r" % (name, dt[:32]))
    shape = e.get("shape")
    if not isinstance(shape, list):
        raise HeaderError('tensor %r: "shape" is not an array' % name)
    if len(shape) > MAX_DIMS:
        raise HeaderError("tensor %r: more than %d dimensions" % (name, MAX_DIMS))
    for i, d in enumerate(shape):
        if not _uint(d):
            raise HeaderError("tensor %r: shape[%d] is not a non-negative integer" % (name, i))
    offs = e.get("data_offsets")
    if not isinstance(offs, list) or len(offs) != 2:
        raise HeaderError('tensor %r: "data_offsets" is not [begin, end]' % name)
    b, end = offs
    if not (_uint(b) and _uint(end)):
        raise HeaderError("tensor %r: data_offsets are not non-negative integers" % name)
    if end < b:
        raise HeaderError("tensor %r: data_offsets [%d, %d] end before begin" % (name, b, end))
    if end > data_len:
        raise HeaderError("tensor %r: data_offsets [%d, %d] past the data section (%d bytes)"
                          % (name, b, end, data_len))
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPE_BITS[dt]
    if bits % 8:
        raise HeaderError("tensor %r: %d elements of %s are not whole bytes" % (name, numel, dt))
    if bits // 8 != end - b:
        raise HeaderError("tensor %r: %s shape needs %d bytes, data_offsets [%d, %d] hold %d"
                          % (name, dt, bits // 8, b, end, end - b))
    return Tensor(name, dt, tuple(shape), b, end)


def parse(raw, data_len):
    """Parses header bytes `raw` for a data section of `data_len` bytes."""
    if len(raw) > MAX_HEADER:
        raise HeaderError("header of %d bytes is over the %d-byte limit" % (len(raw), MAX_HEADER))
    try:
        text = raw.decode("utf-8").rstrip(" \t\r\n\0")
        root = json.loads(text, object_pairs_hook=_no_dupes)
    except HeaderError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise HeaderError("header is not valid JSON (%s)" % e) from None
    if not isinstance(root, dict):
        raise HeaderError("header is not a JSON object")
    metadata = None
    tensors = []
    for name, e in root.items():
        if name == "__metadata__":
            if not isinstance(e, dict):
                raise HeaderError('"__metadata__" is not an object')
            for k, v in e.items():
                if not isinstance(v, str):
                    raise HeaderError('"__metadata__" value of %r is not a string' % k)
            metadata = e
            continue
        tensors.append(_tensor(name, e, data_len))
    tensors.sort(key=lambda t: (t.begin, t.end, t.name))
    at = 0
    for t in tensors:
        if t.begin != at:
            raise HeaderError("tensor %r: data_offsets [%d, %d] %s the previous tensor "
                              "(which ends at %d)" % (t.name, t.begin, t.end,
                                                      "overlap" if t.begin < at
                                                      else "leave a gap after", at))
        at = t.end
    if at != data_len:
        raise HeaderError("tensors cover %d bytes of a %d-byte data section" % (at, data_len))
    return Header(tensors, metadata, len(raw), data_len)


def read_fd(fd):
    """Reads and parses the header of an open file (pread; any file system)."""
    size = os.fstat(fd).st_size
    if size < 8:
        raise HeaderError("file of %d bytes is too short for a safetensors header" % size)
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    if n > MAX_HEADER or n > size - 8:
        raise HeaderError("header length prefix %d does not fit a %d-byte file" % (n, size))
    raw = b""
    while len(raw) < n:
        chunk = os.pread(fd, n - len(raw), 8 + len(raw))
        if not chunk:
            raise HeaderError("file ended inside its header")
        raw += chunk
    return parse(raw, size - 8 - n)


def read(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no whole fetch at open
    try:
        return read_fd(fd)
    finally:
        os.close(fd)
