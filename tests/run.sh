#!/usr/bin/env bash
# The test command: installs what the tests need, builds mcfs (warnings are
# errors, in the default and in a Release build), checks formatting, runs the
# C unit tests (ctest) and the end-to-end tests (pytest: real FUSE mounts and
# loopback servers). The main build uses the libfuse that install-deps.sh
# built (/opt/mcfs/libfuse, 3.18 on Debian 12); a second build against the
# system's libfuse (3.14) runs both suites again, so that the build without
# the new FUSE features keeps working. Then, in CI (CI=true) or with
# MCFS_SANITIZERS=1, the same suites again against an ASan+UBSan build and a
# TSan build of the daemon. Must run as root (FUSE mounts, drop_caches,
# test servers). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh test

if git rev-parse --git-dir >/dev/null 2>&1; then
	echo "== clang-format (kernel style, .clang-format)"
	git ls-files -z '*.c' '*.h' | xargs -0 clang-format --dry-run --Werror
fi

echo "== build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCFS_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
# A Release build (-O3) sees warnings the default one does not (format-truncation):
# build it with -Werror too, so that no warning reaches a user's build.
echo "== release build (-Werror)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DMCFS_WERROR=ON >/dev/null
cmake --build build-release -j"$(nproc)"
(cd build && ctest --output-on-failure)
python3 -m pytest -ra tests "$@"

sysfuse=$(pkg-config --modversion fuse3)
if ! build/fs/mcfs --version | grep -q "^libfuse $sysfuse "; then
	echo "== build against the system's libfuse $sysfuse"
	cmake -S . -B build-sysfuse -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCFS_WERROR=ON \
		-DMCFS_LIBFUSE_PREFIX=system >/dev/null
	cmake --build build-sysfuse -j"$(nproc)"
	(cd build-sysfuse && ctest --output-on-failure)
	MCFS_BIN=$PWD/build-sysfuse/fs/mcfs python3 -m pytest -q -ra -p no:cacheprovider tests "$@"
fi

if [ "${CI:-}" = true ] || [ "${MCFS_SANITIZERS:-0}" = 1 ]; then
	# CUDA's static runtime and the sanitizers don't mix; the GPU path is
	# covered by the plain build (and tests/gpu on a GPU machine).
	for san in address,undefined thread; do
		dir=build-san-${san%%,*}
		echo "== sanitizer build: $san"
		cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCFS_WERROR=ON \
			-DMCFS_SANITIZE="$san" -DMCFS_CUDA=OFF >/dev/null
		cmake --build "$dir" -j"$(nproc)"
		(cd "$dir" && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure)
		MCFS_BIN=$PWD/$dir/fs/mcfs UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
			TSAN_OPTIONS="halt_on_error=0 exitcode=66" \
			python3 -m pytest -q -ra -p no:cacheprovider tests "$@"
	done
fi
