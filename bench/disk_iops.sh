#!/usr/bin/env bash
# The disk's random 4 KiB read IOPS at queue depth 1 and 32, O_DIRECT (the page cache bypassed),
# the bound a tier that reads cold rows from disk is measured against (docs/PERFORMANCE.md,
# ../shared/MACHINE.md). Uses fio (Debian package `fio`; not needed to build or test Tessera).
# usage: bench/disk_iops.sh [dir on the disk, default runs/disk_iops under the repo] [file GiB, default 4]
#                           [seconds per depth, default 15]
# The file is laid out once, then deleted. It must be much larger than any device cache; with
# O_DIRECT the OS page cache plays no part.
set -euo pipefail
dir=${1:-runs/disk_iops}
gib=${2:-4}
secs=${3:-15}
command -v fio > /dev/null || { echo "fio not found: apt-get install fio" >&2; exit 1; }
mkdir -p "$dir"
free_gib=$(df -BG --output=avail "$dir" | tail -1 | tr -dc 0-9)
if [ "$free_gib" -lt $((gib + 20)) ]; then
  echo "only ${free_gib} GiB free on $dir: refusing to leave less than 20 GiB" >&2
  exit 1
fi
file="$dir/tessera_disk_iops.$$"
trap 'rm -f "$file"' EXIT
for depth in 1 32; do
  fio --name=randread_qd$depth --filename="$file" --size="${gib}G" --rw=randread --bs=4k \
      --direct=1 --ioengine=libaio --iodepth=$depth --runtime="$secs" --time_based \
      --group_reporting --output-format=terse --terse-version=3 \
    | awk -F';' -v d=$depth '{printf "4 KiB random reads, O_DIRECT, depth %2d: %8d IOPS, %6.1f MiB/s, mean latency %.0f us\n", d, $8, $7/1024, $40}'
done
