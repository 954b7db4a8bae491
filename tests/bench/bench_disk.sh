#!/usr/bin/env bash
# Issue 5's two figures, in one run on one machine:
#  1. restart-warm sequential read of a SIZE file from the disk tier (a fresh
#     daemon, page cache dropped, every block from cache_dir) beside an
#     O_DIRECT read of the cache disk itself (the same bytes: the slot file's
#     region that holds them) with dd (one 8 MiB read at a time) and, when
#     fio is installed, fio at queue depth 8, median of RUNS each;
#  2. stat of NFILES cached files through the mount: first pass after a
#     restart (kernel knows nothing: one FUSE lookup each, answered from LMDB)
#     and a second pass (kernel's attribute cache), files per second.
# Follows ../shared/notes/benchmarking.md: pretouch, drop caches, medians.
#   tests/bench/bench_disk.sh [SIZE_MiB=4096] [RUNS=5] [NFILES=10000]
# Needs root. Prints markdown tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
MCFS=${MCFS_BIN:-$PWD/build/fs/mcfs}
size=${1:-4096}
runs=${2:-5}
nfiles=${3:-10000}
work=$(mktemp -d /var/tmp/mcfs-bench-disk.XXXXXX)
mnt=$work/mnt
cache=$work/cache
mkdir -p "$work/src/many" "$mnt"
pid=
cleanup() {
	mountpoint -q "$mnt" && "$MCFS" umount "$mnt" || true
	[ -n "$pid" ] && wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Touch and free as much RAM as the timed read will newly use (its page cache),
# right before it: after a mount's prefault, which takes memory of its own.
pretouch() { dd if=/dev/zero of=/dev/shm/mcfs-pretouch bs=1M count=$((size + 1024)) status=none; rm -f /dev/shm/mcfs-pretouch; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
ddrate() { dd of=/dev/null "$@" 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") t = $(i-1); printf "%.0f\n", $1 / t / 1e6 }'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mount_fg() {
	"$MCFS" mount "$work/src" "$mnt" -f -o "cache_dir=$cache,disk_cache=$((size + 1024))M$1" \
		>>"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		if mountpoint -q "$mnt"; then
			# time reads, not the RAM tier's prefault after mounting
			while [ "$(stat_of ram_prefault)" = 1 ]; do sleep 0.05; done
			return 0
		fi
		sleep 0.05
	done
	echo "mount failed:"; cat "$work/log"; exit 1
}
umount_fg() { "$MCFS" umount "$mnt"; wait "$pid"; pid=; }
stat_of() { getfattr --absolute-names --only-values -n user.mcfs.stats "$mnt" | awk -v k="$1" '$1 == k { print $2 }'; }

f=$work/src/model.bin
dd if=/dev/urandom of="$f" bs=1M count="$size" status=none
python3 - "$work/src/many" "$nfiles" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "f%05d.json" % i), "w") as fh:
        fh.write("{}")
PY
sync

# populate: one cold read through the store fills the disk tier; ls -lR fills LMDB
mount_fg ""
dd if="$mnt/model.bin" of=/dev/null bs=8M status=none
ls -lR "$mnt" >/dev/null
while [ "$(stat_of disk_queued)" != 0 ]; do sleep 0.2; done
echo "disk tier after the cold read: $(stat_of disk_writes) blocks written, $(stat_of disk_write_drops) dropped" >&2
umount_fg

# the slot file's blocks: where the tier put the file (it fills from slot 0), in
# the store's own directory under cache_dir (cache/KIND-SLUG-HASH)
found=("$cache"/*/blocks/slots)
[ ${#found[@]} = 1 ] && [ -f "${found[0]}" ] || { echo "not one slot file: ${found[*]}" >&2; exit 1; }
slots=${found[0]}
nblk=$(( (size * 1048576 + 8388607) / 8388608 ))
declare -A r
for i in $(seq "$runs"); do
	drop; pretouch
	r[raw]+="$(ddrate if="$slots" iflag=direct bs=8M count="$nblk") "
	if command -v fio >/dev/null; then
		# the disk with a queue as deep as mcfs's reads keep (8 MiB at QD 8)
		drop; pretouch
		r[fio]+="$(fio --name=slots --filename="$slots" --readonly --rw=read --bs=8M \
			--direct=1 --ioengine=io_uring --iodepth=8 --size=$((nblk * 8))M \
			--output-format=json | python3 -c 'import json, sys
print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6))') "
	fi
	drop
	mount_fg ""
	pretouch
	r[mcfs]+="$(ddrate if="$mnt/model.bin" bs=8M) "
	[ "$(stat_of store_reads)" = 0 ] || { echo "run $i touched the store" >&2; exit 1; }
	r[hits]="$(stat_of disk_hits)"
	umount_fg
done
raw=$(echo "${r[raw]}" | tr ' ' '\n' | grep . | median)
mc=$(echo "${r[mcfs]}" | tr ' ' '\n' | grep . | median)
echo
echo "| ${size} MiB sequential read, MB/s (median of $runs) | runs | median |"
echo "|---|---|---|"
echo "| dd iflag=direct bs=8M of the cache disk (slot file) | ${r[raw]}| $raw |"
echo "| mcfs restart-warm, dd bs=8M through the mount (disk tier, 0 store reads) | ${r[mcfs]}| $mc |"
echo "| ratio mcfs / O_DIRECT dd | | $(awk -v a="$mc" -v b="$raw" 'BEGIN { printf "%.0f%%", 100 * a / b }') |"
if [ -n "${r[fio]:-}" ]; then
	fio_m=$(echo "${r[fio]}" | tr ' ' '\n' | grep . | median)
	echo "| fio O_DIRECT io_uring bs=8M iodepth=8 of the cache disk (slot file) | ${r[fio]}| $fio_m |"
	echo "| ratio mcfs / O_DIRECT fio QD8 | | $(awk -v a="$mc" -v b="$fio_m" 'BEGIN { printf "%.0f%%", 100 * a / b }') |"
fi

# stat rate: fresh daemon each run, the kernel knows nothing; answers from LMDB
declare -A s
for i in $(seq "$runs"); do
	mount_fg ""
	out=$(python3 - "$mnt/many" "$nfiles" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
paths = [os.path.join(d, "f%05d.json" % i) for i in range(n)]
rates = []
for _ in range(2):
    t = time.perf_counter()
    for p in paths:
        os.stat(p)
    rates.append(n / (time.perf_counter() - t))
print("%.0f %.0f" % tuple(rates))
PY
)
	[ "$(stat_of store_requests)" -le 1 ] || { echo "stat run $i asked the store" >&2; exit 1; }
	s[first]+="${out% *} "
	s[second]+="${out#* } "
	umount_fg
done
echo
echo "| stat of $nfiles cached files through the mount, files/s (median of $runs) | runs | median |"
echo "|---|---|---|"
echo "| after a restart: FUSE lookup each, from LMDB | ${s[first]}| $(echo "${s[first]}" | tr ' ' '\n' | grep . | median) |"
echo "| again (kernel attribute cache) | ${s[second]}| $(echo "${s[second]}" | tr ' ' '\n' | grep . | median) |"
