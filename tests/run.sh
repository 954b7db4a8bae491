#!/usr/bin/env bash
# The test command: installs what the tests need, builds mcfs (warnings are
# errors), runs the C unit tests (ctest) and the end-to-end tests (pytest,
# real FUSE mounts and loopback servers). Must run as root (FUSE mounts,
# drop_caches, test servers). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh test
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCFS_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
(cd build && ctest --output-on-failure)
python3 -m pytest -ra tests "$@"
