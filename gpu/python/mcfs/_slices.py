"""Slices of tensors along one dimension, and the tensor-parallel plan.

A tensor-parallel rank needs part of each weight: rows of a column-parallel
one (q/k/v/gate/up: dim 0), columns of a row-parallel one (o/down: dim 1).
`load_file(path, device, slices={name_or_glob: (dim, start, stop)})` loads
`t[..., start:stop, ...]` (along `dim`) of each tensor a key selects;
`load_file(path, device, rank=r, world=w, split={glob: dim})` loads, of each
tensor a glob matches, rank r's shard of w along `dim`. Tensors that no key
and no glob matches load whole (norms, embeddings a plan does not split).

Slices follow Python's slicing of one dimension with step 1, as safetensors'
`get_slice(name)[...]` does: negative `dim`, `start` and `stop` count from
the end, None means the start or the end, and bounds are clamped (so an
empty slice is allowed). The result is bitwise `get_slice(name)[sl]`, with
`sl` the index tuple `index(dim, start, stop)` gives.

The plan's shards (shard_bounds): ceil(n / world) elements each, the last
rank's shorter when `world` does not divide n (and empty when the earlier
shards cover everything), as `torch.chunk` does. vLLM's linear layers
require n to divide by the tensor-parallel size; with such shapes every
shard is n / world. vLLM's VocabParallelEmbedding cuts the same way over a
vocabulary padded to a multiple of 64 (its shards can be longer than
ceil(n / world)): give it explicit `slices` with vLLM's bounds.

Which keys must match: a `slices` key, like `tensors`, must select some
tensor of the file (UnknownTensorError otherwise); a `split` glob need not,
so that one plan serves every shard of a model. A tensor that both a
`slices` key and a `split` glob select takes the `slices` entry; one that
two keys of the same dict select with different slices is an error
(ValueError), as is a dim outside the tensor's dimensions.

Bytes: a slice along dim 0 is one contiguous range of the file. Along dim
d > 0 it is `outer` rows (the product of the dimensions before d) of
`(stop - start) * inner` bytes, `dim_d * inner` bytes apart (inner: the
product of the dimensions after d, times the item size): one strided range
of the ioctl (count, src_stride), so only the slice's bytes cross PCIe.
"""
import fnmatch
import math
import re

from ._header import DTYPE_BITS, Tensor
from ._select import ALIGN, UnknownTensorError, resolve

_GLOB_CHARS = re.compile(r"[*?\[]")


def shard_bounds(n, rank, world):
    """[start, stop) of `rank`'s shard of `n` elements split `world` ways.

    ceil(n / world) each, the last ones shorter or empty (see the module)."""
    if not isinstance(world, int) or not isinstance(rank, int) or world < 1:
        raise ValueError("world must be an int >= 1, got %r" % (world,))
    if not 0 <= rank < world:
        raise ValueError("rank %r is not in [0, %d)" % (rank, world))
    size = -(-n // world)
    start = min(n, rank * size)
    return start, min(n, start + size)


def _norm(t, dim, start, stop):
    nd = len(t.shape)
    if not isinstance(dim, int) or not -nd <= dim < nd:
        raise ValueError("mcfs: slice of %s along dim %r: the tensor has %d dimensions"
                         % (t.name, dim, nd))
    dim %= nd
    s = slice(start, stop).indices(t.shape[dim])
    return dim, s[0], max(s[0], s[1])


def _matching(names, key):
    if key in names:
        return [key]
    if not _GLOB_CHARS.search(key):
        return []
    rx = re.compile(fnmatch.translate(key))
    return [n for n in names if rx.match(n)]


def resolve_slices(path, tensors, slices=None, rank=None, world=None, split=None):
    """{name: (dim, start, stop)} normalised, for the header Tensors `tensors`.

    Whole-tensor slices are left out (they load as whole tensors)."""
    if (split is None) != (world is None) or (rank is None) != (world is None):
        raise ValueError("mcfs: a plan needs rank, world and split together")
    by_name = {t.name: t for t in tensors}
    out, origin = {}, {}

    def put(name, sl, key, what):
        t = by_name[name]
        sl = _norm(t, *sl)
        if name in origin and origin[name][0] == what and out[name] != sl:
            raise ValueError("mcfs: %s of %s: %r and %r select it with different slices"
                             % (what, name, origin[name][1], key))
        out[name], origin[name] = sl, (what, key)

    if split is not None:
        if isinstance(split, dict):
            items = list(split.items())
        else:
            raise TypeError("split: expected {glob: dim}, got %r" % (split,))
        shard_bounds(0, rank, world)  # checks rank and world
        for key, dim in items:
            for name in _matching(by_name, key):
                t = by_name[name]
                d, _, _ = _norm(t, dim, None, None)
                put(name, (d,) + shard_bounds(t.shape[d], rank, world), key, "split")
    if slices:
        resolve(path, by_name, list(slices))  # every key must select something
        for key, sl in slices.items():
            if len(sl) != 3:
                raise ValueError("mcfs: slices[%r]: expected (dim, start, stop), got %r"
                                 % (key, sl))
            names = _matching(by_name, key)
            for name in names:
                if origin.get(name, ("",))[0] == "split":
                    del origin[name]  # slices override the plan
                put(name, sl, key, "slices")
    return {n: s for n, s in out.items() if s[1:] != (0, by_name[n].shape[s[0]])}


def index(dim, start, stop):
    """The index tuple of safetensors' get_slice for this slice."""
    return (slice(None),) * dim + (slice(start, stop),)


def sliced(t, sl):
    """The range of `t` (a header Tensor) that slice `sl` = (dim, start, stop)
    takes: (Tensor of the result: its shape, and begin = 0, end = its bytes;
    (data-section offset, row bytes, rows, src_stride)). Raises ValueError
    for a dtype of less than a byte (F4, F6)."""
    dim, start, stop = sl
    bits = DTYPE_BITS[t.dtype]
    if bits % 8:
        raise ValueError("mcfs: %s: slices of %s tensors are not supported" % (t.name, t.dtype))
    inner = math.prod(t.shape[dim + 1:]) * (bits // 8)
    outer = math.prod(t.shape[:dim])
    shape = list(t.shape)
    shape[dim] = stop - start
    row = (stop - start) * inner
    out = Tensor(t.name, t.dtype, shape, 0, outer * row)
    stride = t.shape[dim] * inner
    if outer <= 1 or row == stride:
        return out, (t.begin + start * inner, outer * row, 1, 0)
    return out, (t.begin + start * inner, row, outer, stride)


def plan(tensors, cuts, align=ALIGN):
    """Lays out `tensors` (header Tensors in file order), sliced per `cuts`
    ({name: (dim, start, stop)} from resolve_slices), in one buffer.

    Returns (ranges, dst, size, views): ranges as (data-section offset, len,
    buffer offset[, count, src_stride]), each tensor's buffer offset by name,
    the buffer bytes, and the Tensors to view (sliced ones with their
    result's shape). Unsliced tensors keep _select.plan's runs; a sliced one
    is a range of its own at the next ALIGN-aligned offset."""
    ranges, dst, views = [], {}, []
    at = 0
    run = None  # [begin, end, dst] of the open run of whole tensors

    def close():
        if run is not None and run[1] > run[0]:
            ranges.append((run[0], run[1] - run[0], run[2]))

    for t in tensors:
        if t.name in cuts:
            close()
            run = None
            v, (off, n, count, stride) = sliced(t, cuts[t.name])
            at += -at % align
            dst[t.name] = at
            views.append(v)
            if v.end:
                ranges.append((off, n, at) if count == 1 else (off, n, at, count, stride))
            at += v.end
            continue
        if run is None or t.begin != run[1]:
            close()
            run = [t.begin, t.begin, at + (t.begin - at) % align]
        dst[t.name] = run[2] + (t.begin - run[0])
        run[1] = t.end
        at = run[2] + (run[1] - run[0])
        views.append(t)
    close()
    return ranges, dst, at, views


__all__ = ["shard_bounds", "resolve_slices", "index", "sliced", "plan", "UnknownTensorError"]
