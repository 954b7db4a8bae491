#!/usr/bin/env bash
# Gathers, on this Debian machine, what tests/gpu and tests/bench/bench_gpu.py
# need on a GPU machine that has no package registry (the project's device
# machine): the shared libraries that mcfs, libmcfs, fusermount3, nginx and
# curl load (glibc's own excepted: the GPU machine's is newer) and those
# programs, into .carry/ (git-ignored). curl comes along because the bench's
# network rows run it with the same libcurl as mcfs (the GPU machine's own
# curl needs a newer libcurl than the one carried). Build first (cmake --build build);
# then carry `build` and `.carry` and run tests/gpu/device_run.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/fs/mcfs ] || { echo "build/fs/mcfs is missing: build first" >&2; exit 1; }
need=(build/fs/mcfs build/gpu/libmcfs.so.2 "$(command -v fusermount3)")
command -v nginx >/dev/null && need+=("$(command -v nginx)")
command -v curl >/dev/null && need+=("$(command -v curl)")
rm -rf .carry && mkdir -p .carry/bin .carry/lib
for exe in "${need[@]}"; do
	ldd "$exe" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -L "$lib" .carry/lib/; done
cp "$(command -v fusermount3)" .carry/bin/
command -v nginx >/dev/null && cp "$(command -v nginx)" .carry/bin/
command -v curl >/dev/null && cp "$(command -v curl)" .carry/bin/
du -sh .carry build | sed 's/^/bundle: /'
