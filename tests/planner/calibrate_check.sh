#!/usr/bin/env bash
# `tessera-plan calibrate` end to end, small: bad usage exits 2 naming the flag and writes
# nothing; a short calibration (one dim, a 4 MiB table, collectives at 2 ranks under mpirun, one
# tier size) writes a profile that LoadMachineProfile accepts (calibrate reads it back) and that
# tessera-plan plans with.
#   tests/planner/calibrate_check.sh build/bin/tessera-plan <source dir>
set -u
plan=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
check_usage() {  # name, expected substring, args...
  local name=$1 expect=$2
  shift 2
  "$plan" calibrate "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL $name: exit $rc (want 2)"; cat "$tmp/stderr"; fail=1; fi
  if ! grep -q -- "$expect" "$tmp/stderr"; then
    echo "FAIL $name: message lacks '$expect':"; cat "$tmp/stderr"; fail=1
  fi
  if [[ -e "$tmp/bad.yaml" ]]; then echo "FAIL $name: wrote a file"; fail=1; fi
}
check_usage no-out "--out is required"
check_usage bad-dims "bad value '0' for --dims" --out "$tmp/bad.yaml" --dims 0
check_usage bad-clock "bad value 'sun' for --clock" --out "$tmp/bad.yaml" --clock sun
check_usage unknown "unknown flag --frobnicate" --out "$tmp/bad.yaml" --frobnicate 1

# Two runs of every part, none again; --strict with a spread no two runs meet: every key with
# any difference is flagged, the profile is still written, and the exit status is 3.
"$plan" calibrate --out "$tmp/p.yaml" --config "$src/configs/bench/small.yaml" --dims 16 \
  --table_mib 4 --world_sizes 2 --tier_dims 16 --tier_rows 8192 --seconds_per_point 0.02 \
  --runs 2 --extra_runs 0 --max_spread 1e-12 --strict \
  --scratch "$tmp/scratch" --quiet >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [[ $rc -ne 3 ]]; then echo "FAIL calibrate --strict: exit $rc (want 3)"; cat "$tmp/stderr"; fail=1; fi
grep -q "stayed wide or implausible" "$tmp/stdout" || { echo "FAIL: no flagged summary"; cat "$tmp/stdout"; fail=1; }
# --quiet keeps one progress line per measurement (stderr not a terminal): 2 runs x 3 parts.
grep -q "calibrate: 6 of 6 measurements done (tier run 2)" "$tmp/stderr" \
  || { echo "FAIL: no progress line under --quiet"; cat "$tmp/stderr"; fail=1; }
grep -q "gemm_fused_passes: true" "$tmp/p.yaml" || { echo "FAIL profile lacks gemm_fused_passes"; fail=1; }
for key in "version: 2" "kind: cpu" "llc_bytes:" "bag_s:" "id_s:" "comm_memory_bytes:" "hit_s:" "op: all_to_all" "world_size: 2" "value_bytes: 68" \
           "base_memory_bytes" "fingerprint:" "cpu_model:" "cores:" "calibration:" "runs: 2" \
           "other_cpu_cores:" "flagged:" "wide: true"; do
  grep -q "$key" "$tmp/p.yaml" || { echo "FAIL profile lacks '$key'"; fail=1; }
done
"$plan" --config "$src/configs/bench/small.yaml" --world_size 2 --profile "$tmp/p.yaml" \
  --out "$tmp/plan.yaml" >"$tmp/stdout" 2>"$tmp/stderr" \
  || { echo "FAIL planning with the calibrated profile"; cat "$tmp/stderr"; fail=1; }
[[ $fail -eq 0 ]] && echo "calibrate_check: all passed"
exit $fail
