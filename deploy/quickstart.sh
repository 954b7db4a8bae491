#!/usr/bin/env bash
# Installs what mcfs needs, builds it and its Debian package, installs that
# package (apt), and mounts a store.
#   ./deploy/quickstart.sh                      a demo store with a generated safetensors model
#   ./deploy/quickstart.sh SOURCE [MOUNTPOINT]  any store: /dir, http(s)://..., s3://...
# Run as root (or with sudo): it installs packages and mounts with FUSE.
#
# Environment:
#   MCFS_DEMO_DIR  where the demo's store, mount point and cache go (and the mount
#                  point when SOURCE comes without one); default: a new private
#                  directory, mktemp -d /tmp/mcfs-demo.XXXXXX
#   MCFS_BIN       an mcfs binary to use: then nothing is installed or built
#
# What it prints runs as printed, with what `install-deps.sh build` installs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

if [ -n "${MCFS_BIN:-}" ]; then
	MCFS=$MCFS_BIN
else
	./deploy/install-deps.sh build
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
	cmake --build build -j"$(nproc)" >/dev/null
	# The Debian package (cmake/Package.cmake), installed with apt: mcfs in
	# /usr/bin (on the PATH of shells, of systemd and of the /bin/sh that
	# mount.fuse3 runs it with), libmcfs, the headers, the man page, the unit
	# and /etc/mcfs/mcfs.conf. `apt remove mcfs` removes it; `apt purge mcfs`
	# its config and disk cache too. The Python package is pip's
	# (gpu/python/README.md).
	rm -rf build/package
	cpack --config build/CPackConfig.cmake -B build/package >/dev/null
	deb=$(ls build/package/mcfs_*_"$(dpkg --print-architecture)".deb)
	export DEBIAN_FRONTEND=noninteractive
	# --reinstall: a rebuilt package of the same version replaces the installed one
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get install -y -qq --reinstall "./$deb" >/dev/null
	MCFS=/usr/bin/mcfs
	# An earlier quick start installed with `cmake --install` into /usr/local,
	# which comes first in PATH (and in mount.fuse3's): say so, remove nothing.
	if [ -e /usr/local/bin/mcfs ]; then
		echo "quickstart: /usr/local/bin/mcfs (an earlier \`cmake --install\`) comes before" \
			"$MCFS in PATH: remove it, and that install's other files under /usr/local" >&2
	fi
fi

# A fixed name under /tmp could be made in advance by another user (as a link to
# somewhere root then writes): the default is a new directory only we can enter.
if [ -n "${MCFS_DEMO_DIR:-}" ]; then
	work=$MCFS_DEMO_DIR
	mkdir -p "$work"
	made_work=
else
	work=$(mktemp -d /tmp/mcfs-demo.XXXXXX)
	made_work=1
fi
mounted=
# a mount that failed leaves no directory of ours behind (mcfs said why)
cleanup() {
	if [ -n "$made_work" ] && [ -z "$mounted" ]; then
		rm -rf --one-file-system -- "$work"
	fi
}
trap cleanup EXIT

src=${1:-}
mnt=${2:-$work/mnt}
opts=()
demo=
if [ -z "$src" ]; then
	demo=1
	src=$work/store
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
	printf '{"model_type": "demo"}\n' >"$src/demo-model/config.json"
	# the demo's blocks stay with the demo, not in the system's /var/cache/mcfs
	mkdir -p "$work/cache"
	opts=(-o "cache_dir=$work/cache")
fi
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
	"$MCFS" umount "$mnt"
fi
"$MCFS" mount "$src" "$mnt" "${opts[@]}"
mounted=1

# Paths go into the printed commands quoted for the shell.
q() { printf '%q' "$1"; }
cache=/var/cache/mcfs
[ -n "$demo" ] && cache=$work/cache
echo
echo "mcfs is mounted: $src -> $mnt"
echo
echo "  # browse the store (read-only)"
echo "  ls -lR $(q "$mnt")"
echo "  # cache tiers and counters"
echo "  $(q "$MCFS") status $(q "$mnt")"
if [ -n "$demo" ]; then
	model=$mnt/demo-model/model.safetensors
	echo "  # read a file: its blocks are cached in RAM and in $cache (kept across remounts)"
	echo "  cmp $(q "$src/demo-model/model.safetensors") $(q "$model")"
	echo "  # the demo model's tensors, read through the mount by mcfs's Python client"
	echo "  PYTHONPATH=$(q "$repo/gpu/python") python3 -c 'import mcfs, sys; [print(t.name, t.dtype, t.shape) for t in mcfs.read_header(sys.argv[1]).tensors]' $(q "$model")"
	echo "  # unmount, and remove the demo's store and cache"
	if [ -n "$made_work" ]; then
		echo "  $(q "$MCFS") umount $(q "$mnt") && rm -rf $(q "$work")"
	else
		echo "  $(q "$MCFS") umount $(q "$mnt") && rm -rf $(q "$src") $(q "$work/cache")"
	fi
else
	echo "  # read a file: its blocks are cached in RAM and in $cache (kept across remounts)"
	echo "  cp $(q "$mnt")/<FILE> <DEST>"
	echo "  # unmount"
	if [ -z "${2:-}" ] && [ -n "$made_work" ]; then
		echo "  $(q "$MCFS") umount $(q "$mnt") && rm -r $(q "$work")"
	else
		echo "  $(q "$MCFS") umount $(q "$mnt")"
	fi
fi
