#!/usr/bin/env bash
# Installs what mcfs needs, builds it, and mounts a store.
#   ./deploy/quickstart.sh                      a demo store with a generated safetensors model
#   ./deploy/quickstart.sh SOURCE [MOUNTPOINT]  any store: /dir, http(s)://..., s3://...
# Run as root (or with sudo): it installs packages and mounts with FUSE.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
# Under /usr/local: mcfs in bin/, on the PATH of shells, of systemd (fstab)
# and of the /bin/sh that mount.fuse3 runs it with (`mount -t fuse.mcfs`),
# libmcfs, and the Python package where the system's python3 finds it.
cmake --install build --prefix /usr/local >/dev/null
ldconfig
MCFS=/usr/local/bin/mcfs

demo=/tmp/mcfs-demo
src=${1:-}
mnt=${2:-$demo/mnt}
if [ -z "$src" ]; then
	src=$demo/store
	mkdir -p "$src/demo-model"
	# A small model in the safetensors format, written with the standard library only.
	python3 - "$src/demo-model/model.safetensors" <<'PY'
import json, os, struct, sys
path = sys.argv[1]
rng = os.urandom
tensors = {"embed.weight": ("BF16", [4096, 512]), "layer0.weight": ("F32", [512, 512]),
           "layer0.bias": ("F32", [512]), "head.weight": ("F16", [512, 1000])}
size = {"BF16": 2, "F16": 2, "F32": 4}
header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
for name, (dt, shape) in tensors.items():
    n = size[dt]
    for d in shape:
        n *= d
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
    blobs.append(rng(n))
    off += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
PY
	printf '{"model_type": "demo"}\n' > "$src/demo-model/config.json"
fi
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
	"$MCFS" umount "$mnt"
fi
"$MCFS" mount "$src" "$mnt"
cat <<TXT

mcfs is mounted: $src -> $mnt
  ls -l $mnt                       browse the store (read-only)
  cp $mnt/<file> /tmp/             read any file; blocks are cached in RAM and in
                                   /var/cache/mcfs (kept across remounts)
  getfattr -n user.mcfs.stats $mnt cache counters
  python3 -c "from safetensors import safe_open; print(safe_open('$mnt/demo-model/model.safetensors', 'np').keys())"
Unmount with:
  $MCFS umount $mnt
TXT
