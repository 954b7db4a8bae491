#!/usr/bin/env bash
# Installs what mcfs needs on Debian 12: `build` (build and run) or `test`
# (also the test servers and tools). Idempotent; runs apt only when a package
# is missing, so a warm machine starts in seconds. Then builds libfuse 3.18.3
# (pinned by version and hash) into /opt/mcfs/libfuse when the system's is
# older than 3.17 (build-libfuse.sh says why and how; MCFS_LIBFUSE_BUILD=no
# skips it and mcfs builds against 3.14),
# and fetches the CUDA 12 runtime for the GPU fast path (below; MCFS_CUDA=OFF
# skips it).
set -euo pipefail
what=${1:-build}

# dpkg-dev: dpkg-shlibdeps, which computes the .deb's dependencies (cpack);
# scdoc: the man page (docs/mcfs.8.scd), built with mcfs.
build_pkgs=(build-essential cmake pkg-config fuse3 libfuse3-dev libcurl4-openssl-dev
	liburing-dev liblmdb-dev libinih-dev libxxhash-dev libcjson-dev libexpat1-dev libssl-dev
	libmicrohttpd-dev libsystemd-dev python3 python3-pip dpkg-dev scdoc)
# What build-libfuse.sh needs: curl to fetch the pinned libfuse tarball,
# meson and ninja to build it, libnuma-dev for its io_uring code (and for the
# Requires.private of its fuse3.pc when mcfs is built against it).
[ "${MCFS_LIBFUSE_BUILD:-auto}" = no ] || build_pkgs+=(curl ca-certificates meson ninja-build libnuma-dev)
# prometheus: its promtool checks deploy/prometheus and deploy/grafana
# (tests/test_alert_rules.py); the server itself is not run. python3-venv:
# tests/test_packages.py installs the Python package into a venv with pip;
# man-db: it renders the man page with man -l. systemd-container, debootstrap:
# tests/test_packages.py boots a Debian under systemd-nspawn and runs the
# packaged unit there, under a real systemd.
test_pkgs=(python3-pip python3-venv man-db nginx-light curl attr lmdb-utils procps psmisc
	swift swift-proxy swift-account swift-container swift-object memcached
	systemd systemd-container debootstrap clang-format prometheus)

pkgs=("${build_pkgs[@]}")
[ "$what" = test ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$(dirname "$0")/build-libfuse.sh"

# The CUDA 12 runtime for the GPU fast path: its headers and static cudart
# from NVIDIA's wheels on PyPI (nvidia-cuda-runtime-cu12; the crt/ headers that
# cuda_runtime_api.h includes come with nvidia-cuda-nvcc-cu12), unpacked into
# a private prefix that cmake/McfsCuda.cmake reads (MCFS_CUDA_ROOT). pip only
# downloads, pinned by version and hash; nothing is installed into Python.
# CUDA 12 because its runtime runs on drivers from 525 on (CUDA 13: 580), so
# a CUDA 13 toolkit on the machine is left alone. Linked statically, so the
# daemon needs none of it at run time.
cuda_root=${MCFS_CUDA_ROOT:-/opt/mcfs/cuda12}
cuda_pins="nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86"
fetch_cuda12() {
	local tmp rc=0
	tmp=$(mktemp -d)
	# x86_64 and aarch64 wheels of each
	cat >"$tmp/req.txt" <<'REQ'
nvidia-cuda-runtime-cu12==12.9.79 \
    --hash=sha256:25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3 \
    --hash=sha256:83469a846206f2a733db0c42e223589ab62fd2fabac4432d2f8802de4bded0a4
nvidia-cuda-nvcc-cu12==12.9.86 \
    --hash=sha256:5d6a0d32fdc7ea39917c20065614ae93add6f577d840233237ff08e9a38f58f0 \
    --hash=sha256:44e1eca4d08926193a558d2434b1bf83d57b4d5743e0c431c0c83d51da1df62b
REQ
	if python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
		-r "$tmp/req.txt" -d "$tmp/whl"; then
		python3 - "$tmp/whl" "$tmp/root" <<'PY' || rc=$?
import glob, os, shutil, sys, zipfile
whl, root = sys.argv[1], sys.argv[2]
want = {  # wheel -> {member prefix: destination under root}
    "nvidia_cuda_runtime_cu12": {"nvidia/cuda_runtime/include/": "include/",
                                 "nvidia/cuda_runtime/lib/libcudart_static.a": "lib/libcudart_static.a"},
    "nvidia_cuda_nvcc_cu12": {"nvidia/cuda_nvcc/include/crt/": "include/crt/"},
}
for name, members in want.items():
    (path,) = glob.glob(os.path.join(whl, name + "-*.whl"))
    with zipfile.ZipFile(path) as z:
        for m in z.namelist():
            if m.endswith("/License.txt"):
                dest = "share/%s-License.txt" % name
            else:
                dest = next((d + m[len(p):] for p, d in members.items() if m.startswith(p)), None)
            if dest is None or m.endswith("/"):
                continue
            dest = os.path.join(root, dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(m) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
PY
	else
		rc=1
	fi
	if [ $rc = 0 ]; then
		echo "$cuda_pins" >"$tmp/root/.mcfs-pins"
		$SUDO mkdir -p "$(dirname "$cuda_root")"
		$SUDO rm -rf "$cuda_root.new" "$cuda_root.old"
		$SUDO cp -r "$tmp/root" "$cuda_root.new"
		[ ! -e "$cuda_root" ] || $SUDO mv "$cuda_root" "$cuda_root.old"
		$SUDO mv "$cuda_root.new" "$cuda_root"
		$SUDO rm -rf "$cuda_root.old"
	fi
	rm -rf "$tmp"
	return $rc
}
if [ "${MCFS_CUDA:-ON}" != OFF ] &&
	[ "$(cat "$cuda_root/.mcfs-pins" 2>/dev/null)" != "$cuda_pins" ]; then
	if ! fetch_cuda12; then
		echo "install-deps: could not fetch the CUDA 12 runtime ($cuda_pins) into" \
			"$cuda_root: mcfs will build without the GPU fast path" \
			"(mcfs --version says why)" >&2
	fi
fi

if [ "$what" = test ]; then
	py=python3
	need=$($py - <<'PY'
import importlib.util as u
mods = {"pytest": "pytest", "safetensors": "safetensors", "numpy": "numpy", "boto3": "boto3",
        "yaml": "pyyaml", "kubernetes_validate": "kubernetes-validate",
        "prometheus_client": "prometheus-client"}
print(" ".join(p for m, p in mods.items() if u.find_spec(m) is None))
PY
)
	if [ -n "$need" ]; then
		$py -m pip install -q $need 2>/dev/null || $py -m pip install -q --break-system-packages $need
	fi
fi
