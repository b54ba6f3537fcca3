#!/usr/bin/env bash
# The 2D claim on emulated hosts (docs/PERFORMANCE.md, "Across emulated hosts"): tessera-bench on
# 2 hosts x 2 ranks (scripts/cluster.sh; root), fully sharded (1 x 4: one sharding group over
# both hosts) against 2D (2 x 2) in both layouts (replicas_adjacent: each sharding group spans the
# hosts, a shard's replicas share one; groups_contiguous: each sharding group on one host, replica
# sync across), exact and average mode (k = 1, 8), for each link rate. Prints a markdown table:
# samples/s, ms/step, bytes per step through host 0's link (both directions, from the link's own
# counters: everything, the launcher's traffic excepted as it uses the management network), and
# the prediction of the planner's estimator for the same plan from PROFILE (tessera-bench
# --profile), which was calibrated on one host.
#   bench/cluster_2d.sh [BUILD_DIR]
# Env: RATES ("100mbit 1gbit"), CONFIGS ("kaggle"; configs/bench/NAME.yaml), STEPS (8), WARMUP
# (2), PROFILE (cpu_2core_measured), OUT (runs/cluster_2d.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rates=${RATES:-"100mbit 1gbit"}; configs=${CONFIGS:-kaggle}
steps=${STEPS:-8}; warmup=${WARMUP:-2}; profile=${PROFILE:-cpu_2core_measured}
out=${OUT:-runs/cluster_2d.jsonl}
export TESSERA_CLUSTER_PREFIX=${TESSERA_CLUSTER_PREFIX:-tsr-b} TESSERA_CLUSTER_NET=${TESSERA_CLUSTER_NET:-4}
mkdir -p "$(dirname "$out")"; : > "$out"
bash scripts/cluster.sh up 2 2 --link "${rates%% *}" || exit $?
trap 'bash scripts/cluster.sh down' EXIT
link_bytes() { bash scripts/cluster.sh stats | awk 'NR == 1 {print $4 + $6}'; }
for rate in $rates; do
  bash scripts/cluster.sh link "$rate"
  for cfg in $configs; do
    for run in "1 replicas_adjacent exact 1" "2 replicas_adjacent exact 1" \
               "2 groups_contiguous exact 1" "2 replicas_adjacent average 1" \
               "2 groups_contiguous average 1" "2 replicas_adjacent average 8" \
               "2 groups_contiguous average 8"; do
      read -r m layout mode k <<< "$run"
      n=$((4 / m))
      name="$cfg $rate ${m}x$n $layout $mode${mode/exact/}"
      [ "$mode" = average ] && name="$cfg $rate ${m}x$n $layout average k=$k"
      [ "$mode" = exact ] && name="$cfg $rate ${m}x$n $layout exact"
      before=$(link_bytes)
      bash scripts/cluster.sh run -- env OMP_NUM_THREADS=1 "$build/bin/tessera-bench" \
        --config "configs/bench/$cfg.yaml" --steps "$steps" --warmup "$warmup" --threads 1 \
        --profile "$profile" --name "$name" --json "$out" --set "sharding.group_size=$n" \
        --set "sharding.layout=$layout" --set "sharding.replica_sync=$mode" \
        --set "sharding.sync_every=$k" > /dev/null 2>&1 || echo "FAILED: $name" >&2
      after=$(link_bytes)
      echo "{\"name\": \"$name\", \"link_bytes_per_step\": $(( (after - before) / (steps + warmup) ))}" >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys
runs, link = [], {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "link_bytes_per_step" in r and len(r) == 2: link[r["name"]] = r["link_bytes_per_step"]
    else: runs.append(r)
print("| run | samples/s | ms/step | predicted ms/step | host 0 link B/step (both ways, incl. start-up) |")
print("|---|---|---|---|---|")
for r in runs:
    pred = r.get("pred_step_ms")
    print(f"| {r['name']} | {r['samples_per_sec']:.0f} | {r['ms_per_step']:.1f} | "
          f"{'' if pred is None else f'{pred:.1f}'} | {link.get(r['name'], 0)} |")
PY
