#!/usr/bin/env bash
# A model TorchRec can load: tools/to_torchrec.py converts Tessera's export to the state_dict of
# torchrec.models.dlrm.DLRM / DLRM_DCN, loads it (strict) and scores the eval set; the scores
# equal `tessera-train --eval-only --scores` within 1e-5. Models: the quickstart (DLRM, synthetic
# data, shortened), a DCNv2 with low-rank and a full-rank cross network, and criteo_sample (real
# Criteo rows, when ../shared/data is there). Needs the TorchRec venv of bench/torchrec_setup.sh
# (TORCHREC_VENV, default ~/.cache/tessera/venvs/torchrec): skipped (exit 77) without it.
# Usage: torchrec_check.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1; src=$2
venv=${TORCHREC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/venvs/torchrec}
py="$venv/bin/python"
if ! "$py" -c 'import torch, fbgemm_gpu, torchrec' > /dev/null 2>&1; then
  echo "SKIP: no TorchRec venv at $venv (bash bench/torchrec_setup.sh makes one)"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
one() {  # NAME CONFIG [--set ...]
  local name=$1 config=$2; shift 2
  local out="$tmp/$name"
  "$bin/tessera-train" --config "$config" --quiet --set "output.dir=$out" "$@" > "$tmp/$name.log" 2>&1 ||
    { echo "FAIL $name: training failed: $(tail -3 "$tmp/$name.log")"; failed=1; return; }
  "$bin/tessera-train" --eval-only --config "$config" --set "output.dir=$out" "$@" \
    --scores "$out/scores.txt" --inputs "$out/inputs.safetensors" > "$tmp/$name.eval.log" 2>&1 ||
    { echo "FAIL $name: eval failed: $(tail -3 "$tmp/$name.eval.log")"; failed=1; return; }
  if "$py" "$src/tools/to_torchrec.py" --model "$out/model.safetensors" --config "$out/config.yaml" \
       --out "$out/torchrec.pt" --check "$out/inputs.safetensors" --scores "$out/scores.txt" \
       > "$tmp/$name.check.log" 2>&1; then
    echo "$name: $(grep 'max |score' "$tmp/$name.check.log")"
  else
    echo "FAIL $name: $(tail -5 "$tmp/$name.check.log")"; failed=1
  fi
}
one quickstart "$src/configs/quickstart.yaml" --set data.synthetic.train_samples=65536 \
  --set data.synthetic.eval_samples=8192
one dcnv2_lowrank "$src/configs/dcnv2_mlperf.yaml" --set model.max_table_rows=2000 \
  --set data.batch_size=256 --set data.synthetic.pooling=mlperf_multi_hot_half \
  --set data.synthetic.train_samples=4096 --set data.synthetic.eval_samples=2048 \
  --set model.bottom_mlp=[64,32,16] --set model.embedding_dim=16 --set model.top_mlp=[64,32,1] \
  --set model.dcn.low_rank=32
one dcnv2_fullrank "$src/configs/dcnv2_mlperf.yaml" --set model.max_table_rows=2000 \
  --set data.batch_size=256 --set data.synthetic.pooling=mlperf_multi_hot_half \
  --set data.synthetic.train_samples=4096 --set data.synthetic.eval_samples=2048 \
  --set model.bottom_mlp=[64,32,16] --set model.embedding_dim=16 --set model.top_mlp=[64,32,1] \
  --set model.dcn.low_rank=0 --set model.dcn.num_layers=2
if [ -d "$src/../shared/data/criteo" ]; then
  one criteo_sample "$src/configs/criteo_sample.yaml"
fi
[ $failed -eq 0 ] && echo "torchrec: passed"
[ $failed -eq 0 ]
