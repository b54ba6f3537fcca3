#!/usr/bin/env bash
# 16-bit embedding storage trains as well as fp32: the final eval AUC of configs/quickstart.yaml
# (65,536 eval samples) with model.embedding_dtype bf16 and fp16 (stochastic rounding, the
# default) within 0.002 of the fp32 run's.
# Usage: embedding_16bit_auc_check.sh BUILD_BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1; src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
auc() {  # dtype -> final eval AUC
  local log="$out/quickstart-$1.log"
  if ! "$bin/tessera-train" --config "$src/configs/quickstart.yaml" --quiet \
       --set "output.dir=$out/quickstart-$1" --set "model.embedding_dtype=$1" > "$log" 2>&1; then
    cat "$log" >&2; exit 1
  fi
  grep -o "eval AUC [0-9.]*" "$log" | tail -1 | cut -d' ' -f3
}
fail=0
a32=$(auc fp32)
for d in bf16 fp16; do
  a16=$(auc $d)
  if python3 -c "import sys; sys.exit(0 if abs($a16 - $a32) <= 0.002 else 1)"; then
    echo "quickstart: eval AUC fp32 $a32, $d $a16 (|diff| <= 0.002): ok"
  else
    echo "quickstart: eval AUC fp32 $a32, $d $a16: differ by more than 0.002"; fail=1
  fi
done
exit $fail
