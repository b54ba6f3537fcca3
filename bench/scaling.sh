#!/usr/bin/env bash
# Distributed scaling table for docs/PERFORMANCE.md: tessera-bench under mpirun for T = 1, 2, 4
# ranks and the world shapes M x N (groups x group size) below, one thread per rank, then a
# markdown table of samples/s, per-phase ms/step (rank 0) and bytes sent per step per rank by
# communicator. On a 2-core machine T = 4 is oversubscribed: the table reports it, not tunes it.
#   bench/scaling.sh [BUILD_DIR] [CONFIG] [extra --set overrides...]
# Env: STEPS (default 10), WARMUP (2), BATCH (per-rank batch, default 512), SHAPES
# ("1x1 1x2 2x1 1x4 2x2"), OUT (JSON lines file, default runs/scaling.jsonl).
set -euo pipefail
build=${1:-build}; shift || true
config=${1:-configs/bench/small.yaml}; shift || true
steps=${STEPS:-10}; warmup=${WARMUP:-2}; batch=${BATCH:-512}
shapes=${SHAPES:-"1x1 1x2 2x1 1x4 2x2"}
out=${OUT:-runs/scaling.jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for shape in $shapes; do
  m=${shape%x*}; n=${shape#*x}; t=$((m * n))
  args=(--config "$config" --steps "$steps" --warmup "$warmup" --threads 1 --name "$shape"
        --json "$out" --set "data.batch_size=$batch" --set "sharding.group_size=$n" "$@")
  if [ "$t" -eq 1 ]; then
    "$build/bin/tessera-bench" "${args[@]}" > /dev/null
  else
    mpirun --oversubscribe --allow-run-as-root -np "$t" "$build/bin/tessera-bench" "${args[@]}" \
      > /dev/null
  fi
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
phases = []
for r in rows:
    for k in r:
        if k.startswith("ms_") and k != "ms_per_step" and k[3:] not in phases:
            phases.append(k[3:])
comms = []
for r in rows:
    for k in r:
        if k.startswith("bytes_") and k[6:] not in comms:
            comms.append(k[6:])
head = ["M x N", "T", "samples/s", "ms/step"] + [f"{p} ms" for p in phases] + \
       [f"{c} B/step" for c in comms]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for r in rows:
    cells = [r["name"], str(r["ranks"]), f"{r['samples_per_sec']:.0f}", f"{r['ms_per_step']:.1f}"]
    cells += [f"{r.get('ms_' + p, 0):.1f}" for p in phases]
    cells += [f"{r.get('bytes_' + c, 0):.0f}" for c in comms]
    print("| " + " | ".join(cells) + " |")
PY
