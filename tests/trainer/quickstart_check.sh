#!/usr/bin/env bash
# The quickstart promise, checked end to end: configs/quickstart.yaml's planted model has
# AUC >= 0.75, and the trained model closes at least 80% of the way from chance to it.
# Usage: quickstart_check.sh BUILD_BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1; src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/tessera-train" --config "$src/configs/quickstart.yaml" --quiet --set "output.dir=$out" \
  | tee "$out/stdout"
python3 - "$out/stdout" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
auc = float(re.search(r"eval AUC ([0-9.]+)", text).group(1))
planted = float(re.search(r"planted model AUC ([0-9.]+)", text).group(1))
closed = (auc - 0.5) / (planted - 0.5)
print(f"quickstart: eval AUC {auc:.4f}, planted AUC {planted:.4f}, closed {100 * closed:.1f}%")
assert planted >= 0.75, f"planted AUC {planted} < 0.75"
assert closed >= 0.8, f"closed only {100 * closed:.1f}% of the gap (need 80%)"
print("1 passed, 0 failed")
PY
