#!/usr/bin/env bash
# tessera-train --eval-only through the binary, one rank and (when mpirun is there) two: the
# AUC it prints for the exported model equals the final eval AUC the training run logged, the
# scores file has one line per eval sample and the two-rank scores equal the one-rank ones.
# Also reads the run's TensorBoard event file back with PyPI's tensorboard when it is installed
# (tests/trainer/tensorboard_check.py; skipped with a message otherwise).
# Usage: eval_only_check.sh BUILD_BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1; src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--config "$src/configs/quickstart.yaml" --quiet --threads 1
        --set data.synthetic.train_samples=16384 --set data.synthetic.eval_samples=4096
        --set data.batch_size=512 --set train.log_every=8)
"$bin/tessera-train" "${common[@]}" --set "output.dir=$out/run" > "$out/train.txt"
logged=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("status") == "done": print(repr(d["eval_auc"]))' "$out/run/metrics.jsonl")
"$bin/tessera-train" --eval-only "${common[@]}" --set "output.dir=$out/run" \
  --scores "$out/scores1.txt" > "$out/eval1.txt"
got=$(sed -n 's/.*: AUC \([^ ]*\) .*/\1/p' "$out/eval1.txt")
echo "training run logged eval AUC $logged; --eval-only: $got"
python3 -c "import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-8, sys.argv" \
  "$logged" "$got"
test "$(wc -l < "$out/scores1.txt")" -eq 4096
if command -v mpirun > /dev/null; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \
    "$bin/tessera-train" --eval-only "${common[@]}" --set "output.dir=$out/run" \
    --model "$out/run/model.safetensors" --scores "$out/scores2.txt" > "$out/eval2.txt"
  got2=$(sed -n 's/.*: AUC \([^ ]*\) .*/\1/p' "$out/eval2.txt")
  echo "--eval-only on 2 ranks: AUC $got2"
  python3 -c "import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-4, sys.argv" \
    "$logged" "$got2"
  test "$(wc -l < "$out/scores2.txt")" -eq 4096
  python3 - "$out/scores1.txt" "$out/scores2.txt" <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"one rank vs two ranks: scores differ by at most {worst:.3g}")
assert worst <= 1e-5, worst
PY
fi
python3 "$src/tests/trainer/tensorboard_check.py" "$out/run"
echo "1 passed, 0 failed"
