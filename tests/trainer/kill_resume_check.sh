#!/usr/bin/env bash
# Kill -9 during training, then resume: the run continues from its last checkpoint and its final
# model equals, byte for byte, a run never interrupted. The run has one table in the RocksDB
# tier (small cache, so rows are written back between checkpoints) and one in memory.
# The interrupted run is killed twice: once after its first checkpoint, and again after the
# resumed run has written a newer one.
# Usage: kill_resume_check.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1; src=$2
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0; failed=0
check() {  # name, condition result (0 = pass), message
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $1: $3"; fi
}
cat > "$tmp/kill.yaml" <<'YAML'
seed: 5
threads: 1
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [32, 8]
  top_mlp: [32, 1]
  tables:
    - {name: big, rows: 20000, features: [0, 1], storage: {tier: rocksdb, cache_rows: 1200, policy: lfu}}
    - {name: small, rows: 500, features: [2]}
data:
  format: synthetic
  batch_size: 256
  shuffle: true
  synthetic: {train_samples: 25600, eval_samples: 0, pooling: [2, 1, 1], zipf_exponent: 1.05}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.005}
  schedule: {warmup_steps: 20, decay_start: 100, decay_steps: 400}
train: {steps: 600, log_every: 100, checkpoint_every: 20}
output: {progress: false}
YAML
train() {  # output dir, log file
  "$bin/tessera-train" --config "$tmp/kill.yaml" --quiet --set "output.dir=$1" > "$2" 2>&1
}
train_bg() {  # output dir, log file; sets pid (exec: the pid is tessera-train's own)
  (exec "$bin/tessera-train" --config "$tmp/kill.yaml" --quiet --set "output.dir=$1" > "$2" 2>&1) &
  pid=$!
}
# Waits (up to 120 s) until LATEST exists and differs from $2; prints it.
wait_latest() {
  local latest=$1/checkpoints/LATEST not=$2
  for _ in $(seq 1 6000); do
    if [ -f "$latest" ] && [ "$(cat "$latest")" != "$not" ]; then cat "$latest"; return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}

train "$tmp/straight" "$tmp/straight.log"
check straight_run $? "the uninterrupted run failed: $(tail -3 "$tmp/straight.log")"

out="$tmp/killed"
train_bg "$out" "$tmp/run1.log"
first=$(wait_latest "$out" "")
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rc=$?
check first_kill $([ "$rc" -eq 137 ] && [ -n "$first" ] && echo 0 || echo 1) \
  "expected to kill the run after a checkpoint (rc=$rc, LATEST='$first')"

train_bg "$out" "$tmp/run2.log"
second=$(wait_latest "$out" "$first")
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rc=$?
check second_kill $([ "$rc" -eq 137 ] && [ -n "$second" ] && echo 0 || echo 1) \
  "expected to kill the resumed run after a newer checkpoint (rc=$rc, LATEST='$second')"
grep -q "resumed from .*$first" "$tmp/run2.log"
check resumed_first $? "the second run did not say it resumed from $first"
pid=""

train "$out" "$tmp/run3.log"
check final_run $? "the final resumed run failed: $(tail -3 "$tmp/run3.log")"
grep -q "resumed from .*$second" "$tmp/run3.log"
check resumed_second $? "the final run did not say it resumed from $second"
cmp -s "$tmp/straight/model.safetensors" "$out/model.safetensors"
check same_model $? "the resumed model differs from the uninterrupted one"
n=$(ls -d "$out"/checkpoints/ckpt-* 2>/dev/null | wc -l)
check kept_two $([ "$n" -eq 2 ] && echo 0 || echo 1) "expected 2 checkpoints kept, found $n"
echo "first kill after $first, second after $second"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
