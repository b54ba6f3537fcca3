#!/usr/bin/env bash
# A run is never lost to a signal: SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) at a
# random moment finishes the step under way, writes a checkpoint (train.checkpoint_every is 0
# here) and the model, says how to resume and exits 128 + the signal; rerunning the same
# command resumes, and every chain of interrupted runs ends with a model.safetensors
# byte-identical to a run never interrupted, with metrics.jsonl holding each step once (no
# duplicates after the resumes) and the effective config unchanged. One process, and 2 ranks
# under mpirun (the signal sent to one rank only: every rank stops at the same step). Then: a
# second SIGINT exits at once; a rerun with another optimizer is refused naming the key.
#
# Usage: signal_resume_check.sh BUILD_BIN_DIR SOURCE_DIR [SIGNALS [MPI_SIGNALS [SEED]]]
set -uo pipefail
bin=$1; src=$2
signals=${3:-8}; mpi_signals=${4:-4}; seed=${5:-7}
RANDOM=$seed
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; [ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
passed=0; failed=0
check() {  # name, condition result (0 = pass), message
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $1: $3"; fi
}
cat > "$tmp/sig.yaml" <<'YAML'
seed: 11
threads: 1
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [256, 64, 8]
  top_mlp: [256, 64, 1]
  tables:
    - {name: big, rows: 20000, features: [0, 1]}
    - {name: small, rows: 500, features: [2]}
data:
  format: synthetic
  batch_size: 256
  shuffle: true
  synthetic: {train_samples: 16384, eval_samples: 0, pooling: [2, 1, 1], zipf_exponent: 1.05}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.005}
  schedule: {warmup_steps: 100, decay_start: 1000, decay_steps: 500}
train: {steps: 1500, log_every: 50, checkpoint_every: 0}
output: {progress: false}
YAML
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }
run_bg() {  # MODE OUT LOG [FLAGS...]
  local mode=$1 out=$2 log=$3; shift 3
  if [ "$mode" = mpi ]; then
    (exec "${mpi[@]}" "$bin/tessera-train" --config "$tmp/sig.yaml" --quiet \
       --set "output.dir=$out" --set sharding.group_size=2 --set train.steps=300 "$@" \
       > "$log" 2>&1) &
  else
    (exec "$bin/tessera-train" --config "$tmp/sig.yaml" --quiet --set "output.dir=$out" "$@" \
       > "$log" 2>&1) &
  fi
  pid=$!
}
# Waits until the run in the background says it is training.
started() {
  local k
  for k in $(seq 1 600); do
    grep -q "info: training\|training .* on .* rank" "$1" 2>/dev/null && return
    kill -0 "$pid" 2>/dev/null || return
    sleep 0.05
  done
}
# Steps of the train_loss lines, in file order.
train_steps() { grep '"train_loss"' "$1" | grep -v '"status"' | sed 's/.*"step": \([0-9]*\).*/\1/'; }

chains() {  # MODE N
  local mode=$1 n=$2
  local straight="$tmp/$mode-straight" t0 duration rc
  run_bg "$mode" "$straight" "$tmp/$mode-straight.log"; started "$tmp/$mode-straight.log"
  t0=$(now_ms); wait "$pid"; rc=$?; pid=""
  duration=$(($(now_ms) - t0))
  check "$mode-straight" "$rc" "the uninterrupted run failed: $(tail -3 "$tmp/$mode-straight.log")"
  [ "$rc" -eq 0 ] || return
  local out="$tmp/$mode-chain" i=0 stopped=0 sig log at
  while [ $i -lt "$n" ]; do
    log="$tmp/$mode-run$i.log"
    sig=$([ $((RANDOM % 2)) -eq 0 ] && echo INT || echo TERM)
    at=$((RANDOM % (duration / (n + 1) + 1)))
    run_bg "$mode" "$out" "$log"
    # The offset counts from the start of training (a signal before the handlers exist, while
    # the process starts, ends it as the default action does).
    started "$log"
    sleep "$(secs "$at")"
    if [ "$mode" = mpi ]; then
      local ranks
      ranks=($(pgrep -P "$pid" -f tessera-train))
      [ ${#ranks[@]} -gt 0 ] && kill -s "$sig" "${ranks[$((RANDOM % ${#ranks[@]}))]}" 2>/dev/null
    else
      kill -s "$sig" "$pid" 2>/dev/null
    fi
    wait "$pid"; rc=$?; pid=""
    i=$((i + 1))
    if [ "$rc" -eq 0 ]; then  # finished before the signal: the chain is complete
      break
    fi
    stopped=$((stopped + 1))
    grep -q "stopped by SIG$sig after step [0-9]*" "$log"
    check "$mode-run$i-message" $? "SIG$sig at $(secs "$at") s: rc=$rc, no stop message: $(tail -3 "$log")"
    if [ "$mode" = one ]; then
      local want=$([ "$sig" = INT ] && echo 130 || echo 143)
      [ "$rc" -eq "$want" ]; check "$mode-run$i-rc" $? "SIG$sig: expected exit $want, got $rc"
    else
      [ "$rc" -ne 0 ]; check "$mode-run$i-rc" $? "mpirun exited 0 after a stop"
    fi
    local step
    step=$(sed -n 's/.*stopped by SIG[A-Z]* after step \([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$step" ] && [ "$(cat "$out/checkpoints/LATEST" 2>/dev/null)" = "ckpt-$step" ]
    check "$mode-run$i-checkpoint" $? "LATEST is not ckpt-$step after the stop"
    [ -f "$out/model.safetensors" ]; check "$mode-run$i-export" $? "no model exported at the stop"
    grep -q "Rerun the same command to resume from step $step" "$log"
    check "$mode-run$i-howto" $? "the message does not say how to resume"
  done
  # Finish the chain.
  log="$tmp/$mode-final.log"
  run_bg "$mode" "$out" "$log"; wait "$pid"; rc=$?; pid=""
  check "$mode-final" "$rc" "the final rerun failed: $(tail -3 "$log")"
  if [ "$stopped" -gt 0 ]; then
    grep -q "resumed from $out/checkpoints/ckpt-" "$log"; check "$mode-final-resumed" $? "did not resume"
  fi
  cmp -s "$straight/model.safetensors" "$out/model.safetensors"
  check "$mode-bit-identical" $? "after $stopped stops the model differs from the uninterrupted one"
  [ "$(train_steps "$out/metrics.jsonl")" = "$(train_steps "$straight/metrics.jsonl")" ]
  check "$mode-metrics-once" $? "metrics.jsonl steps differ from the uninterrupted run's: $(train_steps "$out/metrics.jsonl" | tr '\n' ' ')"
  [ "$(grep -c '"status": "done"' "$out/metrics.jsonl")" -eq 1 ]
  check "$mode-one-done" $? "expected one done line"
  if command -v python3 > /dev/null && python3 -c 'import sys' 2>/dev/null; then
    python3 - "$out" <<'PY'
import glob, struct, sys
# TensorBoard: every (tag, step) once across the directory's event files.
seen, dup = set(), []
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
        if c < 0x80: return v, i
for f in glob.glob(sys.argv[1] + "/events.out.tfevents.*"):
    b = open(f, "rb").read(); i = 0
    while i < len(b):
        n = struct.unpack_from("<Q", b, i)[0]; rec = b[i + 12:i + 12 + n]; i += 16 + n
        j, step, tags = 0, 0, []
        while j < len(rec):
            key, j = varint(rec, j)
            f_, t = key >> 3, key & 7
            if t == 0: v, j = varint(rec, j); step = v if f_ == 2 else step
            elif t == 1: j += 8
            elif t == 5: j += 4
            elif t == 2:
                ln, j = varint(rec, j); body = rec[j:j + ln]; j += ln
                if f_ == 5:  # summary: repeated Value { tag = 1 }
                    k = 0
                    while k < len(body):
                        key2, k = varint(body, k); ln2, k = varint(body, k)
                        val = body[k:k + ln2]; k += ln2
                        if val[:1] == b"\x0a":
                            tl, q = varint(val, 1); tags.append(val[q:q + tl].decode())
        for tag in tags:
            if (tag, step) in seen: dup.append((tag, step))
            seen.add((tag, step))
if dup: print("duplicated TensorBoard points:", dup[:5]); sys.exit(1)
PY
    check "$mode-tensorboard-once" $? "TensorBoard holds duplicated steps"
  fi
  echo "$mode: $stopped stops by SIGINT/SIGTERM at offsets up to $(secs $((duration / (n + 1)))) s after training started (uninterrupted run $(secs "$duration") s)"
}

chains one "$signals"
if [ "$mpi_signals" -gt 0 ] && command -v mpirun > /dev/null; then
  chains mpi "$mpi_signals"
fi

# A second SIGINT exits at once (no checkpoint wait): rc 130 either way, and the notice.
out="$tmp/twice"; log="$tmp/twice.log"
run_bg one "$out" "$log"; started "$log"; kill -INT "$pid"; kill -INT "$pid"; wait "$pid"; rc=$?; pid=""
[ "$rc" -eq 130 ]; check twice-rc $? "expected 130, got $rc: $(tail -3 "$log")"

# A changed optimizer is refused, naming the key and the ways out; train.resume=false starts a
# fresh run and moves the old run's files aside.
out="$tmp/refuse"
"$bin/tessera-train" --config "$tmp/sig.yaml" --quiet --set "output.dir=$out" \
  --set train.steps=100 --set train.checkpoint_every=50 > "$tmp/refuse.log" 2>&1
check refuse-setup $? "$(tail -3 "$tmp/refuse.log")"
cp "$out/config.yaml" "$tmp/refuse-config.yaml"
msg=$("$bin/tessera-train" --config "$tmp/sig.yaml" --quiet --set "output.dir=$out" \
      --set train.steps=100 --set optimizer.dense.lr=0.01 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "optimizer.dense.lr: '0.005' there, '0.01' here" <<<"$msg" &&
  grep -q "train.resume=false" <<<"$msg"
check refused "$?" "rc=$rc: $msg"
cmp -s "$tmp/refuse-config.yaml" "$out/config.yaml"
check refused-keeps-config $? "a refused resume rewrote config.yaml"
"$bin/tessera-train" --config "$tmp/sig.yaml" --quiet --set "output.dir=$out" \
  --set optimizer.dense.lr=0.01 --set train.resume=false --set train.steps=20 > "$tmp/fresh.log" 2>&1
rc=$?
check fresh-rc "$rc" "$(tail -3 "$tmp/fresh.log")"
aside=$(ls -d "$out"/previous-* 2>/dev/null | head -1)
[ -n "$aside" ] && [ -f "$aside/metrics.jsonl" ] && [ -d "$aside/checkpoints" ] &&
  [ "$(ls "$out"/events.out.tfevents.* | wc -l)" -eq 1 ] && [ "$(train_steps "$out/metrics.jsonl" | tail -1)" = 20 ]
check fresh-aside $? "the old run's files were not moved aside: $(ls "$out" "$aside" 2>&1 | tr '\n' ' ')"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
