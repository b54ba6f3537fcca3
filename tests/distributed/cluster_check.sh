#!/usr/bin/env bash
# Correct across hosts: Tessera on 2 emulated hosts x 2 ranks (scripts/cluster.sh: network
# namespaces, 1 gbit/s links, TCP between the hosts, shared memory within one) trains what it
# trains on one host.
#   1. The distributed GoogleTest suites that compare ranks with one process, run across the two
#      hosts: trainer equivalence (2x2 in both layouts, every sharding type: data-parallel,
#      table-, row-, table-row-, column-wise, grid; DLRM with row-wise AdaGrad; exact mode ==
#      one process within the float-order tolerance), sharded checkpoints (a
#      RocksDB-tier table, exact and average mode) and resharding (4 -> 2, 4 -> 1, 1 -> 4 ranks).
#   2. tessera-train with a RocksDB-tier table, exact mode 2x2 in both layouts (replicas on one
#      host: replicas_adjacent; sharding groups on one host: groups_contiguous) and a row-wise /
#      grid plan: the exported model is byte-identical to the same 4 ranks on one host.
#   3. Checkpoints across hosts: 2 hosts to step 20, one host (4 ranks) to 40, 2 hosts to 60:
#      byte-identical to the run never interrupted; and 2 hosts -> one process (resharded) ->
#      2 hosts: each run resumes from the previous one's checkpoint, and the chain ends
#      byte-identical to the same chain on one host (4 ranks -> one process -> 4 ranks).
#   4. The calibrate worker's groups at once across the hosts (strided and contiguous).
# Skips (exit 77) where scripts/cluster.sh cannot make namespaces (not root, no ip netns).
# Usage: cluster_check.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1; src=$2
cluster="$src/scripts/cluster.sh"
export TESSERA_CLUSTER_PREFIX=tsr-cc TESSERA_CLUSTER_NET=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'bash "$cluster" down > /dev/null 2>&1; rm -rf "$tmp"' EXIT
bash "$cluster" down > /dev/null 2>&1  # what a killed earlier run of this check left
bash "$cluster" up 2 2 --link 1gbit
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: cluster.sh up failed (rc $rc)"; exit 1; }

passed=0; failed=0
check() {  # name, status (0 = pass), message
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1: $3"; fi
}
across() { bash "$cluster" run -- "$@"; }
local4() { mpirun --oversubscribe --allow-run-as-root -np 4 "$@"; }

# 1. The GoogleTest suites, across the hosts.
# The equivalence suite's 2x2 shapes (both layouts, every sharding type; DLRM with row-wise
# AdaGrad); the other two whole.
declare -A filter=([trainer_equivalence]='*_2x2_*_dlrm_rwadagrad'
                   [sharded_checkpoint]='*' [sharded_reshard]='*')
for t in trainer_equivalence sharded_checkpoint sharded_reshard; do
  bin="$build/tests/distributed_${t}_test"
  across "$bin" --gtest_filter="${filter[$t]}" > "$tmp/$t.log" 2>&1
  check "gtest $t across 2 hosts ($(grep -oE 'PASSED.*[0-9]+ tests?' "$tmp/$t.log" | tr -d '\033' | sed 's/\[m//g'))" $? \
    "$(grep -E 'FAIL|Failure|error' "$tmp/$t.log" | head -5)"
done

# 2. and 3. tessera-train end to end.
cat > "$tmp/c.yaml" <<'YAML'
seed: 7
threads: 1
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [32, 8]
  top_mlp: [32, 1]
  tables:
    - {name: big, rows: 20000, features: [0, 1], storage: {tier: rocksdb, cache_rows: 1500, policy: lfu}}
    - {name: mid, rows: 3000, features: [2]}
    - {name: small, rows: 500, features: [3]}
data:
  format: synthetic
  batch_size: 128
  shuffle: true
  synthetic: {train_samples: 30720, eval_samples: 0, pooling: [2, 1, 1, 3], zipf_exponent: 1.05}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.005}
train: {steps: 60, log_every: 1000, checkpoint_every: 20}
output: {progress: false}
YAML
cat > "$tmp/plan.yaml" <<'YAML'
group_size: 2
tables:
  - {name: big, type: row_wise, shards: [{rank: 0, rows: [0, 12000]}, {rank: 1, rows: [12000, 20000]}]}
  - name: mid
    type: grid
    shards:
      - {rank: 0, rows: [0, 1800], cols: [0, 4]}
      - {rank: 1, rows: [0, 1800], cols: [4, 8]}
      - {rank: 1, rows: [1800, 3000]}
  - {name: small, type: table_wise, shards: [{rank: 1}]}
YAML
train() {  # where(across|local4|one) out extra-args...
  local where=$1 out=$2; shift 2
  local cmd=("$build/bin/tessera-train" --config "$tmp/c.yaml" --quiet --set "output.dir=$out" "$@")
  case $where in
    across) across "${cmd[@]}" ;;
    local4) local4 "${cmd[@]}" ;;
    one) "${cmd[@]}" ;;
  esac
}
for layout in replicas_adjacent groups_contiguous; do
  opts=(--set sharding.group_size=2 --set "sharding.layout=$layout" --set "sharding.plan=$tmp/plan.yaml")
  train local4 "$tmp/$layout-local" "${opts[@]}" > "$tmp/$layout-local.log" 2>&1
  check "$layout: 4 ranks on one host" $? "$(tail -3 "$tmp/$layout-local.log")"
  train across "$tmp/$layout-across" "${opts[@]}" > "$tmp/$layout-across.log" 2>&1
  check "$layout: 2 hosts x 2 ranks" $? "$(tail -3 "$tmp/$layout-across.log")"
  cmp -s "$tmp/$layout-local/model.safetensors" "$tmp/$layout-across/model.safetensors"
  check "$layout: 2 hosts x 2 == 1 host x 4, byte for byte" $? "the exported models differ"
done

# Checkpoints across hosts, resumed on one host (same shape) and back.
opts=(--set sharding.group_size=2 --set "sharding.plan=$tmp/plan.yaml")
ref="$tmp/replicas_adjacent-across/model.safetensors"
out="$tmp/hop"
train across "$out" "${opts[@]}" --set train.steps=20 > "$tmp/hop1.log" 2>&1
check "hop 1: 2 hosts to step 20" $? "$(tail -3 "$tmp/hop1.log")"
train local4 "$out" "${opts[@]}" --set train.steps=40 > "$tmp/hop2.log" 2>&1
check "hop 2: one host (4 ranks) to step 40" $? "$(tail -3 "$tmp/hop2.log")"
grep -q "resumed from $out/checkpoints/ckpt-20 at step 20" "$tmp/hop2.log"
check "hop 2 resumed from ckpt-20" $? "$(grep -i resum "$tmp/hop2.log")"
train across "$out" "${opts[@]}" > "$tmp/hop3.log" 2>&1
check "hop 3: 2 hosts to step 60" $? "$(tail -3 "$tmp/hop3.log")"
grep -q "resumed from $out/checkpoints/ckpt-40 at step 40" "$tmp/hop3.log"
check "hop 3 resumed from ckpt-40" $? "$(grep -i resum "$tmp/hop3.log")"
cmp -s "$ref" "$out/model.safetensors"
check "hops: byte-identical to the uninterrupted run" $? "the exported models differ"

# Resharded: 2 hosts x 2 -> one process -> 2 hosts x 2, against the same chain on one host
# (4 ranks -> one process -> 4 ranks): each run resumes from the previous one's checkpoint and
# the two chains end byte-identical (a reshard is a copy; only where the ranks run differs).
for where in across local4; do
  out="$tmp/reshard-$where"
  train $where "$out" "${opts[@]}" --set train.steps=20 > "$tmp/rs1-$where.log" 2>&1
  check "reshard ($where) 1: 4 ranks to step 20" $? "$(tail -3 "$tmp/rs1-$where.log")"
  train one "$out" --set train.steps=40 > "$tmp/rs2-$where.log" 2>&1
  check "reshard ($where) 2: one process to step 40" $? "$(tail -3 "$tmp/rs2-$where.log")"
  grep -q "resumed from $out/checkpoints/ckpt-20 at step 20" "$tmp/rs2-$where.log"
  check "reshard ($where) 2 resumed from ckpt-20" $? "$(grep -i resum "$tmp/rs2-$where.log")"
  train $where "$out" "${opts[@]}" > "$tmp/rs3-$where.log" 2>&1
  check "reshard ($where) 3: 4 ranks to step 60" $? "$(tail -3 "$tmp/rs3-$where.log")"
  grep -q "resumed from $out/checkpoints/ckpt-40 at step 40" "$tmp/rs3-$where.log"
  check "reshard ($where) 3 resumed from ckpt-40" $? "$(grep -i resum "$tmp/rs3-$where.log")"
done
[ -f "$tmp/reshard-across/model.safetensors" ] &&
  cmp -s "$tmp/reshard-across/model.safetensors" "$tmp/reshard-local4/model.safetensors"
check "reshard chain across hosts == the same chain on one host, byte for byte" $? \
  "the exported models differ"

# 4. Calibrate across the hosts measures a world size below the cross-host world as that world's
# groups calling at once (tools/plan_calibrate_comm.cc): strided, each group spans the hosts
# (cross-node points of 2 groups); contiguous, each group on one host while the other runs its
# own (same-node points of 2 groups, with the beyond-cache all-reduce).
worker() {  # split, output
  bash "$cluster" mpirun -np 4 --map-by ppr:2:node "$build/bin/tessera-plan" calibrate \
    --seconds_per_point=0.02 --collectives_groups="2:$1" --collectives_worker "$2"
}
worker strided "$tmp/g-strided.txt" > "$tmp/g-strided.log" 2>&1 &&
  grep -qx "scope cross_node" "$tmp/g-strided.txt" && grep -qx "groups 2" "$tmp/g-strided.txt" &&
  grep -qE "^all_to_all 2 " "$tmp/g-strided.txt"
check "calibrate worker: 2 groups of 2 across the hosts at once" $? \
  "$(cat "$tmp/g-strided.txt" "$tmp/g-strided.log" 2>/dev/null | tail -8)"
worker contiguous "$tmp/g-contiguous.txt" > "$tmp/g-contiguous.log" 2>&1 &&
  ! grep -q "scope" "$tmp/g-contiguous.txt" && grep -qx "groups 2" "$tmp/g-contiguous.txt" &&
  awk '$1 == "all_reduce" && $2 == 2 && $6 > 0 {found = 1} END {exit !found}' \
    "$tmp/g-contiguous.txt"
check "calibrate worker: 2 groups of 2, each on one host, at once" $? \
  "$(cat "$tmp/g-contiguous.txt" "$tmp/g-contiguous.log" 2>/dev/null | tail -8)"

bash "$cluster" stats
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
