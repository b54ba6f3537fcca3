#!/usr/bin/env bash
# The 2D claim on emulated hosts (docs/PERFORMANCE.md, "Across emulated hosts"): tessera-bench on
# 2 hosts x 2 ranks (scripts/cluster.sh; needs root), fully sharded (N = 4: one sharding group
# over both hosts) against 2D (N = 2, M = 2) in both layouts (replicas_adjacent: each sharding
# group spans the hosts, a shard's replicas share one; groups_contiguous: each sharding group on
# one host, replica sync across), exact and average mode (k = 1, 8), at each link rate.
#
# Per rate: the link is reshaped, then `tessera-plan calibrate --quick` measures this machine
# with the collectives on one host and across the 2 hosts (--hosts 2 --cross_host_mpirun), the
# profile every run of that rate plans with (sharding.plan: auto at the run's N, layout and sync)
# and is predicted from (tessera-bench --profile). Per (config, rate, layout, sync) tessera-plan
# also plans with N free (sharding.group_size: 0): the planner's choice of N.
# Measured per run: samples/s and the median step (rank 0's wall time), the bytes through host
# 0's data link per step (both directions, from the link's counters over the whole run, start-up
# and warm-up included, divided by warm-up + timed steps), the prediction for the same plan.
#   bench/cluster_2d.sh [BUILD_DIR]
# Env: RATES ("100mbit 1gbit"), CONFIGS ("kaggle skewed mlperf_mini"; configs/bench/NAME.yaml),
# STEPS (8: a multiple of the largest k, so every timed window holds the same syncs), WARMUP (2;
# average mode at least k + 2, so one sync is warm-up and the timed one steady), ROUNDS (1: every run repeated, interleaved), OUT (runs/cluster_2d),
# REUSE_PROFILES (0; 1: a rate's profile already in OUT is used, not calibrated again).
# Prints a markdown table per config and rate (bench/cluster_2d_report.py).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rates=${RATES:-"100mbit 1gbit"}; configs=${CONFIGS:-"kaggle skewed mlperf_mini"}
steps=${STEPS:-8}; warmup=${WARMUP:-2}; rounds=${ROUNDS:-1}
out=${OUT:-runs/cluster_2d}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac  # the profile path is handed to other dirs
export TESSERA_CLUSTER_PREFIX=${TESSERA_CLUSTER_PREFIX:-tsr-b} TESSERA_CLUSTER_NET=${TESSERA_CLUSTER_NET:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
runs="$out/runs.jsonl"; : > "$runs"
bash scripts/cluster.sh up 2 2 --link "${rates%% *}" || exit $?
trap 'bash scripts/cluster.sh down' EXIT
trap 'exit 130' INT TERM
link_bytes() { bash scripts/cluster.sh stats | awk 'NR == 1 {printf "%.0f\n", $5 + $7}'; }
plans=("4 replicas_adjacent exact 1" "2 replicas_adjacent exact 1" "2 groups_contiguous exact 1"
       "2 replicas_adjacent average 1" "2 groups_contiguous average 1"
       "2 replicas_adjacent average 8" "2 groups_contiguous average 8")
for rate in $rates; do
  bash scripts/cluster.sh link "$rate"
  profile="$out/profile-$rate.yaml"
  cfg_list=$(for c in $configs; do printf 'configs/bench/%s.yaml,' "$c"; done)
  if [ "${REUSE_PROFILES:-0}" = 1 ] && [ -f "$profile" ]; then
    echo "== reusing $profile" >&2
  else
  echo "== calibrate at $rate" >&2
  "$build/bin/tessera-plan" calibrate --quick --world_sizes 2,4 --hosts 2 \
    --cross_host_mpirun "bash scripts/cluster.sh mpirun" --config "${cfg_list%,}" \
    --scratch "/tmp/tessera-cluster-2d-calibrate" --out "$profile" 2> "$out/calibrate-$rate.log"
  fi
  bash bench/cluster_2d_choices.sh "$build" "$profile" "$rate" $configs >> "$runs"
  for ((round = 0; round < rounds; round++)); do
    for cfg in $configs; do
      for plan in "${plans[@]}"; do
        read -r n layout mode k <<< "$plan"
        name="$cfg $rate $n $layout $mode $k"
        # Average mode: a sync inside the warm-up, so the timed one is a steady sync, as the
        # planner prices it (the first grows its buffers: mlperf-mini's at 1 Gbit/s measured
        # 1.7 s of page faults where a steady one took 0.3-0.5 s).
        warm=$warmup
        [[ "$mode" == average ]] && ((warm < k + 2)) && warm=$((k + 2))
        echo "== $name (round $((round + 1)))" >&2
        before=$(link_bytes)
        rc=0
        bash scripts/cluster.sh run -- env OMP_NUM_THREADS=1 "$build/bin/tessera-bench" \
          --config "configs/bench/$cfg.yaml" --steps "$steps" --warmup "$warm" --threads 1 \
          --profile "$profile" --name "$name" --json "$runs" \
          --set "sharding.group_size=$n" --set "sharding.layout=$layout" \
          --set "sharding.replica_sync=$mode" --set "sharding.sync_every=$k" \
          --set "sharding.plan=auto" --set "sharding.profile=$profile" \
          > "$out/bench-${name// /_}-$round.log" 2>&1 || rc=$?
        after=$(link_bytes)
        [ $rc -eq 0 ] || echo "FAILED ($rc): $name" >&2
        echo "{\"link\": \"$name\", \"rc\": $rc, \"bytes_per_step\": $(( (after - before) / (steps + warm) ))}" >> "$runs"
      done
    done
  done
done
python3 bench/cluster_2d_report.py "$runs"
