#!/usr/bin/env bash
# The step trace end to end (core/trace.h, trainer/trace_writer.h, tools/plan_replay.h):
# tessera-bench --trace at 1 and 2 ranks and tessera-train --trace write Chrome trace-event JSON
# that parses; spans nest on every thread; each phase of the bench's table sums in the trace to
# the bench's own ms per step; at 2 ranks the collectives carry bytes and peers, the ranks'
# clocks are aligned, each estimator phase's traced sum equals the bench's measured column;
# `tessera-plan replay` reproduces the traced step within 5%, a 2x faster link shortens it, and
# another group size rescales it by the planner's predictions.
#   tests/planner/trace_check.sh build/bin <source dir>
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fail=0
bench=("$bin/tessera-bench" --config "$src/configs/bench/small.yaml" --threads 1 --steps 4
       --warmup 1 --batches 4 --trace_steps 4 --profile cpu_2core_measured)
"${bench[@]}" --trace "$tmp/t1.json" --json "$tmp/t1.jsonl" >"$tmp/t1.txt" 2>&1 \
  || { echo "FAIL bench T=1"; tail -5 "$tmp/t1.txt"; fail=1; }
mpirun --oversubscribe -np 2 "${bench[@]}" --trace "$tmp/t2.json" --json "$tmp/t2.jsonl" \
  >"$tmp/t2.txt" 2>&1 || { echo "FAIL bench T=2"; tail -5 "$tmp/t2.txt"; fail=1; }
"$bin/tessera-train" --config "$src/configs/quickstart.yaml" --quiet --trace "$tmp/train.json" \
  --trace_first_step 1 --trace_steps 2 --set train.steps=4 --set train.eval_every=0 \
  --set output.export= --set output.dir="$tmp/run" --set data.batch_size=256 \
  >"$tmp/train.txt" 2>&1 || { echo "FAIL train"; tail -5 "$tmp/train.txt"; fail=1; }
python3 - "$tmp" <<'PY' || fail=1
import json, sys
tmp = sys.argv[1]
bad = []
def load(name):
    d = json.load(open(f"{tmp}/{name}"))
    return d, [e for e in d["traceEvents"] if e["ph"] == "X"]
def nesting(events, what):
    by = {}
    for e in events:
        by.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, es in by.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            # 1 us of slack: a phase's span is placed from its accumulated seconds.
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1:
                bad.append(f"{what}: {e['name']} overlaps {stack[-1]['name']} on {key}")
            stack.append(e)
def close(a, b):
    return abs(a - b) <= 0.02 * max(a, b) + 0.01
for name, ranks in (("t1", 1), ("t2", 2)):
    d, ev = load(f"{name}.json")
    nesting(ev, name)
    res = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")][-1]
    steps = d["otherData"]["steps"]
    if sorted({e["pid"] for e in ev}) != list(range(ranks)):
        bad.append(f"{name}: ranks {sorted({e['pid'] for e in ev})}")
    if len([e for e in ev if e["cat"] == "iteration" and e["pid"] == 0]) != steps:
        bad.append(f"{name}: not {steps} step spans")
    # The bench's phase table (rank 0's own phases) from the trace.
    for key, v in res.items():
        if not key.startswith("ms_") or key == "ms_per_step":
            continue
        phase = key[3:]
        t = sum(e["dur"] for e in ev if e["pid"] == 0 and e["cat"] == "step"
                and e["name"] == phase) / 1e3 / steps
        if not close(t, v):
            bad.append(f"{name}: phase {phase}: trace {t:.4f} ms/step, bench {v:.4f}")
    # The estimator's phases: the slowest rank's traced sum against the bench's measured column.
    for p in d["otherData"]["estimator_phases"]:
        worst = 0
        for r in range(ranks):
            s = 0
            for full in p["names"]:
                cat, nm = full.split("/", 1)
                s += sum(e["dur"] for e in ev if e["pid"] == r and e["cat"] == cat
                         and e["name"] == nm)
            worst = max(worst, s / 1e3 / steps)
        m = res.get("meas_ms_" + p["phase"], 0)
        if not close(worst, m):
            bad.append(f"{name}: estimator phase {p['phase']}: trace {worst:.4f}, bench {m:.4f}")
        if p["predicted_ms"] < 0:
            bad.append(f"{name}: no prediction for {p['phase']}")
    if ranks == 2:
        coll = [e for e in ev if e["cat"] == "collective"]
        if not coll or any("bytes" not in e["args"] or e["args"]["peers"] < 1 for e in coll):
            bad.append("t2: collectives without bytes / peers")
        if not any(e["name"] == "all_to_all" and e["args"]["peers"] == 2 for e in coll):
            bad.append("t2: no all_to_all of 2 peers")
        firsts = [min(e["ts"] for e in ev if e["pid"] == r and e["cat"] == "iteration")
                  for r in range(2)]
        if abs(firsts[0] - firsts[1]) > 20000:  # us: the ranks start their steps together
            bad.append(f"t2: first steps {firsts} us apart: clocks not aligned")
d, ev = load("train.json")
nesting(ev, "train")
if len([e for e in ev if e["cat"] == "iteration"]) != 2:
    bad.append("train: not 2 step spans")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
PY
# One trace's replay; a step traced while another process took the core can leave gaps no span
# explains, so a miss is retried once on a fresh trace (both outputs printed).
check_replay() {  # trace.json out.txt
  "$bin/tessera-plan" replay "$1" --what-if link=2 --what-if comm_dtype=bf16 >"$2" 2>&1 \
    || { echo "FAIL replay"; cat "$2"; return 1; }
  python3 - "$2" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"traced ([\d.]+) ms .* replayed ([\d.]+) ms", t)
ok = m is not None and abs(float(m.group(2)) / float(m.group(1)) - 1) <= 0.05
link = re.search(r"what if link=2: step ([\d.]+) ms", t)
ok = ok and link is not None and float(link.group(1)) < float(m.group(2))
ok = ok and "critical path per rank" in t and "embedding update" in t
if not ok:
    print("replay output:\n" + t)
sys.exit(0 if ok else 1)
PY
}
if ! check_replay "$tmp/t2.json" "$tmp/replay.txt"; then
  echo "replay of the first trace missed; tracing again"
  mpirun --oversubscribe -np 2 "${bench[@]}" --trace "$tmp/t2b.json" >"$tmp/t2b.txt" 2>&1 \
    && check_replay "$tmp/t2b.json" "$tmp/replay_b.txt" || { echo "FAIL replay"; fail=1; }
fi
# Another group size: N = 2 (the traced one) replays unchanged; N = 1 rescales each phase by the
# planner's predictions in the trace (its plan at 1 against the traced run at 2); N = 3 is not a
# group size of 2 ranks.
"$bin/tessera-plan" replay "$tmp/t2.json" --what-if group_size=2 --what-if group_size=1 \
  >"$tmp/replay_n.txt" 2>&1 || { echo "FAIL replay group_size"; cat "$tmp/replay_n.txt"; fail=1; }
python3 - "$tmp/replay_n.txt" "$tmp/t2.json" <<'PY' || fail=1
import json, re, sys
t = open(sys.argv[1]).read()
d = json.load(open(sys.argv[2]))["otherData"]
m = re.search(r"replayed ([\d.]+) ms", t)
same = re.search(r"what if group_size=2: step ([\d.]+) ms \(([-+\d.]+)%", t)
one = re.search(r"what if group_size=1: step ([\d.]+) ms", t)
bad = []
if d.get("group_size") != 2 or [g["group_size"] for g in d["group_size_what_if"]] != [1]:
    bad.append(f"trace otherData group sizes: {d.get('group_size')}, {d.get('group_size_what_if')}")
if not (m and same and one):
    bad.append("missing lines")
else:
    if abs(float(same.group(2))) > 0.05:
        bad.append(f"group_size=2 (traced) changed the replay by {same.group(2)}%")
    # Every span scaled by its phase's factor (1 outside the phases): the replay, a max-plus
    # expression of the spans, lies between the smallest and the largest factor times the
    # replay, plus the phases the traced plan lacked; and the planner's phases differ at 1.
    at1 = d["group_size_what_if"][0]["phases_ms"]
    now = [p["predicted_ms"] for p in d["estimator_phases"]]
    f = [1.0] + [a / b for a, b in zip(at1, now) if b > 0]
    added = sum(a for a, b in zip(at1, now) if b <= 0)
    r, w = float(m.group(1)), float(one.group(1))
    if not (min(f) * r - 1e-3 <= w <= max(f) * r + added + 1e-3) or abs(w - r) < 1e-3:
        bad.append(f"group_size=1: {w} ms against the replay's {r} (factors {min(f):.3f}.."
                   f"{max(f):.3f}, added {added:.3f} ms)")
if bad:
    print("FAIL replay group_size:", bad, "\n" + t)
sys.exit(1 if bad else 0)
PY
"$bin/tessera-plan" replay "$tmp/t2.json" --what-if group_size=3 >/dev/null 2>"$tmp/err"
[[ $? -eq 1 ]] && grep -q "no prediction at group size 3" "$tmp/err" \
  || { echo "FAIL: group_size=3 of 2 ranks"; cat "$tmp/err"; fail=1; }
"$bin/tessera-plan" replay "$tmp/nope.json" >/dev/null 2>"$tmp/err"
[[ $? -eq 1 ]] && grep -q "nope.json" "$tmp/err" || { echo "FAIL: a missing trace"; fail=1; }
[[ $fail -eq 0 ]] && echo "trace_check: all passed"
exit $fail
