#!/usr/bin/env bash
# Builds libfuse >= 3.17 into a private prefix when the system's is older
# (Debian 12 ships 3.14). install-deps.sh runs it; it can also run alone.
#
# Why: FUSE passthrough needs libfuse 3.17 (fuse_passthrough_open), requests
# over 1 MiB need 3.17.2 (max_pages from /proc/sys/fs/fuse/max_pages_limit),
# FUSE over io_uring needs 3.18. The kernels we run (6.18) have all three.
#
# What: libfuse 3.18.3, pinned by version and by the SHA-256 of its release
# tarball (the same file as Debian's fuse3_3.18.3.orig.tar.gz): every machine
# builds the same source. Before, Debian unstable's current fuse3 source was
# built, so two machines on one mcfs commit could get 3.17.2 and 3.18.3. The
# tarball comes from the first of $MCFS_LIBFUSE_URLS that answers with the
# pinned hash (libfuse's GitHub release, Debian's pool, snapshot.debian.org by
# its SHA-1), or from $MCFS_LIBFUSE_TARBALL, a local copy, for a machine
# without network. A file of another hash is refused, whoever served it.
# Built with meson/ninja, with liburing and libnuma so that io_uring is in
# (Debian's own binary package is built without them), and installed into
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
# Idempotent: a finished build leaves a stamp naming the version, the hash and
# the recipe; with it in place the script returns at once, without network.
# MCFS_LIBFUSE_REBUILD=1 builds again.
#
# Environment:
#   MCFS_LIBFUSE_PREFIX   where to install (default /opt/mcfs/libfuse)
#   MCFS_LIBFUSE_BUILD    auto (build when the system's libfuse3 < 3.17), yes, no
#   MCFS_LIBFUSE_TARBALL  a local fuse-3.18.3.tar.gz to build instead of downloading
#   MCFS_LIBFUSE_URLS     where to download it from, tried in order
set -euo pipefail

prefix=${MCFS_LIBFUSE_PREFIX:-/opt/mcfs/libfuse}
mode=${MCFS_LIBFUSE_BUILD:-auto}
version=3.18.3
sha256=bcd19582c5e30f7fe45dd86a5540e998590aa01903afc7ebcbeea6c8ac5421ee
sha1=c12352890442eafc751e892021f950d1f3726f62 # snapshot.debian.org names files by it
urls=${MCFS_LIBFUSE_URLS:-https://github.com/libfuse/libfuse/releases/download/fuse-$version/fuse-$version.tar.gz
http://deb.debian.org/debian/pool/main/f/fuse3/fuse3_$version.orig.tar.gz
https://snapshot.debian.org/file/$sha1}
# Bump when the build below changes, so that an existing prefix is rebuilt.
recipe=3
stamp=$prefix/share/mcfs-libfuse.stamp
want_stamp="fuse3 $version sha256 $sha256
recipe $recipe"

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
	[ "$(grep -v '^io_uring ' "$stamp")" = "$want_stamp" ] &&
	[ -f "$prefix/lib/pkgconfig/fuse3.pc" ]; then
	exit 0 # built before: the fast path
fi

for p in meson ninja pkg-config sha256sum tar; do
	command -v "$p" >/dev/null || {
		echo "build-libfuse: $p is missing (install-deps.sh installs meson, ninja-build)" >&2
		exit 1
	}
done

start=$(date +%s)
work=$(mktemp -d /var/tmp/mcfs-libfuse.XXXXXX)
trap 'rm -rf "$work"' EXIT
tarball=$work/fuse-$version.tar.gz
if [ -n "${MCFS_LIBFUSE_TARBALL:-}" ]; then
	cp -- "$MCFS_LIBFUSE_TARBALL" "$tarball"
	from=$MCFS_LIBFUSE_TARBALL
	echo "$sha256  $tarball" | sha256sum --quiet -c - >/dev/null 2>&1 || {
		echo "build-libfuse: $from is not fuse-$version.tar.gz (expected sha256 $sha256)" >&2
		exit 1
	}
else
	from=
	for u in $urls; do
		command -v curl >/dev/null || {
			echo "build-libfuse: curl is missing (or set MCFS_LIBFUSE_TARBALL)" >&2
			exit 1
		}
		if ! curl -fsSL --retry 2 --connect-timeout 20 -o "$tarball" "$u" 2>"$work/curl.err"; then
			echo "build-libfuse: $u: $(tail -1 "$work/curl.err")" >&2
			continue
		fi
		if ! echo "$sha256  $tarball" | sha256sum --quiet -c - >/dev/null 2>&1; then
			echo "build-libfuse: $u: not the pinned fuse-$version.tar.gz (sha256" \
				"$(sha256sum "$tarball" | cut -d' ' -f1), expected $sha256): refused" >&2
			continue
		fi
		from=$u
		break
	done
	if [ -z "$from" ]; then
		echo "build-libfuse: could not fetch fuse-$version.tar.gz (sha256 $sha256) from any of:" \
			$urls "(set MCFS_LIBFUSE_TARBALL to a local copy)" >&2
		exit 1
	fi
fi
mkdir "$work/src"
tar -xzf "$tarball" -C "$work/src" --strip-components=1
# Debian's hardening flags, as its own package build uses them.
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
uring_opt=() # 3.18 has FUSE over io_uring (with liburing and libnuma found), 3.17 not
grep -q "'enable-io-uring'" "$work/src/meson_options.txt" && uring_opt=(-Denable-io-uring=true)
# fuse_session_custom_io(): mcfs wraps /dev/fuse's own reads and writes with
# it, to record the connection's INIT and replay it to a daemon that resumes
# the connection (fs/handover.h). Off by default since 3.18.3 because a peer
# other than the kernel could forge requests; mcfs's peer is the kernel.
custom_opt=()
grep -q "'enable-custom-io'" "$work/src/meson_options.txt" && custom_opt=(-Denable-custom-io=true)
meson setup "$work/build" "$work/src" --prefix="$prefix" --libdir=lib --buildtype=plain \
	-Ddefault_library=shared -Dutils=false -Dexamples=false -Dtests=false \
	"${uring_opt[@]}" "${custom_opt[@]}" >"$work/meson.log" 2>&1 || {
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
printf 'fuse3 %s sha256 %s\nio_uring %s\nrecipe %s\n' "$version" "$sha256" "$uring" \
	"$recipe" >"$work/stage$stamp"

# Swap the new tree in whole: a daemon running from the old one keeps its
# mapped library (the old files stay until it exits).
$SUDO mkdir -p "$(dirname "$prefix")"
$SUDO rm -rf "$prefix.old"
[ -e "$prefix" ] && $SUDO mv "$prefix" "$prefix.old"
$SUDO cp -a "$work/stage$prefix" "$prefix"
$SUDO rm -rf "$prefix.old"
echo "build-libfuse: libfuse $version (from $from, io_uring $uring) in $prefix," \
	"$(($(date +%s) - start)) s"
