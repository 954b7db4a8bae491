#!/usr/bin/env bash
# Runs on the GPU machine, as root, in a copy of the repo that carries `build`
# and `.carry` (tests/gpu/device_bundle.sh made them): the GPU tests, then,
# with BENCH=1, the GPU table (tests/bench/bench_gpu.py; BENCH_ARGS passes its
# options). Logs and the table go to $OUT when it is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PWD/.carry/bin:$PATH PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
uname -r
build/fs/mcfs --version 2>&1 | head -1
rc=0
if [ "${TESTS:-1}" = 1 ]; then
	# tests/test_safetensors_switch.py needs torch, which CI machines lack
	python3 -m pytest -ra -p no:cacheprovider tests/gpu tests/test_safetensors_switch.py "$@" \
		2>&1 | tee "$out/gpu-tests.log"
	rc=${PIPESTATUS[0]}
fi
if [ "${BENCH:-0}" = 1 ]; then
	# shellcheck disable=SC2086
	MCFS_BIN=$PWD/build/fs/mcfs python3 tests/bench/bench_gpu.py ${BENCH_ARGS:-} \
		--out "$out/gpu-table.md" 2>&1 | tee "$out/gpu-bench.log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit $rc
