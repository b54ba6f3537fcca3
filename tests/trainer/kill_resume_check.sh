#!/usr/bin/env bash
# Crash anywhere: SIGKILL the trainer at many points, rerun, and check every time that the rerun
# resumes from the last complete checkpoint, and that every chain of killed runs ends with a
# model.safetensors byte-identical to a run never interrupted.
#
# The run (one process, and 2 ranks under mpirun) has one table in the RocksDB tier with a small
# cache (rows are written back to RocksDB every step) and one in memory, and checkpoints every
# 10 steps. Kill points, drawn from a seeded random stream:
#   - at a time offset spread over the run (during steps, RocksDB write-back, checkpoints), or
#   - by the binary's test hook --test_crash_at_checkpoint_event=k: SIGKILL at the k-th durable
#     step of checkpoint writing (each fsync, the RocksDB shard checkpoint with its flush, the
#     rename, LATEST written and moved, each old checkpoint removed; trainer/checkpoint.h);
#   - under mpirun: one rank of the two, by either way (--test_crash_rank, or kill -9 of its pid).
# After a kill the output directory is rerun as it is: the rerun must say it resumed from the
# checkpoint LATEST named at the kill (or start over when there was none). A rerun that finishes
# before its kill point ends a chain: its model must equal the uninterrupted one, and the next
# chain starts from an empty directory. The last chain is finished without a kill.
#
# Usage: kill_resume_check.sh BUILD_BIN_DIR SOURCE_DIR [KILLS [MPI_KILLS [SEED]]]
#   defaults 50 kills of one process and 6 of one rank under mpirun (ctest trainer_kill_resume);
#   scripts/kill_anywhere.sh runs more.
set -uo pipefail
bin=$1; src=$2
kills=${3:-50}; mpi_kills=${4:-6}; seed=${5:-1}
RANDOM=$seed
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; [ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
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
  synthetic: {train_samples: 12800, eval_samples: 0, pooling: [2, 1, 1], zipf_exponent: 1.05}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.005}
  schedule: {warmup_steps: 20, decay_start: 60, decay_steps: 100}
train: {steps: 120, log_every: 100, checkpoint_every: 10}
output: {progress: false}
YAML
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }
# run_bg MODE OUT LOG [FLAGS...]: starts one run (MODE one or mpi) in the background, sets pid.
run_bg() {
  local mode=$1 out=$2 log=$3; shift 3
  if [ "$mode" = mpi ]; then
    (exec "${mpi[@]}" "$bin/tessera-train" --config "$tmp/kill.yaml" --quiet \
       --set "output.dir=$out" --set sharding.group_size=2 "$@" > "$log" 2>&1) &
  else
    (exec "$bin/tessera-train" --config "$tmp/kill.yaml" --quiet --set "output.dir=$out" "$@" \
       > "$log" 2>&1) &
  fi
  pid=$!
}
latest() { [ -f "$1/checkpoints/LATEST" ] && cat "$1/checkpoints/LATEST" || echo none; }

# One mode's test: the uninterrupted run, then `n` kills in chains, then the last chain finished.
kill_chains() {
  local mode=$1 n=$2 max_event=$3
  local straight="$tmp/$mode-straight" t0 t1 duration
  t0=$(now_ms)
  run_bg "$mode" "$straight" "$tmp/$mode-straight.log"; wait "$pid" 2>/dev/null; local rc=$?; pid=""
  t1=$(now_ms); duration=$((t1 - t0))
  check "$mode-straight" "$rc" "the uninterrupted run failed: $(tail -3 "$tmp/$mode-straight.log")"
  [ "$rc" -eq 0 ] || return
  local chain=0 out="$tmp/$mode-chain0" before="none" i=0 how log
  local hooked=0 timed=0 completed=0
  while [ $i -lt "$n" ]; do
    log="$tmp/$mode-run$i.log"
    local flags=()
    if [ $((RANDOM % 2)) -eq 0 ]; then
      how="event $((RANDOM % max_event + 1))"
      flags=(--test_crash_at_checkpoint_event="${how#event }")
      [ "$mode" = mpi ] && { flags+=(--test_crash_rank=$((RANDOM % 2))); how="$how ${flags[1]#--test_}"; }
      run_bg "$mode" "$out" "$log" "${flags[@]}"
    else
      local at=$((RANDOM % (duration * 7 / 10) + 20))
      how="at $(secs "$at") s"
      run_bg "$mode" "$out" "$log"
      sleep "$(secs "$at")"
      if [ "$mode" = mpi ]; then
        local ranks victim
        ranks=($(pgrep -P "$pid" -f tessera-train))
        if [ ${#ranks[@]} -gt 0 ]; then
          victim=${ranks[$((RANDOM % ${#ranks[@]}))]}
          kill -9 "$victim" 2>/dev/null
          how="$how, one rank"
        fi
      else
        kill -9 "$pid" 2>/dev/null
      fi
    fi
    wait "$pid" 2>/dev/null; rc=$?; pid=""
    # The run resumed from what LATEST named when the previous run died (a run killed during
    # its start may not have said so yet: then only a finished run must have).
    if [ "$before" = none ]; then
      ! grep -q "resumed from" "$log"
      check "$mode-run$i-fresh" $? "started without a checkpoint but says: $(grep 'resumed from' "$log")"
    elif grep -q "resumed from" "$log" || [ "$rc" -eq 0 ]; then
      grep -q "resumed from $out/checkpoints/$before at step" "$log"
      check "$mode-run$i-resume" $? "expected to resume from $before ($how): $(grep 'resumed from' "$log")"
    fi
    if [ "$rc" -eq 0 ]; then
      cmp -s "$straight/model.safetensors" "$out/model.safetensors"
      check "$mode-chain$chain-model" $? "chain $chain's model differs from the uninterrupted one"
      completed=$((completed + 1)); chain=$((chain + 1)); out="$tmp/$mode-chain$chain"; before=none
      continue  # not a kill
    fi
    # One process: killed is 137 (128 + SIGKILL); anything else is a failure. Under mpirun the
    # launcher's status says only that a rank died.
    if [ "$mode" = one ]; then
      check "$mode-run$i-killed" $([ "$rc" -eq 137 ] && echo 0 || echo 1) \
        "expected a SIGKILL ($how), got rc=$rc: $(tail -3 "$log")"
    fi
    if [ "${how%% *}" = event ]; then hooked=$((hooked + 1)); else timed=$((timed + 1)); fi
    before=$(latest "$out")
    if [ "$before" != none ]; then
      [ -f "$out/checkpoints/$before/state.safetensors" ]
      check "$mode-run$i-latest" $? "LATEST names $before, which is incomplete ($how)"
    fi
    i=$((i + 1))
  done
  log="$tmp/$mode-final.log"
  run_bg "$mode" "$out" "$log"; wait "$pid" 2>/dev/null; rc=$?; pid=""
  check "$mode-final" "$rc" "the last chain's final run failed: $(tail -3 "$log")"
  [ "$before" = none ] || { grep -q "resumed from $out/checkpoints/$before at step" "$log"
    check "$mode-final-resume" $? "the final run did not resume from $before"; }
  cmp -s "$straight/model.safetensors" "$out/model.safetensors"
  check "$mode-chain$chain-model" $? "chain $chain's model differs from the uninterrupted one"
  local kept
  kept=$(ls -d "$out"/checkpoints/ckpt-* 2>/dev/null | wc -l)
  check "$mode-kept-two" $([ "$kept" -eq 2 ] && echo 0 || echo 1) "expected 2 checkpoints kept, found $kept"
  echo "$mode: $i kills ($hooked at checkpoint steps, $timed at time offsets up to" \
       "$(secs $((duration * 7 / 10 + 20))) s), $((chain + 1)) chains, $completed finished by a rerun"
}

kill_chains one "$kills" 60
if [ "$mpi_kills" -gt 0 ]; then
  if command -v mpirun > /dev/null; then
    kill_chains mpi "$mpi_kills" 40
  else
    echo "mpirun not found: skipping the multi-rank kills"
  fi
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
