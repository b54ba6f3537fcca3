#!/usr/bin/env bash
# Tier stalls per step, one process against the sharded path (issue 14 item 4): the RocksDB-tier
# bench model (configs/bench/small_tiered.yaml, caches at 10% of the rows touched) run by
# tessera-bench with 1 thread per rank as
#   1p        one process, batch B
#   1p-2B     one process, batch 2B (the sharded run's global batch)
#   2p        mpirun -np 2, one sharding group of 2 ranks, batch B per rank
#   2p-avg-kK mpirun -np 2, two replicas of one rank (sharding.group_size 1), average replica
#             sync every K = 1 and 4 steps (sync_rows touched), batch B per rank; caches at 40%
#             of the rows touched (the sync pins the rows both replicas touched in K steps and
#             the previous sync's rows: 10% is too small for that)
# each with the tier's prefetch on and off (storage.prefetch: false in a copy of the config).
# Prints, per run, the stalls per step (rows Resolve read from RocksDB itself, and the ms Resolve
# waited for them and for prefetch reads in flight, all tables, summed over ranks), rows read from RocksDB and ms
# per step; the JSON lines go to <out>/sharded_prefetch.jsonl.
# usage: bench/sharded_prefetch.sh [out dir, default runs/sharded_prefetch] [runs, default 3]
#                                  [batch B, default 2048]
# (Open MPI as root: export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/sharded_prefetch}
runs=${2:-3}
batch=${3:-2048}
bench=build/bin/tessera-bench
[ -x "$bench" ] || { echo "build tessera-bench first: cmake --build build --target tessera-bench" >&2; exit 1; }
mkdir -p "$out"
json="$out/sharded_prefetch.jsonl"
: > "$json"
off_cfg="$out/small_tiered_noprefetch.yaml"
sed 's/reader_threads: 2}/reader_threads: 2, prefetch: false}/' configs/bench/small_tiered.yaml > "$off_cfg"
grep -q "prefetch: false" "$off_cfg" || { echo "could not turn prefetch off in $off_cfg" >&2; exit 1; }
base=(--threads 1 --batches 64 --warmup 64 --steps 48)
common=("${base[@]}" --tier_cache_fraction 0.1)
for r in $(seq "$runs"); do
  for pf in on off; do
    cfg=configs/bench/small_tiered.yaml
    [ "$pf" = off ] && cfg="$off_cfg"
    "$bench" --config "$cfg" "${common[@]}" --set data.batch_size="$batch" \
      --set output.dir="$out/db_1p" --name "1p prefetch=$pf" --json "$json" > /dev/null
    "$bench" --config "$cfg" "${common[@]}" --set data.batch_size=$((2 * batch)) \
      --set output.dir="$out/db_1p2" --name "1p-2B prefetch=$pf" --json "$json" > /dev/null
    mpirun -np 2 --oversubscribe "$bench" --config "$cfg" "${common[@]}" \
      --set data.batch_size="$batch" --set sharding.group_size=2 --set output.dir="$out/db_2p" \
      --name "2p prefetch=$pf" --json "$json" > /dev/null
    for k in 1 4; do
      mpirun -np 2 --oversubscribe "$bench" --config "$cfg" "${base[@]}" \
        --tier_cache_fraction 0.4 --set data.batch_size="$batch" --set sharding.group_size=1 \
        --set sharding.replica_sync=average --set sharding.sync_every=$k \
        --set output.dir="$out/db_2pa" --name "2p-avg-k$k prefetch=$pf" --json "$json" > /dev/null
    done
  done
done
rm -rf "$out"/db_1p "$out"/db_1p2 "$out"/db_2p "$out"/db_2pa
python3 - "$json" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    rows.setdefault(j["name"], []).append(j)
print(f"{'run':<20} {'n':>2} {'sync reads/step':>16} {'stall ms/step':>14} {'rows read/step':>14} {'ms/step':>9}")
for name in sorted(rows):
    rs = rows[name]
    rows_read = lambda j: sum(v for k, v in j.items() if k.startswith("tier_") and k.endswith("rows_read_per_step"))
    med = lambda f: statistics.median(f(j) for j in rs)
    print(f"{name:<20} {len(rs):>2} {med(lambda j: j['tier_stall_rows_per_step']):>16.1f} "
          f"{med(lambda j: j['tier_stall_ms_per_step']):>14.3f} {med(rows_read):>14.0f} "
          f"{med(lambda j: j['ms_per_step']):>9.1f}")
EOF
