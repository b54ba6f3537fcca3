#!/usr/bin/env bash
# The Criteo 1TB gzip reader alone (records/s, CPU seconds) against the trainer's consumption
# (tessera-bench, configs/bench/kaggle.yaml: the Criteo one-hot shape, batch 2048), side by side
# in one run; docs/PERFORMANCE.md "Criteo 1TB gzip reader" quotes it. The input is the Criteo
# sample repeated (default 400 times: 400k records, 96 MB of text, ~34 MB gzip -6), so its
# compression ratio is that of real Criteo text (the repeats are 240 KB apart, beyond
# deflate's 32 KB window).
# usage: bench/gzip_reader.sh [build dir, default build] [repeats, default 400] [runs, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-400}
runs=${3:-3}
sample=$root/../shared/data/criteo/kaggle_train_head1000.tsv
tmp=$(mktemp -d /tmp/tessera_gzip_bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq "$repeats"); do cat "$sample"; echo; done > "$tmp/day_0.tsv"
gzip -6 -c "$tmp/day_0.tsv" > "$tmp/day_0.gz"
echo "input: $(wc -l < "$tmp/day_0.tsv") lines, $(stat -c %s "$tmp/day_0.tsv") bytes of text," \
     "$(stat -c %s "$tmp/day_0.gz") bytes gzip -6"
t() { /usr/bin/time -f "    cpu: user %U s, sys %S s, wall %e s" "$@"; }
for run in $(seq "$runs"); do
  echo "run $run"
  t gzip -dc "$tmp/day_0.gz" > /dev/null
  echo "    (above: gzip -dc alone, the inflate cost)"
  for threads in 1 2; do
    t "$build/bin/tessera-data" read --input "$tmp/day_0.gz" --rows-preset kaggle \
        --threads "$threads"
  done
  t "$build/bin/tessera-data" read --input "$tmp/day_0.tsv" --rows-preset kaggle
done
echo "trainer consumption (synthetic batches of the same shape, no reader):"
"$build/bin/tessera-bench" --config "$root/configs/bench/kaggle.yaml" --steps 20 --warmup 3 \
    | grep -E "samples/s" | head -2
# The same model trained from the text and from the .gz through tessera-train (the reader on
# its prefetch thread, as in a real run): equal samples/s means the trainer never waited.
for input in day_0.tsv day_0.gz; do
  cat > "$tmp/train_$input.yaml" <<YAML
seed: 1
model:
  type: dlrm
  num_dense: 13
  embedding_dim: 16
  bottom_mlp: [512, 256, 16]
  top_mlp: [512, 256, 1]
  table_rows: criteo_kaggle
  max_table_rows: 1000000
data: {format: criteo_tsv, train: $tmp/$input, batch_size: 2048}
optimizer:
  embedding: {type: rowwise_adagrad, lr: 0.05}
  dense: {type: sgd, lr: 0.05}
train: {steps: 24, log_every: 8}
output: {dir: $tmp/run_$input, export: "", progress: false}
YAML
  echo "tessera-train from $input:"
  "$build/bin/tessera-train" --config "$tmp/train_$input.yaml" 2>&1 | grep "^trained"
done
