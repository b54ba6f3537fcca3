#!/usr/bin/env bash
# The planning-only table of docs/PLANNER.md ("Planning at scale"): the Criteo Kaggle tables, the
# MLPerf DLRM-DCNv2 tables and a synthetic set of 1,000 tables, at T = 8 ... 4096 ranks of the
# H200 cluster profile (planner/profiles/h200_cluster.yaml; 8 ranks per node; 141 GB HBM, 256 GB
# host, 3.5 TB disk per rank), 2,048 samples per rank. Each row: the planner's predicted step,
# DefaultShardingPlan's and the TorchRec-style greedy's (both priced by the same estimator,
# at N = T), whether each fits, and the planner's wall time.
#   bench/plan_table.sh [build/bin/tessera-plan] [T list]
set -euo pipefail
plan=${1:-build/bin/tessera-plan}
ts=${2:-"8 64 512 4096"}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The synthetic set: 1,000 tables of dim 64, rows log-uniform in [1e3, 2e7], 1..20 ids per bag
# for most and 50..200 for 3% (a fixed seed, so the set is the same every run); a DCNv2 model
# (2 low-rank cross layers).
python3 - "$tmp/synthetic_1000.yaml" <<'PY'
import random, sys
rng = random.Random(1000)
rows = [int(10 ** rng.uniform(3, 7.3)) for _ in range(1000)]
# Multi-hot skew as in the MLPerf sizes: most bags short, a few tables with long bags.
pool = [rng.choice([1, 1, 2, 3, 5, 8, 13, 20]) if rng.random() > 0.03 else rng.randint(50, 200)
        for _ in range(1000)]
with open(sys.argv[1], "w") as f:
    f.write("device: cuda\nmodel:\n  type: dcnv2\n  num_dense: 13\n  embedding_dim: 64\n")
    f.write("  bottom_mlp: [512, 256, 64]\n  top_mlp: [512, 256, 1]\n")
    f.write("  dcn: {num_layers: 2, low_rank: 128}\n  tables:\n")
    for i, r in enumerate(rows):
        f.write(f"    - {{name: s{i}, rows: {r}, dim: 64}}\n")
    f.write("data:\n  format: synthetic\n  batch_size: 2048\n  synthetic:\n")
    f.write(f"    zipf_exponent: 1.05\n    pooling: [{', '.join(map(str, pool))}]\n")
    f.write("optimizer:\n  embedding: {type: rowwise_adagrad}\n  dense: {type: adagrad}\n")
PY

echo "| tables | T | N chosen | planner ms | default ms | TorchRec-style ms | vs default | vs TorchRec-style | plan s (wall / CPU) |"
echo "|---|---|---|---|---|---|---|---|---|"
for set in kaggle dcnv2 synthetic_1000; do
  case $set in
    kaggle) cfg=$src/configs/bench/kaggle.yaml; extra=(--set model.max_table_rows=0) ;;
    dcnv2) cfg=$src/configs/dcnv2_mlperf.yaml; extra=() ;;
    synthetic_1000) cfg=$tmp/synthetic_1000.yaml; extra=() ;;
  esac
  for t in $ts; do
    start=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$plan" --config "$cfg" "${extra[@]}" --set device=cuda --set data.batch_size=2048 \
      --world_size "$t" --ranks_per_node 8 --profile h200_cluster \
      --memory device=141G,host=256G,disk=3584G --format json >"$tmp/out.json"
    end=$(date +%s.%N)
    python3 - "$tmp/out.json" "$set" "$t" "$start" "$end" "$(cat "$tmp/cpu")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name, t, wall = sys.argv[2], sys.argv[3], float(sys.argv[5]) - float(sys.argv[4])
cpu = sum(float(x) for x in sys.argv[6].split())
me = d["predicted"]["step_ms"]
cells = []
ratios = []
for b in d["baselines"]:
    if not b["ok"]:
        cells.append("no plan"); ratios.append("-"); continue
    ms = b["predicted"]["step_ms"]
    cells.append(f"{ms:.2f}" + ("" if b["fits"] else " (does not fit)"))
    ratios.append(f"{ms / me:.2f}x")
print(f"| {name} | {t} | {d['group_size']} | {me:.2f} | {cells[0]} | {cells[1]} | {ratios[0]} | "
      f"{ratios[1]} | {wall:.1f} / {cpu:.1f} |")
PY
  done
done
