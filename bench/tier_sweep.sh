#!/usr/bin/env bash
# The RocksDB tier against the same DLRM all in memory (issue 4: >= 75% of in-memory throughput
# with the cache at 10% of the rows touched): tessera-bench on configs/bench/small.yaml (in
# memory) and configs/bench/small_tiered.yaml (all 8 tables in RocksDB), for each cache policy
# and cache size given as a fraction of the rows the benchmark's 64 batches touch. Each tiered
# run is paired with an in-memory run right before it, so load on the shared machine hits both
# alike; per point it prints the median and the best (least disturbed) of the runs, as a
# markdown table row.
#
#   bench/tier_sweep.sh [--build DIR] [--runs N] [--policies "lru lfu"] \
#                       [--fractions "0.01 0.05 0.1 0.25 1"] [--steps 96] [--tier_tables 0,3]
#   bench/tier_sweep.sh --policies lfu --fractions 0.1 --runs 7     # the acceptance point
#   --tier_tables 0: only table t0 in RocksDB (small.yaml + tessera-bench --tier_tables 0)
#
# 2 threads, 64 warm-up steps over the same 64 batches (every touched row is in RocksDB before
# timing), then --steps timed steps with the next batch prefetched.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"; runs=3; policies="lru lfu"; fractions="0.01 0.05 0.1 0.25 1"; steps=96
tier_tables=""  # default: all 8 tables (small_tiered.yaml)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --policies) policies="$2"; shift 2 ;;
    --fractions) fractions="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --tier_tables) tier_tables="$2"; shift 2 ;;
    *) echo "tier_sweep.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build="$(cd "$build" && pwd)"
bench="$build/bin/tessera-bench"
[[ -x "$bench" ]] || { echo "tier_sweep.sh: $bench not found (build first)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--threads 2 --batches 64 --warmup 64 --steps "$steps")
tiered=(--config "$root/configs/bench/small_tiered.yaml")
ntables=8
if [[ -n "$tier_tables" ]]; then
  tiered=(--config "$root/configs/bench/small.yaml" --tier_tables "$tier_tables")
  ntables=$(echo "$tier_tables" | tr ',' '\n' | wc -l)
fi
field() { { grep -o "\"$1\": [0-9.e+-]*" || true; } | head -1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
best() { sort -g | head -1; }
pct() { echo "100 * $1 / $2" | bc -l | xargs printf '%.0f'; }

echo "| policy | cache (% of touched) | cache rows (t0) | hit rate (t0) | RocksDB reads / writes per step ($ntables table(s)) | in-memory ms/step (median / best) | tiered ms/step (median / best) | vs in-memory (median / best) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for policy in $policies; do
  for f in $fractions; do
    : > "$work/mem"; : > "$work/tier"
    for ((i = 1; i <= runs; ++i)); do
      (cd "$work" && "$bench" --config "$root/configs/bench/small.yaml" "${common[@]}" 2>&1) \
        | field ms_per_step >> "$work/mem"
      (cd "$work" && "$bench" "${tiered[@]}" "${common[@]}" \
         --tier_policy "$policy" --tier_cache_fraction "$f" 2>&1) > "$work/out"
      field ms_per_step < "$work/out" >> "$work/tier"
    done
    reads=0; writes=0
    for t in 0 1 2 3 4 5 6 7; do
      r=$(field tier_t${t}_rows_read_per_step < "$work/out"); [[ -n "$r" ]] || continue
      reads=$(echo "$reads + $r" | bc -l)
      writes=$(echo "$writes + $(field tier_t${t}_rows_written_per_step < "$work/out")" | bc -l)
    done
    mm=$(median < "$work/mem"); tm=$(median < "$work/tier")
    bm=$(best < "$work/mem"); bt=$(best < "$work/tier")
    printf '| %s | %s%% | %s | %.3f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %s%% / %s%% |\n' \
      "$policy" "$(echo "100 * $f" | bc -l | xargs printf '%g')" \
      "$(field tier_t0_cache_rows < "$work/out")" "$(field tier_t0_hit_rate < "$work/out")" \
      "$reads" "$writes" "$mm" "$bm" "$tm" "$bt" "$(pct "$mm" "$tm")" "$(pct "$bm" "$bt")"
  done
done
