"""Which tensors a load takes, and where each lands in the device buffer.

A rank of a tensor- or expert-parallel job loads its share of a shard:
`load_file(path, device, tensors=[...])` names tensors exactly or by glob
(fnmatch rules: `*`, `?`, `[seq]`, `[!seq]`, case-sensitive, no escapes). A
pattern that is a tensor's name selects that tensor even if it holds glob
characters; every pattern must select something, or the load raises
UnknownTensorError naming the patterns that did not.

Layout of the buffer (the C twin, gpu/libmcfs/select.c, computes the same):
the selected tensors in file order, packed, except that tensors adjacent in
the file stay adjacent and form one run, copied as one range. Each run starts
at the first buffer offset that is congruent to its data-section offset
modulo ALIGN, so every tensor keeps the alignment it has in a whole-file
load (where buffer offset == data-section offset): a run costs at most
ALIGN - 1 bytes of padding, and tensors stay views instead of copies. A
selection of every tensor is one run at offset 0, the whole-file load.

The ioctl carries at most LOAD_MAX_RANGES ranges (a fixed-size struct under
FUSE's 16383-byte limit), so a selection of more runs than that goes in
several calls, one batch of runs each (see batches()).
"""
import fnmatch
import re

# Bytes: the alignment a run keeps (cudaMalloc and PyTorch's caching allocator
# hand out 512-byte-aligned blocks, so an offset's residue mod 256 is the
# tensor's address alignment up to 256 bytes: more than any dtype needs).
ALIGN = 256

_GLOB_CHARS = re.compile(r"[*?\[]")


class UnknownTensorError(KeyError):
    """Some requested names or globs select no tensor of the file.

    `patterns` lists them. A KeyError, as a dict lookup of a missing name
    would raise, with a readable message."""

    def __init__(self, path, patterns):
        self.path = path
        self.patterns = list(patterns)
        super().__init__(self.__str__())

    def __str__(self):
        return "mcfs: %s has no tensor named or matching %s" % (
            self.path, ", ".join(repr(p) for p in self.patterns))


def _patterns(tensors):
    if isinstance(tensors, (str, bytes)):
        tensors = [tensors]
    out = []
    for p in tensors:
        if not isinstance(p, str):
            raise TypeError("tensors: expected names or glob patterns (str), got %r" % (p,))
        out.append(p)
    return out


def resolve(path, names, tensors):
    """The set of `names` that `tensors` (names or globs) select.

    Raises UnknownTensorError listing every pattern that selects nothing."""
    names = list(names)
    have = set(names)
    chosen, unknown = set(), []
    for p in _patterns(tensors):
        if p in have:
            chosen.add(p)
            continue
        if not _GLOB_CHARS.search(p):
            unknown.append(p)
            continue
        rx = re.compile(fnmatch.translate(p))
        hit = [n for n in names if rx.match(n)]
        if not hit:
            unknown.append(p)
        chosen.update(hit)
    if unknown:
        raise UnknownTensorError(path, unknown)
    return chosen


def plan(tensors, align=ALIGN):
    """Lays out `tensors` (header Tensors, sorted by offset) in one buffer.

    Returns (ranges, dst, size): ranges as (data-section offset, length,
    buffer offset) of each run, the buffer offset of each tensor by name,
    and the buffer bytes needed."""
    ranges, dst = [], {}
    at = 0          # buffer bytes used
    run = None      # [begin, end, dst] of the open run
    for t in tensors:
        if run is None or t.begin != run[1]:
            if run is not None and run[1] > run[0]:
                ranges.append((run[0], run[1] - run[0], run[2]))
            start = at + (t.begin - at) % align
            run = [t.begin, t.begin, start]
        dst[t.name] = run[2] + (t.begin - run[0])
        run[1] = t.end
        at = run[2] + (run[1] - run[0])
    if run is not None and run[1] > run[0]:
        ranges.append((run[0], run[1] - run[0], run[2]))
    return ranges, dst, at


def batches(ranges, per_call):
    """`ranges` cut into lists of at most `per_call`, one ioctl each."""
    return [ranges[i:i + per_call] for i in range(0, len(ranges), per_call)]
