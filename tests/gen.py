"""Generators of store content for the end-to-end tests, and small I/O helpers.

Everything here is deterministic: the same seed gives the same bytes, so a
failure can be reproduced outside pytest (`python3 -c 'import gen; ...'`).
Nothing here mounts anything; see conftest.py for that.
"""
import hashlib
import mmap
import os
import stat

import numpy as np

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


# ---- bytes and files ---------------------------------------------------------

def rand_bytes(n, seed):
    """n pseudo-random bytes from `seed` (numpy PCG64: fast, reproducible)."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def write_random(path, size, seed=0):
    """Writes `size` random bytes to `path` (creating parents); returns the bytes."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    data = rand_bytes(size, seed)
    with open(path, "wb") as f:
        f.write(data)
    return data


def write_sparse(path, size, islands):
    """A sparse file of `size` bytes: holes everywhere but at `islands`.

    islands: list of (offset, seed, length); each writes random bytes there
    (clipped at EOF). Returns {offset: bytes} of what was written.
    """
    written = {}
    with open(path, "wb") as f:
        f.truncate(size)
        for off, seed, length in islands:
            length = min(length, size - off)
            data = rand_bytes(length, seed)
            f.seek(off)
            f.write(data)
            written[off] = data
    return written


def sha256_file(path, chunk=4 * MiB):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


# ---- reads that bypass the page cache ------------------------------------------

def pread_direct(path, off, n):
    """Reads [off, off+n) of `path` with O_DIRECT, so the request reaches the daemon.

    The buffer is page aligned (an anonymous mmap), as O_DIRECT wants.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return pread_direct_fd(fd, off, n)
    finally:
        os.close(fd)


def pread_direct_fd(fd, off, n):
    buf = mmap.mmap(-1, max(n, 1))
    try:
        got = os.preadv(fd, [buf], off)
        return bytes(buf[:got])
    finally:
        buf.close()


def pread(path, off, n):
    with open(path, "rb", buffering=0) as f:
        return os.pread(f.fileno(), n, off)


def drop_caches():
    """Drops the kernel's clean page cache (all files), so reads go to the daemon."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def cached_bytes(path):
    """user.mcfs.cached of a file in the mount: bytes of it in the RAM tier."""
    return int(os.getxattr(path, "user.mcfs.cached").decode().strip().rstrip("\0"))


# ---- trees -----------------------------------------------------------------------

# Names the tree uses: spaces, non-ASCII (NFC and NFD forms differ as bytes),
# punctuation, a leading dot, and one name that is not valid UTF-8.
ODD_NAMES = [
    "with space.bin",
    " leading space",
    "trailing space ",
    "café.txt",                # NFC é
    "cafe\u0301.txt",          # NFD: e + combining accent, a different name
    "日本語のファイル.safetensors",
    "emoji 🙂 file",
    "semi;colon,comma=eq&amp'quote\"",
    "-dash-first",
    ".hidden",
    "#hash",
    "a" * 200,
]
BAD_UTF8 = os.fsdecode(b"latin1-\xe9\xff.bin")  # surrogate-escaped bytes


def make_tree(root, seed=1):
    """Builds a tree under `root` that exercises names, modes, mtimes and symlinks.

    Returns a list of the relative paths made (files, dirs, links).
    """
    made = []

    def f(rel, size, mode=0o644, mtime_ns=None, s=None):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(rand_bytes(size, seed if s is None else s))
        os.chmod(p, mode)
        if mtime_ns is not None:
            os.utime(p, ns=(mtime_ns, mtime_ns))
        made.append(rel)

    f("empty", 0)
    f("one-byte", 1, s=7)
    f("small.txt", 4096 + 3, s=2)
    f("exec.sh", 100, mode=0o755, s=3)
    f("readonly", 10, mode=0o444, s=4)
    f("private", 10, mode=0o600, s=5)
    f("odd mode", 10, mode=0o751, s=6)
    f("old", 5, mtime_ns=0, s=8)
    f("precise-mtime", 5, mtime_ns=1_600_000_000_123_456_789, s=9)
    f("future", 5, mtime_ns=4_102_444_800_000_000_001, s=10)  # 2100-01-01
    for i, name in enumerate(ODD_NAMES):
        f(name, 33 + i, s=100 + i)
    f(BAD_UTF8, 17, s=99)
    f(os.path.join("dir with space", "nested", "deeper", "leaf.bin"), 1000, s=11)
    f(os.path.join("dir with space", "nested", "ü-file"), 12, s=12)
    f(os.path.join("ディレクトリ", "ファイル"), 13, s=13)
    f(os.path.join("a", "b", "c", "d", "e", "f", "g", "deep.bin"), 14, s=14)
    f("n" * 255, 3, s=15)                               # NAME_MAX
    f("ü" * 127 + "x", 3, s=16)                         # 255 bytes of UTF-8
    os.link(os.path.join(root, "small.txt"), os.path.join(root, "hardlink to small"))
    made.append("hardlink to small")
    os.makedirs(os.path.join(root, "empty dir"))
    made.append("empty dir")
    os.makedirs(os.path.join(root, "private dir"))
    os.chmod(os.path.join(root, "private dir"), 0o700)
    made.append("private dir")
    # a directory with many entries, so that readdir needs several calls
    for i in range(300):
        f(os.path.join("many", "entry-%04d-%s" % (i, "x" * (i % 40))), i % 5, s=1000 + i)

    links = {
        "link-to-small": "small.txt",
        "link to dir": "dir with space",
        "nested-rel-link": "dir with space/nested/ü-file",
        os.path.join("dir with space", "up-link"): "../small.txt",
        "dangling": "no/such/target",
        "absolute-outside": "/etc/hostname",
        "link-é": "café.txt",
        "link-loop": "link-loop",
    }
    for rel, target in links.items():
        os.symlink(target, os.path.join(root, rel))
        made.append(rel)

    # directory mtimes last, after their contents stopped changing
    os.utime(os.path.join(root, "dir with space", "nested"),
             ns=(1_500_000_000_987_654_321,) * 2)
    os.utime(os.path.join(root, "empty dir"), ns=(1_234_567_890_000_000_000,) * 2)
    return made


def tree_entries(root):
    """{relative path: (type, mode, size, mtime_ns, link target)} for a whole tree.

    Uses lstat (a symlink is reported as itself). Size is left out for
    directories, whose st_size is filesystem-specific.
    """
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            target = os.readlink(p) if stat.S_ISLNK(st.st_mode) else None
            size = None if stat.S_ISDIR(st.st_mode) else st.st_size
            out[rel] = (kind, stat.S_IMODE(st.st_mode), size, st.st_mtime_ns, target)
    return out


# ---- safetensors -------------------------------------------------------------------

def make_safetensors(path, seed=0, big=False):
    """Writes a safetensors file with tensors of several dtypes and shapes.

    Uses safetensors.numpy, so torch is not needed. big=True adds tensors of a
    few MiB so that the file spans many 1 MiB blocks. Returns the dict saved.
    """
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    t = {
        "embed.weight": rng.standard_normal((257, 129), dtype=np.float32),
        "layer.0.attn.q": rng.standard_normal((64, 64)).astype(np.float16),
        "layer.0.attn.bias": rng.standard_normal((7,)).astype(np.float64),
        "layer.0.ids": rng.integers(-2**40, 2**40, (33, 3), dtype=np.int64),
        "layer.0.mask": rng.integers(0, 2, (5, 5, 5)).astype(np.bool_),
        "u8": rng.integers(0, 256, (1001,), dtype=np.uint8),
        "i16": rng.integers(-30000, 30000, (17, 19), dtype=np.int16),
        "i32": rng.integers(-2**31, 2**31 - 1, (3, 3, 3, 3), dtype=np.int32),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    if big:
        t["big.0"] = rng.standard_normal((1024, 1536), dtype=np.float32)  # 6 MiB
        t["big.1"] = rng.standard_normal((3, 1000, 777)).astype(np.float16)  # ~4.4 MiB
    save_file(t, path, metadata={"format": "np", "seed": str(seed)})
    return t


def rss_kib(pid):
    """VmRSS of process `pid` in KiB (0 if /proc does not say)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    """True if process `pid` runs under ASan/TSan (its memory use is not comparable)."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan" in maps or "libtsan" in maps
