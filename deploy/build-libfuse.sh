#!/usr/bin/env bash
# Builds libfuse >= 3.17 into a private prefix when the system's is older
# (Debian 12 ships 3.14). install-deps.sh runs it; it can also run alone.
#
# Why: FUSE passthrough needs libfuse 3.17 (fuse_passthrough_open), requests
# over 1 MiB need 3.17.2 (max_pages from /proc/sys/fs/fuse/max_pages_limit),
# FUSE over io_uring needs 3.18. The kernels we run (6.18) have all three.
#
# What: Debian's own fuse3 source package, 3.18.x from unstable or else
# 3.17.x from trixie, fetched with apt through a private sources list, lists
# directory and cache (nothing of the machine's apt configuration changes;
# apt checks the archive's signature on the index and the index's hashes of
# the .dsc and tarballs, and dpkg-source checks the tarballs against the
# .dsc). Built with meson/ninja, with liburing and libnuma so that io_uring is
# in (Debian's own binary package is built without them), and installed into
# $MCFS_LIBFUSE_PREFIX (/opt/mcfs/libfuse): the library and its headers only.
#
# Not built: fusermount3 and mount.fuse3. The system's libfuse3-3 and
# /usr/bin/fusermount3 (3.14, setuid) stay as they are. The new library
# spawns fusermount3 only when the daemon is not root (a root daemon mounts
# with mount(2) itself): it tries $prefix/bin first, finds nothing there, and
# runs the one in PATH, /usr/bin/fusermount3. The protocol between them
# (_FUSE_COMMFD, the /dev/fuse descriptor passed back over a socket) is the
# same in 3.14 and 3.18, and tests/test_libfuse.py mounts as a user that way.
#
# Idempotent: a finished build leaves a stamp; with it in place (and the same
# recipe) the script returns at once, without network. MCFS_LIBFUSE_REBUILD=1
# builds again.
#
# Environment:
#   MCFS_LIBFUSE_PREFIX   where to install (default /opt/mcfs/libfuse)
#   MCFS_LIBFUSE_BUILD    auto (build when the system's libfuse3 < 3.17), yes, no
#   MCFS_LIBFUSE_SUITES   Debian suites to try, in order (default "sid trixie")
#   MCFS_DEBIAN_MIRROR    default http://deb.debian.org/debian
set -euo pipefail

prefix=${MCFS_LIBFUSE_PREFIX:-/opt/mcfs/libfuse}
mode=${MCFS_LIBFUSE_BUILD:-auto}
suites=${MCFS_LIBFUSE_SUITES:-sid trixie}
mirror=${MCFS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
min_version=3.17.2 # the first without the max_pages buffer races
# Bump when the build below changes, so that an existing prefix is rebuilt.
recipe=1
stamp=$prefix/share/mcfs-libfuse.stamp

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

case $mode in
auto | yes | no) ;;
*)
	echo "build-libfuse: MCFS_LIBFUSE_BUILD=$mode: expected auto, yes or no" >&2
	exit 2
	;;
esac
[ "$mode" = no ] && exit 0

if [ "$mode" = auto ]; then
	sys=$(pkg-config --modversion fuse3 2>/dev/null || echo 0)
	if dpkg --compare-versions "$sys" ge 3.17; then
		echo "build-libfuse: the system's libfuse $sys is new enough; nothing to build"
		exit 0
	fi
fi
if [ -z "${MCFS_LIBFUSE_REBUILD:-}" ] && [ -f "$stamp" ] &&
	grep -qx "recipe $recipe" "$stamp" && [ -f "$prefix/lib/pkgconfig/fuse3.pc" ]; then
	exit 0 # built before: the fast path
fi

for p in dpkg-source meson ninja pkg-config; do
	command -v "$p" >/dev/null || {
		echo "build-libfuse: $p is missing (install-deps.sh installs dpkg-dev, meson, ninja-build)" >&2
		exit 1
	}
done

start=$(date +%s)
work=$(mktemp -d /var/tmp/mcfs-libfuse.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work" # apt's download user (_apt) must reach its directories
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/dl"
for s in $suites; do
	echo "deb-src [signed-by=$keyring] $mirror $s main"
done >"$work/apt/sources.list"
# apt downloads as the unprivileged _apt user where it exists
if id _apt >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	chown _apt "$work/dl"
fi
apt_private=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
	-o "Acquire::Languages=none")

# A suite whose index fails its signature check is left out by apt (no lists
# file), so a failed update of one suite is not fatal here: the source step
# below only finds packages in indexes that were verified.
if ! apt-get "${apt_private[@]}" update -qq 2>"$work/update.err"; then
	echo "build-libfuse: apt-get update of the fuse3 sources reported:" >&2
	cat "$work/update.err" >&2
fi

dsc=
for s in $suites; do
	rm -f "$work"/dl/*
	if ! (cd "$work/dl" && apt-get "${apt_private[@]}" source -qq --download-only "fuse3/$s" \
		>"$work/source.log" 2>&1); then
		echo "build-libfuse: no fuse3 source from $s:" >&2
		sed 's/^/  /' "$work/source.log" >&2
		continue
	fi
	dsc=$(ls "$work"/dl/fuse3_*.dsc)
	version=$(sed -n 's/^Version: //p' "$dsc")
	if dpkg --compare-versions "$version" lt "$min_version"; then
		echo "build-libfuse: $s has fuse3 $version, older than $min_version" >&2
		dsc=
		continue
	fi
	suite=$s
	break
done
if [ -z "$dsc" ]; then
	echo "build-libfuse: found no fuse3 >= $min_version source in: $suites ($mirror)" >&2
	exit 1
fi

# The .dsc's own signature (the uploader's key, in debian-keyring, which is not
# installed) cannot be checked here and dpkg-source says so; the archive's
# signature over the index that holds the .dsc's hash was checked by apt.
dpkg-source --require-strong-checksums -x "$dsc" "$work/src" >"$work/dpkg-source.log" 2>&1 || {
	cat "$work/dpkg-source.log" >&2
	exit 1
}
# Debian's hardening flags, as its own package build uses them.
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
uring_opt=() # 3.18 has FUSE over io_uring (with liburing and libnuma found), 3.17 not
grep -q "'enable-io-uring'" "$work/src/meson_options.txt" && uring_opt=(-Denable-io-uring=true)
meson setup "$work/build" "$work/src" --prefix="$prefix" --libdir=lib --buildtype=plain \
	-Ddefault_library=shared -Dutils=false -Dexamples=false -Dtests=false \
	"${uring_opt[@]}" >"$work/meson.log" 2>&1 || {
	cat "$work/meson.log" >&2
	exit 1
}
ninja -C "$work/build" >>"$work/meson.log" 2>&1 || {
	tail -50 "$work/meson.log" >&2
	exit 1
}
DESTDIR="$work/stage" ninja -C "$work/build" install >>"$work/meson.log" 2>&1
uring=no
grep -q '^#define HAVE_URING' "$work/build/fuse_config.h" && uring=yes
mkdir -p "$work/stage$prefix/share"
printf 'fuse3 %s from %s (%s)\nio_uring %s\nrecipe %s\n' "$version" "$suite" "$mirror" \
	"$uring" "$recipe" >"$work/stage$stamp"

# Swap the new tree in whole: a daemon running from the old one keeps its
# mapped library (the old files stay until it exits).
$SUDO mkdir -p "$(dirname "$prefix")"
$SUDO rm -rf "$prefix.old"
[ -e "$prefix" ] && $SUDO mv "$prefix" "$prefix.old"
$SUDO cp -a "$work/stage$prefix" "$prefix"
$SUDO rm -rf "$prefix.old"
echo "build-libfuse: libfuse $version (Debian $suite, io_uring $uring) in $prefix," \
	"$(($(date +%s) - start)) s"
