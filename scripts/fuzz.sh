#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, CUDA off) into build-fuzz/ and runs each for
# a bounded time, starting from the seed corpus fuzz/corpus/<target>/ (new inputs go to
# build-fuzz/corpus/<target>/, not into the repo). See docs/TESTING.md.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]     default: 30 s, every target
# TESSERA_FUZZ_SEED: libFuzzer's -seed (default 1, so a run repeats a shorter one's inputs;
# 0 = a random seed each run, for exploring).
# A crash stops with libFuzzer's report and the input in build-fuzz/crash-<target>-*; exit != 0.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}; shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(criteo_text binary_reader config plan safetensors)
cc=${TESSERA_FUZZ_CC:-clang-14}; cxx=${TESSERA_FUZZ_CXX:-clang++-14}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_CUDA=OFF \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DTESSERA_FUZZ=ON \
  -DTESSERA_SANITIZE=address,undefined -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCHMARKS=OFF \
  "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "${TESSERA_BUILD_JOBS:-2}" --target $(printf 'fuzz_%s ' "${targets[@]}")
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== fuzz_$t for ${secs}s"
  # -rss_limit_mb: a reader asked for an absurd allocation is a finding, not an OOM of the machine.
  if ! build-fuzz/fuzz/fuzz_$t "$work" "fuzz/corpus/$t" -max_total_time="$secs" -timeout=10 \
       -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -seed="${TESSERA_FUZZ_SEED:-1}" \
       -artifact_prefix="build-fuzz/crash-$t-" 2>"build-fuzz/fuzz_$t.log"; then
    tail -60 "build-fuzz/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/fuzz_$t.log" || true
  fi
done
exit $status
