#!/usr/bin/env bash
# gpu_check.sh: everything that needs a GPU, run ON the bundle of bench/gpu_bundle.sh (no build
# on the device), in one device call of 10 minutes with time to spare (docs/CUDA.md).
#   bash bench/gpu_check.sh          # carry build-bundle/gpu-bundle.tar.gz (unpacked here first)
# Stages, each under `timeout`, each run whatever the others did:
#   env          GPU (nvidia-smi), where the CUDA libraries come from (bench/gpu_env.sh), ldd
#   cuda_probe   what the CUDA runtime sees (versions, devices, pageable memory access); FAILED
#                when nvidia-smi lists a GPU that the runtime cannot count (then every CUDA test
#                below would skip as if there were no GPU)
#   cuda tests   every tests/cuda binary; one that crashed or reported a CUDA error (illegal
#                address, launch failure, ...) is rerun under compute-sanitizer memcheck at the
#                END, in a window of its own (assertion mismatches gain nothing from memcheck)
#   nccl tests   sharding_communicator_test; distributed_communicator_test on 4 ranks (mpirun)
#   cuda shards  distributed_sharded_cuda_test on 1 rank (payloads over NCCL), 2 and 4 ranks
#                sharing the GPU (sharding.transport mpi, staged): every sharding type, every
#                grid, SGD and row-wise AdaGrad, exact mode, and HBM caches over host memory and
#                over RocksDB, each against the same ranks on the CPU (rtol 2e-5, atol 1e-6)
#   quickstart   configs/quickstart.yaml on the GPU and, meanwhile, on the CPU: eval AUC within
#                0.005 and logged train losses within 0.01 (bench/gpu_check_report.py)
#   mpi2         the same on 2 ranks sharing the GPU through MPI (device: cuda: shards in HBM,
#                payloads staged over MPI, dense gradients all-reduced in buckets overlapping
#                backward) against 2 CPU ranks, same tolerances
#   hbm_cache    configs/hbm_cache.yaml on the GPU with its big table whole in HBM, as an HBM cache
#                over host memory and as one over the RocksDB tier (storage.device_cache_rows):
#                the three exports must be bit-identical (cmp)
#   benchmarks   pooled lookup vs a device-to-device copy; Linear (fp32 and bf16) vs cuBLAS
#                SGEMM; tessera-bench kaggle on the GPU with model.dense_dtype bf16 and phase
#                syncs OFF (the headline), the same in fp32, and bf16 with phase syncs ON (the
#                phase breakdown); bench/pytorch_dlrm.py --device cuda (PyTorch eager, same
#                shape, batch and step count); the MLPerf DLRM-DCNv2 shape (configs/
#                dcnv2_mlperf.yaml) at batch 65,536 with its tables capped at MLPERF_ROWS rows,
#                in bf16 and in fp32
# Time: each stage's window is its limit, cut to the time left less RESERVE (the seconds kept for
# the stages after it); RESERVE decreases strictly from stage to stage, and grows by MEMCHECK_S
# once a CUDA test binary needs a memcheck rerun, so the reruns at the end keep their window.
# Results: $OUT (else runs/gpu_check) receives exactly two files, gpu_check_summary.md (the
# table, the stages, the tails of failed logs) and gpu_check_results.tar.gz (every log and JSON;
# files of 2 MiB or more, e.g. model exports, left out). The work folder is WORK (a temp dir).
# Python (the reports, PyTorch) runs with the caller's LD_LIBRARY_PATH, not the bundle's.
# Environment: BUNDLE (build-bundle/gpu-bundle; BUNDLE.tar.gz is unpacked when the folder is
# missing), BATCH (e2e batch, 16384), DEADLINE_S (total,
# 540), QUICK_SET (extra --set overrides for both quickstart runs, e.g. for a rehearsal),
# CPU_THREADS (quickstart CPU run, 12), MLPERF_ROWS (the DCNv2 run's table cap, 2000000 as
# mlperf-mini's: the full 204M rows take minutes to initialise), MEMCHECK_S (120: the window kept
# for the memcheck reruns once one is needed).
set -u
cd "$(dirname "$0")/.."
# `gpu_check.sh --env-report BUNDLE WORK`: the env stage's body (a separate process, so that
# `timeout` can bound it): the GPU, the bundle's manifest, unresolved libraries.
if [ "${1:-}" = "--env-report" ]; then
  B=$2 WORK=$3
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 ||
    echo "no nvidia-smi"
  cat "$WORK/env_libs.log"
  head -n 4 "$B/MANIFEST.txt"
  echo "glibc here: $(ldd --version 2>&1 | head -n 1)"
  echo "compute-sanitizer: $(command -v compute-sanitizer ||
    ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none)"
  bad=0
  for f in "$B"/bin/* "$B"/tests/*; do
    if ldd "$f" 2>&1 | grep -q "not found"; then
      echo "UNRESOLVED in $f:"
      ldd "$f" | grep "not found"
      bad=1
    fi
  done
  exit $bad
fi

ROOT=$PWD
BUNDLE=${BUNDLE:-build-bundle/gpu-bundle}
OUT_DIR=${OUT:-$ROOT/runs/gpu_check}
WORK=${WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
BATCH=${BATCH:-16384}
DEADLINE_S=${DEADLINE_S:-540}
QUICK_SET=${QUICK_SET:-}
CPU_THREADS=${CPU_THREADS:-12}
MLPERF_ROWS=${MLPERF_ROWS:-2000000}
MEMCHECK_S=${MEMCHECK_S:-120}
MC=0  # becomes MEMCHECK_S once a memcheck rerun is queued
# Python with the caller's libraries: gpu_env.sh puts the bundle's Debian libstdc++, libgomp, ...
# first on LD_LIBRARY_PATH for our binaries (which also carry DT_RPATH), not for PyTorch.
CALLER_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
py() { env LD_LIBRARY_PATH="$CALLER_LD_LIBRARY_PATH" python3 "$@"; }
mkdir -p "$OUT_DIR" "$WORK"
: > "$WORK/stages.tsv"
T0=$(date +%s)
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }

# stage NAME LIMIT_S CMD...: CMD with its output in $WORK/NAME.log, bounded by LIMIT_S and by
# the time left less RESERVE (seconds kept for the stages after it). Records NAME, ok/FAILED/
# SKIPPED and seconds in stages.tsv; returns CMD's status.
stage() {
  local name=$1 limit=$2 reserve=${RESERVE:-0}
  shift 2
  local avail=$(( $(left) - reserve ))
  (( avail < limit )) && limit=$avail
  if (( limit < 5 )); then
    echo "== $name: SKIPPED (out of time)"
    printf '%s\tSKIPPED\tout of time\n' "$name" >> "$WORK/stages.tsv"
    return 1
  fi
  echo "== $name (limit ${limit}s)"
  local t rc secs
  t=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t ))
  if (( rc == 0 )); then
    echo "   ok (${secs}s)"
    printf '%s\tok\t%ss\n' "$name" "$secs" >> "$WORK/stages.tsv"
  else
    local why="rc $rc"
    (( rc == 124 || rc == 137 )) && why="timed out after ${limit}s"
    echo "   FAILED ($why, ${secs}s); last lines:"
    tail -n 8 "$WORK/$name.log" | sed 's/^/   | /'
    printf '%s\tFAILED\t%s, %ss\n' "$name" "$why" "$secs" >> "$WORK/stages.tsv"
  fi
  return $rc
}

finish() {
  py bench/gpu_check_report.py summary "$WORK" "$OUT_DIR/gpu_check_summary.md" ||
    { echo "# gpu_check: the report failed"; cat "$WORK/stages.tsv"; } > "$OUT_DIR/gpu_check_summary.md"
  (cd "$WORK" && find . -type f -size -2097152c -print0 | tar -czf "$OUT_DIR/gpu_check_results.tar.gz" --null -T -)
  echo "total $(( $(date +%s) - T0 ))s; $OUT_DIR: gpu_check_summary.md, gpu_check_results.tar.gz"
}

# ---- env ----------------------------------------------------------------------------------------
if [ ! -x "$BUNDLE/bin/tessera-train" ] && [ -f "$BUNDLE.tar.gz" ]; then
  echo "== unpacking $BUNDLE.tar.gz"
  tar -C "$(dirname "$BUNDLE")" -xzf "$BUNDLE.tar.gz"
fi
if [ ! -x "$BUNDLE/bin/tessera-train" ]; then
  echo "no bundle at $BUNDLE (make it with bench/gpu_bundle.sh and carry it)" | tee "$WORK/env.log"
  printf 'env\tFAILED\tno bundle at %s\n' "$BUNDLE" >> "$WORK/stages.tsv"
  finish
  exit 1
fi
# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh "$BUNDLE" > "$WORK/env_libs.log" 2>&1
B=$TESSERA_BUNDLE_DIR
stage env 20 bash bench/gpu_check.sh --env-report "$B" "$WORK"
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
# A GPU that nvidia-smi lists but the runtime cannot count would make every CUDA test skip and
# every stage say ok: the probe fails then, naming the runtime's error.
EXPECT_GPU=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && EXPECT_GPU=1
[ -x "$B/tests/cuda_context_test" ] &&
  RESERVE=460 stage cuda_probe 15 env TESSERA_EXPECT_CUDA_DEVICE=$EXPECT_GPU \
    "$B/tests/cuda_context_test" --gtest_color=no --gtest_filter='CudaProbe.*'

# ---- cuda tests ---------------------------------------------------------------------------------
# One stage per binary. A binary that crashed (a signal) or whose log shows a CUDA error is queued
# for a memcheck rerun at the end (its failed tests only); value mismatches are not.
CUDA_ERR='illegal memory access|misaligned address|unspecified launch failure|illegal instruction'
CUDA_ERR="$CUDA_ERR|invalid configuration argument|too many resources requested|invalid device function"
CUDA_ERR="$CUDA_ERR|device-side assert|hardware stack error|operation not supported on global"
MEMCHECK=()  # "binary|gtest filter"
for t in "$B"/tests/cuda_*_test "$B"/tests/sharding_*_cuda_test; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  RESERVE=400 stage "$name" 60 "$t" --gtest_color=no
  rc=$?
  (( rc == 0 )) && continue
  if (( rc > 128 && rc != 137 )) || grep -Eq "$CUDA_ERR" "$WORK/$name.log"; then
    failed=$(grep -o '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$WORK/$name.log" | awk '{print $NF}' |
             grep '\.' | sort -u | paste -sd: -)
    MEMCHECK+=("$t|$failed")
  fi
done
[ -n "$SANITIZER" ] && (( ${#MEMCHECK[@]} > 0 )) && MC=$MEMCHECK_S

# ---- nccl tests ---------------------------------------------------------------------------------
[ -x "$B/tests/sharding_communicator_test" ] &&
  RESERVE=$((380 + MC)) stage sharding_communicator_test 30 "$B/tests/sharding_communicator_test" --gtest_color=no
[ -x "$B/tests/distributed_communicator_test" ] &&
  RESERVE=$((365 + MC)) stage distributed_communicator_test 45 mpirun --oversubscribe --allow-run-as-root \
    -np 4 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=1 "$B/tests/distributed_communicator_test" --gtest_color=no

# ---- CUDA shards against the CPU collection: 1 rank over NCCL, 2 and 4 sharing the GPU ---------
if [ -x "$B/tests/distributed_sharded_cuda_test" ]; then
  # NCCL_DEBUG=WARN: np1 is the one NCCL training run, and NCCL has never been seen starting in
  # a sandboxed GPU machine; its warnings say why it fails.
  r=350
  for np in 1 2 4; do
    RESERVE=$((r + MC)) stage "sharded_cuda_np$np" 45 mpirun --oversubscribe --allow-run-as-root \
      -np "$np" -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=2 -x NCCL_DEBUG=WARN \
      "$B/tests/distributed_sharded_cuda_test" --gtest_color=no
    r=$((r - 15))
  done
fi

# ---- quickstart, GPU vs CPU ---------------------------------------------------------------------
QS=(--config configs/quickstart.yaml --set output.export= )
for kv in $QUICK_SET; do QS+=(--set "$kv"); done
rm -rf "$WORK/quick_cpu" "$WORK/quick_gpu"
RESERVE=$((300 + MC)) stage quick_cpu 150 "$B/bin/tessera-train" "${QS[@]}" --set device=cpu \
  --set threads="$CPU_THREADS" --set output.dir="$WORK/quick_cpu" &
CPU_PID=$!
RESERVE=$((300 + MC)) stage quick_gpu 90 "$B/bin/tessera-train" "${QS[@]}" --set device=cuda \
  --set output.dir="$WORK/quick_gpu"
wait "$CPU_PID"
RESERVE=$((295 + MC)) stage quick_compare 10 py bench/gpu_check_report.py quickstart "$WORK"

# ---- 2 ranks sharing the GPU through MPI (device: cuda on several ranks: shards in HBM, payloads
# staged over MPI, the bucketed dense all-reduce overlapping backward) against 2 CPU ranks --------
MPI2=(mpirun --oversubscribe --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=4)
rm -rf "$WORK/mpi2_cpu" "$WORK/mpi2_gpu"
RESERVE=$((275 + MC)) stage mpi2_cpu 120 "${MPI2[@]}" "$B/bin/tessera-train" "${QS[@]}" --set device=cpu \
  --set threads=4 --set output.dir="$WORK/mpi2_cpu" &
MPI_CPU_PID=$!
RESERVE=$((275 + MC)) stage mpi2_gpu 120 "${MPI2[@]}" "$B/bin/tessera-train" "${QS[@]}" --set device=cuda \
  --set output.dir="$WORK/mpi2_gpu"
wait "$MPI_CPU_PID"
RESERVE=$((270 + MC)) stage mpi2_compare 10 py bench/gpu_check_report.py quickstart "$WORK" mpi2_gpu \
  mpi2_cpu

# ---- the HBM cache (docs/CUDA.md): the big table whole in HBM, cached over host memory, cached
# over RocksDB; the same kernels over cache slots, so the exports must be the same bytes ---------
rm -rf "$WORK"/hbm_*
HBM_LINE='storage: {tier: memory}}  # hbm_cache'
sed "s|$HBM_LINE|storage: {tier: memory, device_cache_rows: 20000, policy: lru}}|" \
  configs/hbm_cache.yaml > "$WORK/hbm_cache_memory.yaml"
sed "s|$HBM_LINE|storage: {tier: rocksdb, cache_rows: 40000, device_cache_rows: 20000, policy: lfu}}|" \
  configs/hbm_cache.yaml > "$WORK/hbm_cache_rocksdb.yaml"
r=270
for run in whole memory rocksdb; do
  cfg=configs/hbm_cache.yaml
  [ "$run" != whole ] && cfg="$WORK/hbm_cache_$run.yaml"
  r=$((r - 15))
  RESERVE=$((r + MC)) stage "hbm_cache_$run" 40 "$B/bin/tessera-train" --config "$cfg" --set device=cuda \
    --set output.dir="$WORK/hbm_$run"
done
RESERVE=$((220 + MC)) stage hbm_cache_compare 5 sh -c "cmp '$WORK/hbm_whole/model.safetensors' \
  '$WORK/hbm_memory/model.safetensors' && cmp '$WORK/hbm_whole/model.safetensors' \
  '$WORK/hbm_rocksdb/model.safetensors' && echo 'hbm cache: exports bit-identical'"

# ---- benchmarks ---------------------------------------------------------------------------------
RESERVE=$((200 + MC)) stage cuda_lookup_bench 40 "$B/bin/cuda_lookup_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$WORK/cuda_lookup_bench.json" --benchmark_out_format=json
RESERVE=$((175 + MC)) stage cuda_linear_bench 35 "$B/bin/cuda_linear_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$WORK/cuda_linear_bench.json" --benchmark_out_format=json
KAGGLE=(--config configs/bench/kaggle.yaml --set device=cuda --set data.batch_size="$BATCH"
        --steps 50 --warmup 10)
# The headline: dense_dtype bf16 (cuBLAS bf16 inputs, fp32 accumulation), phase syncs off.
RESERVE=$((150 + MC)) stage tessera_bench_gpu 35 "$B/bin/tessera-bench" "${KAGGLE[@]}" \
  --set model.dense_dtype=bf16 --cuda_sync_phases=false --name kaggle-bf16 \
  --json "$WORK/tessera_bench_gpu.json"
RESERVE=$((125 + MC)) stage tessera_bench_gpu_fp32 30 "$B/bin/tessera-bench" "${KAGGLE[@]}" \
  --cuda_sync_phases=false --name kaggle-fp32 --json "$WORK/tessera_bench_gpu_fp32.json"
RESERVE=$((105 + MC)) stage tessera_bench_gpu_phases 25 "$B/bin/tessera-bench" "${KAGGLE[@]}" \
  --set model.dense_dtype=bf16 --cuda_sync_phases=true --name kaggle-bf16-phases \
  --json "$WORK/tessera_bench_gpu_phases.json"
RESERVE=$((70 + MC)) stage pytorch_gpu 40 sh -c "env LD_LIBRARY_PATH='$CALLER_LD_LIBRARY_PATH' \
  python3 bench/pytorch_dlrm.py --device cuda --preset kaggle --batch $BATCH --steps 50 \
  --warmup 10 > '$WORK/pytorch_gpu.json'"
MLPERF=(--config configs/dcnv2_mlperf.yaml --set device=cuda --set model.max_table_rows="$MLPERF_ROWS"
        --set data.batch_size=65536 --batches 4)
RESERVE=$((35 + MC)) stage mlperf_dcnv2_gpu 60 "$B/bin/tessera-bench" "${MLPERF[@]}" \
  --set model.dense_dtype=bf16 --steps 20 --warmup 5 --name mlperf-dcnv2-bf16 \
  --json "$WORK/mlperf_dcnv2_gpu.json"
RESERVE=$((MC)) stage mlperf_dcnv2_gpu_fp32 40 "$B/bin/tessera-bench" "${MLPERF[@]}" \
  --steps 10 --warmup 3 --name mlperf-dcnv2-fp32 --json "$WORK/mlperf_dcnv2_gpu_fp32.json"

# ---- memcheck reruns (their own window: MC seconds were kept for them) --------------------------
if [ -n "$SANITIZER" ]; then
  for m in "${MEMCHECK[@]}"; do
    t=${m%%|*} failed=${m#*|}
    RESERVE=0 stage "$(basename "$t")_memcheck" 90 "$SANITIZER" --tool memcheck --error-exitcode 99 \
      "$t" --gtest_color=no ${failed:+--gtest_filter=$failed}
  done
fi
finish
