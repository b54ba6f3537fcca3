#!/usr/bin/env bash
# Sharded dynamic tables through tessera-train (ctest trainer_dynamic_sharded): checkpoints of
# dynamic tables resume and reshard by key. Exact mode, a dynamic table with ttl and a coin, one
# without eviction, one static table.
#   1. resume: 2 ranks for 16 steps == 2 ranks for 8, then resumed to 16 (model.safetensors
#      byte-identical: keys, rows, dense);
#   2. reshard 2 -> 1: the 2-rank checkpoint at step 8 restored in one process (train.steps 8:
#      nothing more to train) exports the 2-rank model at step 8 byte for byte (keys re-hashed
#      into one table, rows and optimizer state copied);
#   3. reshard 1 -> 4: a one-process checkpoint at step 8 restored on 4 ranks (1x4, and 2x2
#      replicas)
#      exports the one-process model byte for byte; 4 ranks then train on from it.
#   4. over the RocksDB tier: both dynamic tables in each rank's shard databases with caches
#      smaller than the keys they hold: 2 ranks for 16 steps export run 1's model byte for byte,
#      uninterrupted and resumed from the tiered step-8 checkpoint, and that checkpoint reshards
#      into one process (in memory) as run 2's did.
# Usage: dynamic_sharded_check.sh <build/bin> <source dir>   (KEEP=1 keeps the work directory)
set -euo pipefail
BIN=$1
SRC=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/tessera_dynshard_XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
cat > "$W/c.yaml" <<'YAML'
seed: 77
model:
  type: dlrm
  num_dense: 13
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - name: t0
      features: [0]
      dynamic:
        capacity_rows: 20000
        admission: {probability: 0.5}
        eviction: {policy: ttl, ttl_steps: 5}
    - name: t1
      features: [1]
      dynamic: {capacity_rows: 20000}
    - {name: t2, rows: 1000, features: [2]}
data:
  format: synthetic
  batch_size: 32
  synthetic: {train_samples: 8192, eval_samples: 256, pooling: [1, 2, 1]}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: adagrad, lr: 0.05}
train: {epochs: 1, log_every: 4, checkpoint_every: 8}
YAML
run() {  # ranks dir steps [extra --set ...]
  local np=$1 dir=$2 steps=$3
  shift 3
  local cmd=("$BIN/tessera-train" --config "$W/c.yaml" --set "output.dir=$W/$dir"
             --set "train.steps=$steps" "$@")
  if [ "$np" = 1 ]; then "${cmd[@]}" > "$W/$dir.log" 2>&1
  else mpirun --oversubscribe -np "$np" "${cmd[@]}" > "$W/$dir.log" 2>&1; fi || {
    cat "$W/$dir.log"; echo "FAIL: run $dir"; exit 1; }
}
same() {  # a b what
  cmp -s "$W/$1/model.safetensors" "$W/$2/model.safetensors" || {
    echo "FAIL: $3: $1/model.safetensors differs from $2/model.safetensors"; exit 1; }
  echo "ok: $3"
}
# 1. Resume on the same shape.
run 2 full 16
run 2 part 8
cp "$W/part/model.safetensors" "$W/at8.safetensors"
cp -r "$W/part/checkpoints" "$W/ckpt8"
run 2 part 16
same part full "2 ranks resumed at step 8 == uninterrupted"
# 2. Reshard 2 -> 1: copy the step-8 checkpoint into a fresh directory of one process.
mkdir -p "$W/two2one" "$W/ref8"
cp -r "$W/ckpt8" "$W/two2one/checkpoints"
cp "$W/at8.safetensors" "$W/ref8/model.safetensors"
run 1 two2one 8
same two2one ref8 "2-rank checkpoint resharded into one process"
# 3. Reshard 1 -> 4 (1x4 and 2x2).
run 1 one 8
for g in 4 2; do
  mkdir -p "$W/one2four$g"
  cp -r "$W/one/checkpoints" "$W/one2four$g/"
  run 4 "one2four$g" 8 --set "sharding.group_size=$g"
  same "one2four$g" one "one-process checkpoint resharded onto 4 ranks (group size $g)"
done
run 4 one2four4 12 --set sharding.group_size=4
grep -q "dynamic_table" "$W/one2four4/metrics.jsonl" || { echo "FAIL: no dynamic stats"; exit 1; }
echo "ok: 4 ranks trained on from the resharded checkpoint"
# 4. Over the RocksDB tier (shard databases under output.dir/tables).
tier=(--set model.tables.0.storage.tier=rocksdb --set model.tables.0.storage.cache_rows=300
      --set model.tables.1.storage.tier=rocksdb --set model.tables.1.storage.cache_rows=300)
run 2 tier 16 "${tier[@]}"
same tier full "2 ranks, dynamic tables over the tier == in memory"
ls -d "$W/tier"/tables/*/rank1-shard* > /dev/null 2>&1 || {
  echo "FAIL: no shard databases under $W/tier/tables"; ls -R "$W/tier" | head -20; exit 1; }
run 2 tierpart 8 "${tier[@]}"
mkdir -p "$W/tier2one"
cp -r "$W/tierpart/checkpoints" "$W/tier2one/checkpoints"
run 2 tierpart 16 "${tier[@]}"
same tierpart full "2 ranks over the tier resumed at step 8 == uninterrupted in memory"
run 1 tier2one 8
same tier2one ref8 "tiered 2-rank checkpoint resharded into one process in memory"
