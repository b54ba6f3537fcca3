#!/usr/bin/env bash
# output.mllog: a short run of configs/dcnv2_mlperf.yaml at reduced size writes an MLPerf
# Training log that the MLPerf compliance checker (PyPI mlperf-logging) accepts under the
# training ruleset 6.0.0 (the last with dlrm_dcnv2; open division). The checker runs from a venv
# this test makes in the build tree (TESSERA_MLLOG_VENV overrides where); without Python's venv
# module or PyPI the test is skipped (exit 77).
# Usage: mllog_check.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1; src=$2
venv=${TESSERA_MLLOG_VENV:-$bin/../venv-mlperf-logging}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$venv/bin/python" -c 'import mlperf_logging' 2>/dev/null; then
  python3 -m venv "$venv" > "$tmp/venv.log" 2>&1 &&
    "$venv/bin/pip" install -q mlperf-logging >> "$tmp/venv.log" 2>&1 ||
    { echo "SKIP: cannot make a venv with mlperf-logging: $(tail -2 "$tmp/venv.log")"; exit 77; }
fi
out="$tmp/run"
"$bin/tessera-train" --config "$src/configs/dcnv2_mlperf.yaml" --quiet \
  --set model.max_table_rows=2000 --set data.batch_size=256 \
  --set data.synthetic.pooling=mlperf_multi_hot_half --set data.synthetic.train_samples=4096 \
  --set data.synthetic.eval_samples=1024 --set train.eval_every=8 \
  --set model.bottom_mlp=[64,32,128] --set model.top_mlp=[64,32,1] --set model.dcn.low_rank=32 \
  --set "output.dir=$out" --set output.mllog=mlperf.log > "$tmp/train.log" 2>&1 ||
  { echo "FAIL: the run failed: $(tail -3 "$tmp/train.log")"; exit 1; }
log="$out/mlperf.log"
[ -s "$log" ] || { echo "FAIL: no $log"; exit 1; }
failed=0
for key in submission_benchmark global_batch_size opt_base_learning_rate init_start init_stop \
           run_start run_stop block_start block_stop eval_start eval_stop eval_accuracy \
           train_samples eval_samples; do
  grep -q "\"key\": \"$key\"" "$log" || { echo "FAIL: no $key in the log"; failed=1; }
done
[ "$(grep -c '"key": "eval_accuracy"' "$log")" -eq 2 ] ||
  { echo "FAIL: expected 2 evaluations (step 8 and the end, 16)"; failed=1; }
grep -q '"key": "run_stop".*"status": "success"' "$log" || { echo "FAIL: run_stop not success"; failed=1; }
(cd "$tmp" && "$venv/bin/python" -m mlperf_logging.compliance_checker --usage training \
   --ruleset 6.0.0 "$log") > "$tmp/checker.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "SUCCESS" "$tmp/checker.log"; then
  echo "FAIL: the compliance checker (ruleset 6.0.0) rejected the log (rc=$rc):"
  tail -20 "$tmp/checker.log"; failed=1
else
  echo "compliance checker: $(grep SUCCESS "$tmp/checker.log" | head -1)"
fi
[ $failed -eq 0 ] && echo "mllog: passed"
[ $failed -eq 0 ]
