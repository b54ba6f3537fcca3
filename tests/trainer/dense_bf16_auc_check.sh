#!/usr/bin/env bash
# model.dense_dtype: bf16 trains as well as fp32: the final eval AUC of configs/quickstart.yaml
# (65,536 eval samples) within 0.002 of the fp32 run's. configs/criteo_sample.yaml (real Criteo
# rows) evaluates on 100 rows only, where the fp32 AUC itself moves 0.007-0.010 when the dense lr
# changes by 0.5% and 0.056 with the seed (docs/PERFORMANCE.md, "bf16 dense math"): its bf16 AUC is
# printed against the 0.005 goal and asserted within 0.03 (half the seed-to-seed spread), which
# catches a broken bf16 path (AUC ~0.5) without failing on that noise.
# Exits 77 (skipped) in a build without oneDNN.
# Usage: dense_bf16_auc_check.sh BUILD_BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1; src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
auc() {  # config dtype -> final eval AUC
  local log="$out/$(basename "$1" .yaml)-$2.log"
  if ! "$bin/tessera-train" --config "$1" --quiet --set "output.dir=$out/$(basename "$1")-$2" \
       --set "model.dense_dtype=$2" > "$log" 2>&1; then
    if grep -q "needs oneDNN" "$log"; then echo "skipped: built without oneDNN"; exit 77; fi
    cat "$log" >&2; exit 1
  fi
  grep -o "eval AUC [0-9.]*" "$log" | tail -1 | cut -d' ' -f3
}
fail=0
for pair in quickstart:0.002 criteo_sample:0.03; do
  name=${pair%%:*}; tol=${pair#*:}
  a32=$(auc "$src/configs/$name.yaml" fp32)
  a16=$(auc "$src/configs/$name.yaml" bf16)
  if python3 -c "import sys; sys.exit(0 if abs($a16 - $a32) <= $tol else 1)"; then
    echo "$name: eval AUC fp32 $a32, bf16 $a16 (|diff| <= $tol): ok"
    if [ "$name" = criteo_sample ] &&
       ! python3 -c "import sys; sys.exit(0 if abs($a16 - $a32) <= 0.005 else 1)"; then
      echo "$name: note: |diff| > 0.005, the issue's goal (within the noise of 100 eval rows)"
    fi
  else
    echo "$name: eval AUC fp32 $a32, bf16 $a16: differ by more than $tol"; fail=1
  fi
done
exit $fail
