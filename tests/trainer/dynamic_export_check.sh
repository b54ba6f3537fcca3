#!/usr/bin/env bash
# configs/dynamic.yaml, shortened, through the binaries: training with checkpoints, the export and
# the checkpoint read by the real `safetensors` library (dynamic_export_check.py; skipped with a
# message when it is not installed), and --eval-only of the export printing the AUC the run
# logged (ids never trained read the zero row).
# Usage: dynamic_export_check.sh BUILD_BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1; src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--config "$src/configs/dynamic.yaml" --quiet --threads 1
        --set data.synthetic.train_samples=32768 --set data.synthetic.eval_samples=4096
        --set data.batch_size=512 --set train.log_every=8 --set "output.dir=$out/run")
"$bin/tessera-train" "${common[@]}" --set train.checkpoint_every=32 > "$out/train.txt"
grep -q '"dynamic_table": "t0"' "$out/run/metrics.jsonl"
python3 "$src/tests/trainer/dynamic_export_check.py" "$out/run"
logged=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("status") == "done": print(repr(d["eval_auc"]))' "$out/run/metrics.jsonl")
"$bin/tessera-train" --eval-only "${common[@]}" > "$out/eval.txt"
got=$(sed -n 's/.*: AUC \([^ ]*\) .*/\1/p' "$out/eval.txt")
echo "training run logged eval AUC $logged; --eval-only: $got"
python3 -c "import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-8, sys.argv" \
  "$logged" "$got"
echo "1 passed, 0 failed"
