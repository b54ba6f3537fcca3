#!/usr/bin/env bash
# Side-by-side CPU throughput: tessera-bench against a PyTorch DLRM of the same shape
# (bench/pytorch_dlrm.py, Debian's python3-torch) on the three configs of docs/PERFORMANCE.md,
# with 1 and 2 threads. Prints one markdown table; raw JSON lines go to $OUT_JSON.
#   bash bench/cpu_compare.sh [build/bin]        (needs: apt-get install python3-torch)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin}
steps=${STEPS:-30}
out=${OUT_JSON:-/tmp/tessera_cpu_compare.jsonl}
: > "$out"
py=/usr/bin/python3
# Debian's OpenBLAS falls back to SSE3 kernels on CPUs newer than it (tools/blas_env.h): give
# PyTorch the same AVX-512/AVX2 kernels tessera-bench selects for itself.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
declare -A cfg=([small]=configs/bench/small.yaml [kaggle]=configs/bench/kaggle.yaml
                [mlperf-mini]=configs/bench/mlperf_mini.yaml)
printf '| config | threads | tessera samples/s | pytorch samples/s | ratio |\n|---|---|---|---|---|\n'
for name in small kaggle mlperf-mini; do
  for t in 1 2; do
    ts=$(OMP_NUM_THREADS=$t "$bin/tessera-bench" --config "${cfg[$name]}" --threads "$t" \
           --steps "$steps" --name "tessera-$name" --json "$out" | tail -1 |
         "$py" -c 'import json,sys; print(round(json.load(sys.stdin)["samples_per_sec"]))')
    ps=$(OMP_NUM_THREADS=$t "$py" bench/pytorch_dlrm.py --preset "$name" --threads "$t" \
           --steps "$steps" | tee -a "$out" |
         "$py" -c 'import json,sys; print(round(json.load(sys.stdin)["samples_per_sec"]))')
    printf '| %s | %d | %s | %s | %.2fx |\n' "$name" "$t" "$ts" "$ps" \
      "$("$py" -c "print($ts / $ps)")"
  done
done
