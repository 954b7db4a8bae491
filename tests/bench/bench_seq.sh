#!/usr/bin/env bash
# Sequential read of a 2 GiB file: `dd bs=1M` through mcfs (posix store) beside
# dd of the same file read directly, all in one run, median of RUNS runs.
# Follows ../shared/notes/benchmarking.md: RAM pretouched right before each timed
# run, caches dropped where a run must be cold, medians, one table.
#   tests/bench/bench_seq.sh [SIZE_MiB=2048] [RUNS=5]
# mcfs runs RAM only (-o cache_dir=): each mount starts cold, with no disk tier.
# The splice rows read the same way from a mount with -o splice=true (FUSE
# replies spliced through a pipe instead of written), to compare the two.
# Needs root (drop_caches, FUSE). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
MCFS=${MCFS_BIN:-$PWD/build/fs/mcfs}
size=${1:-2048}
runs=${2:-5}
work=$(mktemp -d /var/tmp/mcfs-bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$work/src" "$mnt"
cleanup() {
	mountpoint -q "$mnt" && "$MCFS" umount "$mnt" || true
	rm -rf "$work"
}
trap cleanup EXIT

f=$work/src/model.bin
dd if=/dev/urandom of="$f" bs=1M count="$size" status=none
sync

# Touch and free as much RAM as the timed read will newly use (its page cache),
# right before it: after a mount's prefault, which takes memory of its own.
pt_mib=$((size + 1024 > 3072 ? size + 1024 : 3072))
pretouch() { dd if=/dev/zero of=/dev/shm/mcfs-pretouch bs=1M count=$pt_mib status=none; rm -f /dev/shm/mcfs-pretouch; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# MB/s of one dd, from dd's own byte count and time
ddrate() { dd if="$1" of=/dev/null bs=1M "${@:2}" 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") t = $(i-1); printf "%.0f\n", $1 / t / 1e6 }'; }
# mcfs faults its RAM tier in after mounting (ram_prefault), as a node would
# long before its first read: time reads, not that
prefaulted() {
	while [ "$(getfattr --absolute-names --only-values -n user.mcfs.stats "$mnt" | awk '$1 == "ram_prefault" { print $2 }')" = 1 ]; do
		sleep 0.05
	done
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

declare -A r
for i in $(seq "$runs"); do
	drop; pretouch
	r[direct_cold]+="$(ddrate "$f") "
	pretouch
	r[direct_warm]+="$(ddrate "$f") "

	# first read through a fresh mount, store file cold on disk
	drop
	"$MCFS" mount "$work/src" "$mnt" -o cache_dir=
	prefaulted; pretouch
	r[mcfs_first_cold]+="$(ddrate "$mnt/model.bin") "
	"$MCFS" umount "$mnt"

	# first read through a fresh mount, store file in page cache (FUSE + cache path only)
	cat "$f" > /dev/null
	"$MCFS" mount "$work/src" "$mnt" -o cache_dir=
	prefaulted; pretouch
	r[mcfs_first_warm]+="$(ddrate "$mnt/model.bin") "
	pretouch
	r[mcfs_reread]+="$(ddrate "$mnt/model.bin") "
	# page cache dropped: served by the RAM tier through FUSE
	drop; pretouch
	r[mcfs_ramtier]+="$(ddrate "$mnt/model.bin") "
	"$MCFS" umount "$mnt"

	# the same two reads with FUSE replies spliced
	cat "$f" > /dev/null
	"$MCFS" mount "$work/src" "$mnt" -o cache_dir=,splice=true
	prefaulted; pretouch
	r[splice_first_warm]+="$(ddrate "$mnt/model.bin") "
	drop; pretouch
	r[splice_ramtier]+="$(ddrate "$mnt/model.bin") "
	"$MCFS" umount "$mnt"
done

m() { echo "${r[$1]}" | tr ' ' '\n' | grep . | median; }
dc=$(m direct_cold); dw=$(m direct_warm)
echo
echo "Sequential dd bs=1M of a ${size} MiB file, median of $runs runs, MB/s ($(nproc) CPUs, $(uname -r))"
echo
echo "| path | MB/s | vs direct (same cache state) |"
echo "|---|---|---|"
printf "| direct read, disk cold | %s | 1.00 |\n" "$dc"
printf "| direct read, page cache | %s | 1.00 |\n" "$dw"
printf "| mcfs first read, store file cold on disk | %s | %.2f |\n" "$(m mcfs_first_cold)" "$(echo "$(m mcfs_first_cold) / $dc" | bc -l)"
printf "| mcfs first read, store file in page cache | %s | %.2f |\n" "$(m mcfs_first_warm)" "$(echo "$(m mcfs_first_warm) / $dw" | bc -l)"
printf "| mcfs re-read (kernel page cache, keep_cache) | %s | %.2f |\n" "$(m mcfs_reread)" "$(echo "$(m mcfs_reread) / $dw" | bc -l)"
printf "| mcfs re-read from the RAM tier (page cache dropped) | %s | %.2f |\n" "$(m mcfs_ramtier)" "$(echo "$(m mcfs_ramtier) / $dw" | bc -l)"
printf "| splice=true: first read, store file in page cache | %s | %.2f |\n" "$(m splice_first_warm)" "$(echo "$(m splice_first_warm) / $dw" | bc -l)"
printf "| splice=true: re-read from the RAM tier | %s | %.2f |\n" "$(m splice_ramtier)" "$(echo "$(m splice_ramtier) / $dw" | bc -l)"
echo
echo "raw runs: $(for k in "${!r[@]}"; do printf '%s=[%s] ' "$k" "${r[$k]% }"; done)"
