#!/usr/bin/env bash
# Side-by-side CPU throughput on the three configs of docs/PERFORMANCE.md, 1 and 2 threads:
#   tessera-bench fp32 and bf16 dense math (--set model.dense_dtype=bf16),
#   the PyTorch DLRM of the same shape (bench/pytorch_dlrm.py, Debian's python3-torch) in fp32 and
#   under torch.autocast("cpu", torch.bfloat16), with the same optimizer work (row-wise AdaGrad
#   tables, SGD dense),
#   TorchRec + FBGEMM on PyPI's current torch (bench/torchrec_dlrm.py: EmbeddingBagCollection
#   sharded by DistributedModelParallel, FBGEMM's CPU TBE with fused EXACT_ROWWISE_ADAGRAD,
#   DLRMTrain, dense SGD) in fp32 and under autocast, from the venv of bench/torchrec_setup.sh
#   (TORCHREC_VENV, default ~/.cache/tessera/venvs/torchrec; skipped with a note when absent),
#   and the bare matmuls of the step's MLP products (bench/dense_gemm_bench.cc): OpenBLAS sgemm
#   and oneDNN fp32 as the fp32 ceiling, oneDNN bf16 (operands already bf16) as the bf16 one.
# PyTorch gets its best setup here: Debian's OpenMP build of OpenBLAS on its library path (the
# default pthread build fights libgomp's threads, and 2 threads ran slower than 1), the AVX-512
# OpenBLAS kernels, one intra-op thread pool of --threads, and the OpenMP wait tessera-bench chose
# in the same round (tools/omp_wait.h: on idle cores libgomp's default spin, which PyTorch and
# TorchRec ran 1.1-1.4x faster at 2 threads than with PASSIVE on a quiet AMX Xeon; on a loaded
# machine OMP_WAIT_POLICY=PASSIVE, measured faster there). The script checks that PyTorch's
# 2-thread runs beat its 1-thread runs and says so.
# Runs are interleaved (every program once per round, REPEATS rounds) and the table shows medians
# with the min-max spread; raw JSON lines go to $OUT_JSON. A second table gives CPU ms per step
# (all threads of the process; the main thread's for the bare GEMMs): on a loaded machine wall
# time measures the load, and the 1-thread CPU times are what a quiet core would take.
#   bash bench/cpu_compare.sh [build/bin]      (needs: apt-get install python3-torch)
#   REPEATS=3 STEPS=20 CONFIGS="small kaggle" bash bench/cpu_compare.sh
#   TORCHREC_VENV=/path/to/venv bash bench/cpu_compare.sh
# The first lines of $OUT_JSON record the machine (CPU model, AMX / AVX512_BF16 flags, Linux
# kernel); every TorchRec line records torch / torchrec / fbgemm-gpu-cpu versions and the
# embedding kernel that ran (FBGEMM's TBE class, its optimizer, precision and device).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin}
steps=${STEPS:-20}
repeats=${REPEATS:-3}
configs=${CONFIGS:-small kaggle mlperf-mini skewed}
out=${OUT_JSON:-/tmp/tessera_cpu_compare.jsonl}
: > "$out"
py=/usr/bin/python3
torchrec_py=${TORCHREC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/venvs/torchrec}/bin/python
if [ ! -x "$torchrec_py" ]; then
  echo "cpu_compare: no TorchRec venv at $torchrec_py (bash bench/torchrec_setup.sh DIR, then" \
       "TORCHREC_VENV=DIR): TorchRec columns skipped" >&2
  torchrec_py=""
fi
# Debian's OpenBLAS falls back to SSE3 kernels on CPUs newer than it (tools/blas_env.h): give
# PyTorch the same AVX-512/AVX2 kernels tessera-bench selects for itself.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
openmp_blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
[ -e "$openmp_blas/libblas.so.3" ] || { echo "cpu_compare: needs libopenblas0-openmp" >&2; exit 1; }
torch_env=(LD_LIBRARY_PATH="$openmp_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
# The anchors' OpenMP wait: what the last tessera-bench run reported in its JSON line ("omp_wait":
# "spin ..." on idle cores, then the anchors keep libgomp's default spin; else PASSIVE).
anchor_wait=(OMP_WAIT_POLICY=PASSIVE)
set_anchor_wait() {
  local wait
  wait=$(printf '%s' "$1" |
    "$py" -c 'import json,sys; print(json.loads(sys.stdin.read()).get("omp_wait",""))' 2>/dev/null)
  case "$wait" in
    spin*) anchor_wait=(TESSERA_ANCHOR_WAIT=libgomp-default) ;;
    *) anchor_wait=(OMP_WAIT_POLICY=PASSIVE) ;;
  esac
}
declare -A cfg=([small]=configs/bench/small.yaml [kaggle]=configs/bench/kaggle.yaml
                [mlperf-mini]=configs/bench/mlperf_mini.yaml [skewed]=configs/bench/skewed.yaml)

tag() {  # adds "round", "config", "impl" keys to the JSON line on stdin
  "$py" -c 'import json,sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line); d.update(round=int(sys.argv[1]), config=sys.argv[2], impl=sys.argv[3])
        print(json.dumps(d))' "$@"
}

echo "cpu_compare: $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" -c 'import json, platform, re
info = open("/proc/cpuinfo").read()
model = re.search(r"model name\s*:\s*(.*)", info)
flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
print(json.dumps({"impl": "machine", "cpu": model.group(1) if model else "?", "cores": int(sys.argv[1]),
                  "linux": platform.release(), "amx_bf16": "amx_bf16" in flags,
                  "avx512_bf16": "avx512_bf16" in flags, "avx512f": "avx512f" in flags}))' \
  "$(nproc)" 2>/dev/null >> "$out" || true
for r in $(seq 1 "$repeats"); do
  for t in 1 2; do
    # The bare products at their best: a spinning pool's thresholds (GemmThreads).
    OMP_NUM_THREADS=$t GOMP_SPINCOUNT=100000 "$bin/dense_gemm_bench" \
      --benchmark_filter='BM_StepGemms/(Sgemm|DnnlF32|DnnlBf16)/' \
      --benchmark_min_time=0.5 --benchmark_format=json 2>/dev/null |
      "$py" -c 'import json,sys
impls = {"Sgemm": "sgemm", "DnnlF32": "dnnl-f32", "DnnlBf16": "dnnl-bf16"}
for b in json.load(sys.stdin)["benchmarks"]:
    impl = impls[b["name"].split("/")[1]]
    print(json.dumps({"round": int(sys.argv[1]), "impl": impl, "threads": int(sys.argv[2]),
                      "config": b["label"], "gflops": b["GFLOP/s"], "ms_per_step": b["ms/step"],
                      "cpu_ms_per_step": b["cpu_time"] / 1e6}))' \
      "$r" "$t" >> "$out"
  done
  for name in $configs; do
    for t in 1 2; do
      for dt in fp32 bf16; do
        line=$(OMP_NUM_THREADS=$t "$bin/tessera-bench" --config "${cfg[$name]}" --threads "$t" \
          --steps "$steps" --name "tessera-$name" --set "model.dense_dtype=$dt" 2>/dev/null |
          tail -1) || true
        if [ -n "$line" ]; then
          printf '%s\n' "$line" | tag "$r" "$name" "tessera-$dt" >> "$out"
          set_anchor_wait "$line"
        fi
        env "${torch_env[@]}" "${anchor_wait[@]}" OMP_NUM_THREADS=$t "$py" bench/pytorch_dlrm.py \
          --preset "$name" --threads "$t" --steps "$steps" --dtype "$dt" |
          tag "$r" "$name" "pytorch-$dt" >> "$out" || true
        # PyPI's torch brings its own OpenMP and oneDNN; the same waiting.
        [ -z "$torchrec_py" ] || env "${anchor_wait[@]}" OMP_NUM_THREADS=$t "$torchrec_py" \
          bench/torchrec_dlrm.py --preset "$name" --threads "$t" --steps "$steps" --dtype "$dt" \
          2>/dev/null | tail -1 | tag "$r" "$name" "torchrec-$dt" >> "$out" || true
      done
    done
  done
  echo "cpu_compare: round $r done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
"$py" bench/cpu_compare_report.py "$out"
