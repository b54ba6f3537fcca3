#!/usr/bin/env bash
# Throughput of the RocksDB tier against the same model all in memory (issue 4's bar: >= 75% at a
# cache of 10% of the rows touched). Runs the in-memory and the tiered benchmark alternately
# (noise on a shared 2-core machine hits both alike) and prints each run and the medians.
#
#   bench/tier_compare.sh [build dir] [runs] [extra tessera-bench flags...]
#   e.g. bench/tier_compare.sh build 5 --tier_policy lru --tier_cache_fraction 0.25
#
# Defaults: configs/bench/small.yaml vs configs/bench/small_tiered.yaml (all 8 tables in
# RocksDB, LFU), cache 10% of the rows the 64 batches touch, 2 threads, 64 warm-up steps (every
# touched row is in RocksDB before timing), 96 timed steps.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
runs="${2:-5}"
shift $(( $# > 2 ? 2 : $# ))
bench="$build/bin/tessera-bench"
[[ -x "$bench" ]] || { echo "tier_compare.sh: $bench not found (build first)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--threads 2 --batches 64 --warmup 64 --steps 96)
ms() { grep -o '"ms_per_step": [0-9.]*' | awk '{print $2}'; }
: > "$work/mem"; : > "$work/tier"
for ((i = 1; i <= runs; ++i)); do
  m=$(cd "$work" && "$bench" --config "$root/configs/bench/small.yaml" "${common[@]}" 2>&1 | ms)
  t=$(cd "$work" && "$bench" --config "$root/configs/bench/small_tiered.yaml" "${common[@]}" \
        --tier_cache_fraction 0.1 "$@" 2>&1 | tee "$work/last_tier.txt" | ms)
  echo "$m" >> "$work/mem"; echo "$t" >> "$work/tier"
  printf 'run %d: in-memory %.1f ms/step, tiered %.1f ms/step (%.0f%%)\n' "$i" "$m" "$t" \
    "$(echo "100 * $m / $t" | bc -l)"
done
median() { sort -g "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mm=$(median "$work/mem"); tm=$(median "$work/tier")
printf 'median: in-memory %.1f ms/step, tiered %.1f ms/step: tiered runs at %.0f%% of in-memory\n' \
  "$mm" "$tm" "$(echo "100 * $mm / $tm" | bc -l)"
echo "last tiered run's tier section:"
sed -n '/RocksDB tier (per timed step)/,/^{/p' "$work/last_tier.txt" | grep -v '^{'
