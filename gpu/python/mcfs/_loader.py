"""Tensors of a safetensors file, each in a device allocation of its own.

mcfs.load_file returns views of one device buffer (the fastest shape); the
switch (mcfs.patch_safetensors) must return what safetensors returns: every
tensor its own storage, so that code that looks at storages (save_pretrained
finds shared tensors by storage pointer, safetensors' save_file refuses them)
behaves as before. The bytes still arrive by the daemon's DMA:

- a batch of tensors goes to a staging arena in one MCFS_IOC_LOAD (adjacent
  tensors in one range), then each is copied on the device into its own
  allocation: device memory copies run at several hundred GB/s, far above the
  host-to-device link, so the copy costs a few percent of the load;
- the arena is at most ARENA_BYTES, so a load needs the file's size plus the
  arena on the device, not twice the file; the daemon keeps its IPC mapping of
  the arena between the batches of one load and closes it with the last one
  (MCFS_LOAD_F_CLOSE);
- a single tensor (a re-read) goes straight into its own allocation.

Transport is the one piece that talks to the daemon; it is passed in, so the
layout logic is the same for every caller.
"""
import errno

from . import _abi

# Staging arena per load: 1 GiB is ~20 ms of a 50 GB/s link, long beside the
# per-ioctl start (opening the IPC mapping, the first blocks' latency), and a
# small share of a GPU's memory.
ARENA_BYTES = 1 << 30

# safetensors dtype name -> torch dtype attribute name
TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


def torch_dtype(torch, name):
    """The torch dtype of a safetensors dtype name, or None where torch has none."""
    attr = TORCH_DTYPES.get(name)
    return getattr(torch, attr, None) if attr else None


def odd_dtypes(torch, tensors):
    """The dtypes of `tensors` (header Tensor entries) that the fast path cannot
    lay out, sorted."""
    return sorted({t.dtype for t in tensors if torch_dtype(torch, t.dtype) is None})


def bind_tensor(torch, fd, buf, db=None):
    """Binds this process to the device memory of uint8 tensor `buf` (16
    elements at least) for loads through `fd` (MCFS_IOC_BIND): the daemon
    loads only into buffers a process shows it can write, so its nonce goes
    to buf's first 16 bytes and is read back. `db`: buf's _cuda.DevBuf if the
    caller has it. Returns the DevBuf. Raises OSError (EPERM: the daemon
    read other bytes)."""
    from ._cuda import devbuf_from_ptr

    db = db or devbuf_from_ptr(buf.data_ptr())
    stream = torch.cuda.current_stream(buf.device)
    stream.synchronize()

    def write(nonce):
        buf[:len(nonce)].copy_(torch.frombuffer(bytearray(nonce), dtype=torch.uint8))
        stream.synchronize()

    _abi.bind(fd, db, write)
    return db


class IoctlTransport:
    """Fills device buffers with file bytes through MCFS_IOC_LOAD on `fd`."""

    def __init__(self, torch, fd, path):
        self.torch, self.fd, self.path = torch, fd, path
        self._db_ptr, self._db = None, None

    def fill(self, buf, ranges, last):
        """Copies each (file_off, len, buf_off[, count, src_stride]) of `ranges`
        into uint8 tensor `buf` (_abi.load_request says what they mean).

        `last`: the daemon closes its mapping of buf after this load. Raises
        McfsError (an OSError) when the daemon refuses or fails.
        """
        from ._cuda import devbuf_from_ptr
        from . import McfsError, _load_error

        if self._db_ptr != buf.data_ptr():
            db = devbuf_from_ptr(buf.data_ptr())  # its errors say what memory can't be used
            try:
                bind_tensor(self.torch, self.fd, buf, db)
            except OSError as e:
                raise _load_error(self.path, e) from None
            self._db, self._db_ptr = db, buf.data_ptr()
        req = _abi.load_request(self._db, ranges, _abi.LOAD_F_CLOSE if last else 0,
                                buf.numel())
        # The allocator may hand out memory that queued kernels still use, and
        # the previous batch's copies out of the arena must be done: wait.
        self.torch.cuda.current_stream(buf.device).synchronize()
        try:
            _abi.ioctl(self.fd, _abi.IOC_LOAD, req)
        except OSError as e:
            raise _load_error(self.path, e) from None
        want = sum(r[1] * (max(r[3], 1) if len(r) > 3 else 1) for r in ranges)
        if req.bytes != want:
            raise McfsError(errno.EIO, "mcfs: loading %s: %d of %d bytes copied"
                            % (self.path, req.bytes, want))

    def close(self, buf):
        """Has the daemon drop its mapping of `buf` after a load that failed
        between batches: an empty range with MCFS_LOAD_F_CLOSE copies nothing.
        Errors are ignored: the daemon also drops it when this process ends."""
        if self._db_ptr != buf.data_ptr():
            return  # never sent: the daemon has no mapping of it
        req = _abi.load_request(self._db, [(0, 0, 0)], _abi.LOAD_F_CLOSE, buf.numel())
        try:
            _abi.ioctl(self.fd, _abi.IOC_LOAD, req)
        except OSError:
            pass


def _batches(tensors, cap):
    """Splits tensors (in file order, none empty) into batches of at most `cap`
    bytes and LOAD_MAX_RANGES ranges (adjacent tensors share a range)."""
    batches, cur, used, nranges, end = [], [], 0, 0, None
    for t in tensors:
        n = t.end - t.begin
        joins = end == t.begin
        if cur and (used + n > cap or (not joins and nranges == _abi.LOAD_MAX_RANGES)):
            batches.append(cur)
            cur, used, nranges, joins = [], 0, 0, False
        cur.append(t)
        used += n
        nranges += 0 if joins else 1
        end = t.end
    if cur:
        batches.append(cur)
    return batches


def _ranges(header, batch):
    """(file_off, len, arena_off) ranges of a batch packed from arena offset 0."""
    ranges, at = [], 0
    for t in batch:
        n = t.end - t.begin
        off = header.data_offset + t.begin
        if ranges and ranges[-1][0] + ranges[-1][1] == off:
            ranges[-1][1] += n
        else:
            ranges.append([off, n, at])
        at += n
    return [tuple(r) for r in ranges]


def load_tensors(torch, transport, header, tensors, device, arena_bytes=None):
    """Loads `tensors` (Tensor entries of `header`) to `device`, each in its own
    allocation, through an arena of at most `arena_bytes` (ARENA_BYTES), or
    as large as the largest tensor. Returns {name: tensor} in the order given."""
    arena_bytes = ARENA_BYTES if arena_bytes is None else arena_bytes
    out = {}
    todo = sorted((t for t in tensors if t.end > t.begin), key=lambda t: t.begin)
    for t in tensors:
        if t.end == t.begin:
            out[t.name] = torch.empty(t.shape, dtype=torch_dtype(torch, t.dtype), device=device)
    if len(todo) == 1:
        t = todo[0]
        # 16 bytes at least: the room a binding's nonce needs (_abi.bind)
        room = torch.empty(max(t.end - t.begin, _abi.BIND_NONCE_SIZE), dtype=torch.uint8,
                           device=device)
        transport.fill(room, [(header.data_offset + t.begin, t.end - t.begin, 0)], True)
        raw = room
        if room.numel() > t.end - t.begin:  # a tensor of its own size, as safetensors gives
            raw = torch.empty(t.end - t.begin, dtype=torch.uint8, device=device)
            raw.copy_(room[:t.end - t.begin])
        out[t.name] = raw.view(torch_dtype(torch, t.dtype)).view(t.shape)
    elif todo:
        biggest = max(t.end - t.begin for t in todo)
        total = sum(t.end - t.begin for t in todo)
        cap = max(min(arena_bytes, total), biggest)
        arena = torch.empty(max(cap, _abi.BIND_NONCE_SIZE), dtype=torch.uint8, device=device)
        batches = _batches(todo, cap)
        for i, batch in enumerate(batches):
            try:
                transport.fill(arena, _ranges(header, batch), i == len(batches) - 1)
            except BaseException:
                if i < len(batches) - 1:
                    transport.close(arena)
                raise
            at = 0
            for t in batch:
                n = t.end - t.begin
                raw = torch.empty(n, dtype=torch.uint8, device=device)
                raw.copy_(arena[at:at + n])
                out[t.name] = raw.view(torch_dtype(torch, t.dtype)).view(t.shape)
                at += n
        del arena  # freed in stream order: the copies above are queued before any reuse
    return {t.name: out[t.name] for t in tensors}


def load_slice(torch, transport, header, entry, sl, device):
    """Loads the slice `sl` = (dim, start, stop) of header Tensor `entry` to
    `device`, in an allocation of its own: one range of the ioctl, strided
    for dim > 0, so that only the slice's bytes are copied. The result has
    the slice's shape and is contiguous."""
    from . import _slices
    v, (off, n, count, stride) = _slices.sliced(entry, sl)
    dt = torch_dtype(torch, entry.dtype)
    if v.end == 0:
        return torch.empty(v.shape, dtype=dt, device=device)
    # 16 bytes at least: the room a binding's nonce needs (_abi.bind)
    room = torch.empty(max(v.end, _abi.BIND_NONCE_SIZE), dtype=torch.uint8, device=device)
    r = (header.data_offset + off, n, 0) + ((count, stride) if count > 1 else ())
    transport.fill(room, [r], True)
    raw = room
    if room.numel() > v.end:
        raw = torch.empty(v.end, dtype=torch.uint8, device=device)
        raw.copy_(room[:v.end])
    return raw.view(dt).view(v.shape)
