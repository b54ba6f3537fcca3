#!/usr/bin/env python3
"""The table of bench/cluster_2d.sh from its runs.jsonl (and, after it, any files of
bench/cluster_2d_choices.sh lines, which replace the planner's side: predictions and choices
of another estimator for the same runs): per config and link rate, every plan's
samples/s, median step, bytes per step through host 0's link, the planner's prediction for the
same plan (and its ratio to the measured step), the planner's choice of N for the plan's layout
and sync (tessera-plan with sharding.group_size 0), and which plan was fastest against which
plan the planner predicted fastest.

    python3 bench/cluster_2d_report.py runs/cluster_2d/runs.jsonl [CHOICES.jsonl ...]
"""
import json
import statistics
import sys
from collections import defaultdict


def main(paths):
    bench = defaultdict(list)  # name -> bench JSON objects (one per round)
    link = defaultdict(list)   # name -> bytes per step
    failed = defaultdict(int)
    choice = {}                # "cfg rate layout mode k" -> (N, {N: predicted ms})
    lines = [line for path in paths for line in open(path)]
    for line in lines:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if "choice" in r:
            choice[r["choice"]] = (r["group_size"], r["tried"])
        elif "link" in r:
            if r["rc"] == 0:
                link[r["link"]].append(r["bytes_per_step"])
            else:
                failed[r["link"]] += 1
        else:
            bench[r["name"]].append(r)
    groups = defaultdict(list)  # (cfg, rate) -> names in run order
    for name in list(bench) + list(failed):
        cfg, rate = name.split()[:2]
        if name not in groups[(cfg, rate)]:
            groups[(cfg, rate)].append(name)
    worst = 0.0
    for (cfg, rate), names in groups.items():
        print(f"\n### {cfg}, link {rate}\n")
        print("| plan (N, layout, sync) | samples/s | step ms (mean) | predicted ms | "
              "predicted / measured | host 0 link MB/step (both ways) | planner's N here "
              "(predicted ms at N=1/2/4) |")
        print("|---|---|---|---|---|---|---|")
        rows = []
        for name in names:
            _, _, n, layout, mode, k = name.split()
            label = f"N={n} {layout} {mode}" + (f" k={k}" if mode == "average" else "")
            if name not in bench:
                print(f"| {label} | failed ({failed[name]}x) | | | | | |")
                continue
            runs = bench[name]
            sps = statistics.median(r["samples_per_sec"] for r in runs)
            # The mean step (timed seconds / steps), not the median: average mode's sync every
            # k steps falls on one step in k, which a median of 8 steps leaves out.
            step = statistics.median(r["ms_per_step"] for r in runs)
            spread = (max(r["ms_per_step"] for r in runs) - min(r["ms_per_step"] for r in runs)) / step
            ch = choice.get(f"{cfg} {rate} {layout} {mode} {k}")
            # tessera-plan's prediction at this N (the plan sharding.plan: auto makes at a fixed
            # N); tessera-bench's own when there is none.
            pred = ch[1].get(n) if ch and n in ch[1] else runs[0].get("pred_step_ms")
            ratio = pred / step if pred else float("nan")
            worst = max(worst, abs(ratio - 1))
            mb = statistics.median(link[name]) / 1e6 if link[name] else float("nan")
            ch_text = ""
            if ch:
                tried = "/".join(f"{ch[1].get(str(g), float('nan')):.0f}" for g in (1, 2, 4))
                ch_text = f"N={ch[0]} ({tried})"
            spread_text = f" (±{100 * spread / 2:.0f}% over {len(runs)})" if len(runs) > 1 else ""
            print(f"| {label} | {sps:.0f} | {step:.0f}{spread_text} | {pred:.0f} | {ratio:.2f} | "
                  f"{mb:.1f} | {ch_text} |")
            rows.append((label, step, pred))
        if rows:
            fastest = min(rows, key=lambda r: r[1])
            pick = min(rows, key=lambda r: r[2])
            print(f"\nfastest measured: {fastest[0]} ({fastest[1]:.0f} ms); planner's lowest "
                  f"prediction: {pick[0]} (measured {pick[1]:.0f} ms, "
                  f"{pick[1] / fastest[1]:.2f}x the fastest)")
    print(f"\nlargest |predicted / measured - 1| over all plans: {worst:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
