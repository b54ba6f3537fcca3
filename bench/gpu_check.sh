#!/usr/bin/env bash
# gpu_check.sh: everything that needs a GPU, in one go, within 8 minutes (docs/CUDA.md).
#   1. configure and build for sm_90 into build-gpu (ninja, -j16): the CUDA tests, tessera-train,
#      tessera-bench and the GPU benchmarks
#   2. every CUDA test (ctest -L cuda) and the NCCL communicator tests if present
#   3. quickstart.yaml trained on the GPU (--set device=cuda) and on the CPU (in the background,
#      meanwhile): eval AUC within 0.005 and loss curves within 0.01 (bench/gpu_check_report.py)
#   4. benchmarks: pooled lookup vs a device-to-device copy; Linear vs a large cuBLAS SGEMM;
#      tessera-bench kaggle on the GPU vs a PyTorch eager DLRM of the same shape
#   5. a short table, last
# Every stage runs under `timeout`; a failed stage prints FAILED with its log's tail and the
# script goes on. Results go to $OUT when set (else runs/gpu_check): logs, JSON, summary.json.
# Environment: BUILD_DIR (build-gpu), JOBS (16), ARCHS (90), BATCH (e2e batch, 16384),
# DEADLINE_S (total seconds, 470).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT_DIR=${OUT:-$ROOT/runs/gpu_check}
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
ARCHS=${ARCHS:-90}
BATCH=${BATCH:-16384}
DEADLINE_S=${DEADLINE_S:-470}
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/stages.tsv"
T0=$(date +%s)

left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }

# stage NAME LIMIT_S CMD...: runs CMD with its output in $OUT_DIR/NAME.log, bounded by LIMIT_S
# and by the time left (keeping `reserve` seconds for the stages after it).
stage() {
  local name=$1 limit=$2 reserve=${RESERVE:-0}
  shift 2
  local avail=$(( $(left) - reserve ))
  (( avail < limit )) && limit=$avail
  if (( limit < 5 )); then
    echo "== $name: SKIPPED (out of time)"
    printf '%s\tSKIPPED\n' "$name" >> "$OUT_DIR/stages.tsv"
    return 1
  fi
  echo "== $name (limit ${limit}s)"
  local t=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$? secs=$(( $(date +%s) - t ))
  if (( rc == 0 )); then
    echo "   ok (${secs}s)"
    printf '%s\tok %ss\n' "$name" "$secs" >> "$OUT_DIR/stages.tsv"
  else
    local why="rc $rc"
    (( rc == 124 || rc == 137 )) && why="timed out after ${limit}s"
    echo "   FAILED ($why); last lines of $OUT_DIR/$name.log:"
    tail -n 15 "$OUT_DIR/$name.log" | sed 's/^/   | /'
    printf '%s\tFAILED (%s)\n' "$name" "$why" >> "$OUT_DIR/stages.tsv"
  fi
  return $rc
}

if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT_DIR/gpu.txt" 2>&1
else
  echo "no nvidia-smi on this machine" > "$OUT_DIR/gpu.txt"
fi
echo "GPU: $(tail -n 1 "$OUT_DIR/gpu.txt")"

# ---- 1. build -------------------------------------------------------------------------------
TESTS=$(for f in tests/cuda/*_test.cc; do b=$(basename "$f" .cc); echo "cuda_$b"; done)
# The NCCL communicator's tests (sharding engineer's): single-process and 4 ranks under mpirun.
NCCL_TESTS=""
[ -f tests/sharding/communicator_test.cc ] && NCCL_TESTS="sharding_communicator_test"
[ -f tests/distributed/communicator_test.cc ] && NCCL_TESTS="$NCCL_TESTS distributed_communicator_test"
BUILD_CMD="cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DTESSERA_CUDA_ARCHS='$ARCHS' && cmake --build '$BUILD' -j '$JOBS' --target tessera-train \
  tessera-bench cuda_lookup_bench cuda_linear_bench $(echo $TESTS) $NCCL_TESTS"
RESERVE=200 stage build 270 bash -c "$BUILD_CMD"

# ---- 2. tests ---------------------------------------------------------------------------------
RESERVE=170 stage cuda_tests 60 ctest --test-dir "$BUILD" -L cuda --output-on-failure
if [ -n "$NCCL_TESTS" ]; then
  RESERVE=160 stage nccl_tests 40 ctest --test-dir "$BUILD" -R "^(${NCCL_TESTS// /|})\$" \
    --output-on-failure
fi

# ---- 3. quickstart, GPU vs CPU ----------------------------------------------------------------
TRAIN="$BUILD/bin/tessera-train"
rm -rf "$OUT_DIR/quick_cpu" "$OUT_DIR/quick_gpu"
CPU_LIMIT=$(( $(left) - 120 ))
(( CPU_LIMIT > 150 )) && CPU_LIMIT=150
if (( CPU_LIMIT > 10 )); then
  timeout --kill-after=5 "$CPU_LIMIT" "$TRAIN" --config configs/quickstart.yaml --set device=cpu \
    --set threads=12 --set output.dir="$OUT_DIR/quick_cpu" > "$OUT_DIR/quick_cpu.log" 2>&1 &
  CPU_PID=$!
else
  CPU_PID=""
fi
RESERVE=130 stage quick_gpu 60 "$TRAIN" --config configs/quickstart.yaml --set device=cuda \
  --set output.dir="$OUT_DIR/quick_gpu"
if [ -n "$CPU_PID" ]; then
  wait "$CPU_PID"
  rc=$?
  if (( rc == 0 )); then echo "== quick_cpu: ok"; printf 'quick_cpu\tok\n' >> "$OUT_DIR/stages.tsv"
  else echo "== quick_cpu FAILED (rc $rc)"; tail -n 15 "$OUT_DIR/quick_cpu.log" | sed 's/^/   | /'
       printf 'quick_cpu\tFAILED (rc %s)\n' "$rc" >> "$OUT_DIR/stages.tsv"; fi
fi
RESERVE=120 stage quick_compare 10 python3 bench/gpu_check_report.py quickstart "$OUT_DIR"
cat "$OUT_DIR/quick_compare.log" 2>/dev/null | tail -n 1

# ---- 4. benchmarks ----------------------------------------------------------------------------
RESERVE=85 stage cuda_lookup_bench 40 "$BUILD/bin/cuda_lookup_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$OUT_DIR/cuda_lookup_bench.json" --benchmark_out_format=json
RESERVE=60 stage cuda_linear_bench 30 "$BUILD/bin/cuda_linear_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$OUT_DIR/cuda_linear_bench.json" --benchmark_out_format=json
RESERVE=35 stage tessera_bench_gpu 35 "$BUILD/bin/tessera-bench" --config configs/bench/kaggle.yaml \
  --set device=cuda --set data.batch_size="$BATCH" --steps 50 --warmup 10 \
  --json "$OUT_DIR/tessera_bench_gpu.json"
RESERVE=5 stage pytorch_gpu 45 sh -c "python3 bench/pytorch_dlrm.py --device cuda --preset kaggle \
  --batch $BATCH --steps 50 --warmup 10 > '$OUT_DIR/pytorch_gpu.json'"

# ---- 5. table ---------------------------------------------------------------------------------
python3 bench/gpu_check_report.py table "$OUT_DIR"
echo "total $(( $(date +%s) - T0 ))s; full results in $OUT_DIR"
