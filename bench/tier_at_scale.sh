#!/usr/bin/env bash
# The RocksDB tier at scale (issue 14 item 3): a table whose touched rows (+ row-wise AdaGrad
# state) exceed the machine's memory at least twice, so cold rows are read from the disk.
# Loads the rows once (build/bin/tier_at_scale --mode=all), runs uniform (cold) steps with the
# next step prefetched, and prints rows/s read from RocksDB against the disk's 4 KiB random-read
# IOPS at depth 1 and 32 (bench/disk_iops.sh, or --iops), hit rate, ids/s, samples/s (26 ids per
# sample, one per Criteo categorical feature), peak RSS and bytes on disk. The database is
# deleted at the end. Takes tens of minutes at full size (most of it loading); not a test.
# usage: bench/tier_at_scale.sh [--smoke] [--dir D] [--gb G] [--cache_rows N] [--steps S]
#          [--ids_per_step K] [--reader_threads T] [--multiget_batch B] [--direct_reads 0|1]
#          [--zipf Z] [--iops D1,D32]
#   --smoke   0.3 GB of rows, 50 steps, direct reads (proves the pipeline works; the disk's
#             own cache may serve such a small file, so its rate means little)
#   --gb      GB (1e9 bytes) of rows + state to load; default 50 (>= 2 x 24 GiB); refused above
#             60 or when it would leave less than 15 GB free on --dir's file system
set -euo pipefail
cd "$(dirname "$0")/.."
# 32 threads x MultiGets of 32 keys: the fastest of threads 1-32 x batch 32/256 with O_DIRECT
# (docs/PERFORMANCE.md, "The tier at scale").
dir=runs/tier_at_scale gb=50 cache_rows=2000000 steps=300 ids=8192 threads=32 mgb=32 direct=1 zipf=0
iops="" smoke=0
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 gb=0.3 cache_rows=16384 steps=50 ids=4096 threads=16; shift ;;
    --dir) dir=$2; shift 2 ;;
    --gb) gb=$2; shift 2 ;;
    --cache_rows) cache_rows=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --ids_per_step) ids=$2; shift 2 ;;
    --reader_threads) threads=$2; shift 2 ;;
    --multiget_batch) mgb=$2; shift 2 ;;
    --direct_reads) direct=$2; shift 2 ;;
    --zipf) zipf=$2; shift 2 ;;
    --iops) iops=$2; shift 2 ;;
    *) echo "tier_at_scale.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin=build/bin/tier_at_scale
[ -x "$bin" ] || { echo "build it first: cmake --build build --target tier_at_scale" >&2; exit 1; }
dim=128
row_bytes=$(( (dim + 1) * 4 ))
rows=$(python3 -c "print(int($gb * 1e9 / $row_bytes))")
mkdir -p "$dir"
free_gb=$(df -B1000000000 --output=avail "$dir" | tail -1 | tr -dc 0-9)
python3 - "$gb" "$free_gb" <<'PY' || exit 1
import sys
gb, free = float(sys.argv[1]), int(sys.argv[2])
if gb > 60:
    sys.exit(f"--gb {gb}: refusing more than 60 GB")
if free - 1.15 * gb < 15:  # SST files run ~7% over the raw rows; compaction needs headroom
    sys.exit(f"--gb {gb}: only {free} GB free, the database would leave less than 15 GB")
PY
mem_gb=$(awk '/MemTotal/ {printf "%.1f", $2 * 1024 / 1e9}' /proc/meminfo)
db="$dir/db.$$"
trap 'rm -rf "$db"' EXIT
echo "tier_at_scale: $rows rows x $dim (+1 state) = $gb GB of rows + state; memory $mem_gb GB" \
     "($(python3 -c "print(f'{$gb / $mem_gb:.2f}')")x); cache $cache_rows rows; $threads reader threads x $mgb keys per MultiGet;" \
     "direct reads $direct; $steps steps x $ids ids, zipf $zipf"
if [ -z "$iops" ]; then
  if command -v fio > /dev/null; then
    if [ "$smoke" = 1 ]; then iops_out=$(bash bench/disk_iops.sh "$dir" 1 5); else iops_out=$(bash bench/disk_iops.sh "$dir" 4 15); fi
    echo "$iops_out"
    iops=$(echo "$iops_out" | awk '{for (i = 1; i <= NF; ++i) if ($i == "IOPS,") printf "%s%s", (n++ ? "," : ""), $(i - 1)}')
  else
    echo "fio not found (apt-get install fio): give the disk's IOPS with --iops D1,D32" >&2
    iops="0,0"
  fi
fi
log="$dir/tier_at_scale.$$.log"
start=$(date +%s)
"$bin" --path="$db" --rows="$rows" --dim=$dim --cache_rows="$cache_rows" --steps="$steps" \
  --ids_per_step="$ids" --reader_threads="$threads" --multiget_batch="$mgb" \
  --direct_reads="$direct" --zipf="$zipf" \
  | tee "$log"
on_disk=$(du -sb "$db" | cut -f1)
echo "wall $(( $(date +%s) - start )) s; bytes on disk $on_disk; log $log"
python3 - "$log" "$iops" "$on_disk" <<'PY'
import json, sys
j = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
d1, d32 = (float(x) for x in sys.argv[2].split(","))
r = j["rows_read_per_s"]
pct = lambda iops: f"{100 * r / iops:.0f}%" if iops > 0 else "n/a"
print("| rows + state | cache rows | reader threads | direct | rows/s read from RocksDB | disk IOPS depth 1 / 32 | vs depth 32 | hit rate | ids/s | samples/s (26 ids) | stall ms/step | peak RSS MiB | bytes on disk |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
print(f"| {j['rows'] * (j['dim'] + 1) * 4 / 1e9:.1f} GB | {j['cache_rows']} | {j['reader_threads']} | "
      f"{j['direct_reads']} | {r:,.0f} | {d1:,.0f} / {d32:,.0f} | {pct(d32)} | {j['hit_rate']:.3f} | "
      f"{j['ids_per_s']:,.0f} | {j['ids_per_s'] / 26:,.0f} | {j['stall_ms_per_step']:.1f} | "
      f"{j['peak_rss_mib']:.0f} | {int(sys.argv[3]) / 1e9:.2f} GB |")
PY
