#!/usr/bin/env bash
# Builds Tessera with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ (CUDA off)
# and runs the whole ctest suite there; any sanitizer report fails its test. See docs/TESTING.md.
# Extra arguments go to ctest (e.g. -R config). TESSERA_BUILD_JOBS / TESSERA_TEST_JOBS: parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_CUDA=OFF \
  -DTESSERA_SANITIZE=address,undefined -DTESSERA_BUILD_BENCHMARKS=OFF "${launcher[@]}"
cmake --build build-asan -j "${TESSERA_BUILD_JOBS:-2}"
# Leak detection stays on; the suppressions name only leaks inside Open MPI's own libraries
# (scripts/lsan_openmpi.supp says which and why). halt_on_error: the first report fails the test.
supp="$PWD/scripts/lsan_openmpi.supp"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=99:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_disable_dlclose=1
cd build-asan
# Both phases run even when the first fails; the exit status is non-zero if either failed.
status=0
# Single-process tests: leak detection on.
ctest --output-on-failure -j "${TESSERA_TEST_JOBS:-2}" --timeout 1800 -LE 'distributed|mpirun' \
  "$@" || status=1
# Tests under mpirun (label distributed: ctest launches them with mpirun; label mpirun: their
# script does): Open MPI's PMIx/ORTE components leak from frames LSan cannot symbolize
# ("<unknown module>", no Tessera frame on any stack; measured again 2026-12-01: 53 reports for
# two ranks), which no suppression can name, so leak detection is off for them; ASan's and
# UBSan's other checks stay on.
ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
  ctest --output-on-failure -j "${TESSERA_TEST_JOBS:-2}" --timeout 1800 -L 'distributed|mpirun' \
  "$@" || status=1
exit $status
