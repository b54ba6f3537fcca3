#!/usr/bin/env bash
# Crash anywhere, on demand: tests/trainer/kill_resume_check.sh with more kill points (default 200
# kills of one process and 20 of one rank of 2 under mpirun; about 6 minutes on 2 cores).
# Usage: scripts/kill_anywhere.sh [KILLS [MPI_KILLS [SEED]]]   (after building into build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec bash "$root/tests/trainer/kill_resume_check.sh" "$root/build/bin" "$root" "${1:-200}" \
  "${2:-20}" "${3:-$RANDOM}"
