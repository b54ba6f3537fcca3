#!/usr/bin/env bash
# Dynamic tables against modulo hashing at the same memory (issue 29's quality measurement):
# synthetic data whose 4 features draw Zipf(1.05) ids from one space of --id_space ids
# (data.synthetic.id_space, default 10^8) with a planted model over those ids; the same model
# trained with (a) static tables of --rows rows (ids mod rows: distinct ids share rows) and
# (b) dynamic tables of capacity --rows (raw ids; admission min_count 2, LFU eviction). Prints
# the eval AUC of both, the planted model's AUC (the best possible) and the dynamic tables'
# final occupancy and evictions, as a markdown table row.
# With --criteo: the same on the real Criteo rows in ../shared/data (1,000 Kaggle rows for
# training, 4 epochs; the 100 PaddleRec test rows for eval; 26 tables of --rows rows, static
# tables hashing the 32-bit hex mod rows, dynamic ones keyed by it; no planted AUC there).
#   bench/dynamic_quality.sh [--build DIR] [--rows 4096] [--id_space 100000000]
#                            [--samples 1048576] [--min_count 2] [--policy lfu] [--criteo]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"; rows=4096; id_space=100000000; samples=1048576; min_count=2; policy=lfu
criteo=0; nf=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --id_space) id_space="$2"; shift 2 ;;
    --samples) samples="$2"; shift 2 ;;
    --min_count) min_count="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --criteo) criteo=1; shift ;;
    *) echo "dynamic_quality.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[[ $criteo == 1 ]] && nf=26
tables() {  # $1: static | dynamic
  for ((f = 0; f < nf; f++)); do
    if [[ $1 == static ]]; then
      echo "    - {name: t$f, rows: $rows, features: [$f]}"
    else
      echo "    - {name: t$f, features: [$f], dynamic: {capacity_rows: $rows, admission: {min_count: $min_count}, eviction: {policy: $policy}}}"
    fi
  done
}
data_section() {
  if [[ $criteo == 1 ]]; then
    cat <<DATA
data:
  format: criteo_tsv
  train: $root/../shared/data/criteo/kaggle_train_head1000.tsv
  eval: $root/../shared/data/criteo/paddlerec_sample_test.tsv
  batch_size: 100
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adagrad, lr: 0.02}
train: {epochs: 4, eval_every: 0, log_every: 10}
DATA
  else
    cat <<DATA
data:
  format: synthetic
  batch_size: 2048
  synthetic: {train_samples: $samples, eval_samples: 131072, zipf_exponent: 1.05, id_space: $id_space, pooling: 1}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adagrad, lr: 0.05}
train: {epochs: 1, eval_every: 0, log_every: 64}
DATA
  fi
}
for kind in static dynamic; do
  cat > "$out/$kind.yaml" <<YAML
seed: 7
model:
  type: dlrm
  num_dense: 13
  embedding_dim: 16
  bottom_mlp: [64, 16]
  top_mlp: [64, 1]
  tables:
$(tables $kind)
$(data_section)
output: {dir: $out/run_$kind, export: ""}
YAML
  "$build/bin/tessera-train" --config "$out/$kind.yaml" --quiet > "$out/$kind.txt"
done
python3 - "$out" "$rows" "$id_space" "$samples" "$criteo" <<'PY'
import json, sys
out, rows, space, samples, criteo = sys.argv[1:]
def final(kind):
    lines = [json.loads(l) for l in open(f"{out}/run_{kind}/metrics.jsonl")]
    done = [l for l in lines if l.get("status") == "done"][-1]
    dyn = [l for l in lines if "dynamic_table" in l]
    return done, dyn
s, _ = final("static")
d, dyn = final("dynamic")
last = {}
for l in dyn:
    last[l["dynamic_table"]] = l
evictions = sum(l["dynamic_evictions"] for l in dyn)
occ = sum(l["dynamic_occupancy"] for l in last.values())
what = (f"Criteo samples, {rows} rows x 26 tables" if criteo == "1"
        else f"{space} ids, {rows} rows x 4 tables, {samples} samples")
print(f"| {what} | static (mod) AUC "
      f"{s['eval_auc']:.5f} | dynamic AUC {d['eval_auc']:.5f} | planted AUC "
      f"{d.get('planted_auc', float('nan')):.5f} | dynamic: {occ} rows held, {evictions} evictions |")
PY
