"""Checks shared by the http and s3 store suites: the same byte checks as the
posix store (whole files, random ranges across block boundaries, concurrent
readers, mmap), written once and run over each store's mount."""
import hashlib
import mmap
import os
import random
import threading

MiB = 1 << 20
BLOCK = 1 * MiB  # the suites mount with block_size=1M so that files span many blocks

# name -> size: empty, tiny, around one block boundary, several blocks
SIZES = {
    "empty.bin": 0,
    "one.bin": 1,
    "block-minus-1.bin": BLOCK - 1,
    "block.bin": BLOCK,
    "block-plus-1.bin": BLOCK + 1,
    "multi.bin": 5 * BLOCK + 12345,
}


def data_for(name, size):
    rng = random.Random(name)
    return rng.randbytes(size)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def check_whole_files(mnt_dir, files):
    for name, data in files.items():
        with open(os.path.join(mnt_dir, name), "rb") as f:
            got = f.read()
        assert len(got) == len(data), name
        assert sha(got) == sha(data), name


def check_random_ranges(path, data, n=60, seed=1):
    rng = random.Random(seed)
    with open(path, "rb", buffering=0) as f:
        for _ in range(n):
            if rng.random() < 0.4 and len(data) > BLOCK:
                # straddle a block boundary
                b = rng.randrange(1, len(data) // BLOCK + 1) * BLOCK
                off = max(0, b - rng.randrange(1, 5000))
            else:
                off = rng.randrange(0, max(1, len(data)))
            ln = rng.randrange(1, 3 * BLOCK)
            got = os.pread(f.fileno(), ln, off)
            assert got == data[off:off + ln], "pread(%d, %d)" % (off, ln)
        assert os.pread(f.fileno(), 10, len(data)) == b""
        assert os.pread(f.fileno(), 10, len(data) + 12345) == b""


def check_concurrent(path, data, threads=6):
    errors = []

    def reader(i):
        try:
            check_random_ranges(path, data, n=15, seed=100 + i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def check_mmap(path, data):
    with open(path, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert sha(m[:]) == sha(data)
            mid = len(data) // 2
            assert m[mid:mid + 4096] == data[mid:mid + 4096]

