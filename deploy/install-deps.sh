#!/usr/bin/env bash
# Installs what mcfs needs on Debian 12: `build` (build and run) or `test`
# (also the test servers and tools). Idempotent; runs apt only when a package
# is missing, so a warm machine starts in seconds. Then builds libfuse >= 3.17
# into /opt/mcfs/libfuse when the system's is older (build-libfuse.sh says
# why and how; MCFS_LIBFUSE_BUILD=no skips it and mcfs builds against 3.14).
set -euo pipefail
what=${1:-build}

build_pkgs=(build-essential cmake pkg-config fuse3 libfuse3-dev libcurl4-openssl-dev
	liburing-dev liblmdb-dev libinih-dev libxxhash-dev libcjson-dev libexpat1-dev
	libmicrohttpd-dev python3)
# What build-libfuse.sh needs: dpkg-source, meson and ninja to build
# Debian's fuse3 source; libnuma-dev for its io_uring code (and for the
# Requires.private of its fuse3.pc when mcfs is built against it).
[ "${MCFS_LIBFUSE_BUILD:-auto}" = no ] || build_pkgs+=(dpkg-dev meson ninja-build libnuma-dev)
test_pkgs=(python3-pip nginx-light curl attr lmdb-utils procps psmisc
	swift swift-proxy swift-account swift-container swift-object memcached
	systemd clang-format)

pkgs=("${build_pkgs[@]}")
[ "$what" = test ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$(dirname "$0")/build-libfuse.sh"

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
