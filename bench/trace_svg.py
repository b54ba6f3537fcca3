#!/usr/bin/env python3
"""One step of a step trace (tessera-bench / tessera-train --trace) as an SVG: a lane per rank's
training thread, its spans stacked by depth (the step, the bench's phases, the sharded
collection's phases, collectives), colour by category, a time axis in ms, rank labels, legend.

  bench/trace_svg.py TRACE.json OUT.svg [--step K]   (K: the K-th traced step, default 1)
"""
import argparse
import html
import json

COLORS = {"iteration": "#bbbbbb", "step": "#4c78a8", "phase": "#4c78a8", "sharded": "#f58518",
          "collective": "#e45756", "tier": "#54a24b"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=1)
    a = ap.parse_args()
    ev = [e for e in json.load(open(a.trace))["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    ranks = sorted({e["pid"] for e in ev})
    steps = {r: sorted((e for e in ev if e["pid"] == r and e["cat"] == "iteration"),
                       key=lambda e: e["ts"]) for r in ranks}
    t0 = min(steps[r][a.step]["ts"] for r in ranks)
    t1 = max(steps[r][a.step]["ts"] + steps[r][a.step]["dur"] for r in ranks)
    left, right, lane_h, row_h, top = 70, 20, 0, 16, 40
    width = 1000
    scale = (width - left - right) / (t1 - t0)
    lanes = []
    for r in ranks:
        s = steps[r][a.step]
        mine = sorted((e for e in ev if e["pid"] == r and e["ts"] >= s["ts"]
                       and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3),
                      key=lambda e: (e["ts"], -e["dur"]))
        stack, placed = [], []
        for e in mine:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            placed.append((len(stack), e))
            stack.append(e)
        lanes.append((r, placed, 1 + max(d for d, _ in placed)))
    height = top + sum(d * row_h + 20 for _, _, d in lanes) + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="16" font-size="13" font-weight="bold">Step trace: step '
           f'{a.step + 1} of the window, {len(ranks)} rank(s), {(t1 - t0) / 1e3:.2f} ms '
           f'(training thread of each rank)</text>']
    y = top
    for r, placed, depth in lanes:
        out.append(f'<text x="8" y="{y + 12}" font-weight="bold">rank {r}</text>')
        for d, e in placed:
            x = left + (e["ts"] - t0) * scale
            w = max(0.5, e["dur"] * scale)
            c = COLORS.get(e["cat"], "#999999")
            label = html.escape(e["name"])
            out.append(f'<rect x="{x:.1f}" y="{y + d * row_h}" width="{w:.1f}" height="{row_h - 2}" '
                       f'fill="{c}" stroke="white" stroke-width="0.5"><title>{html.escape(e["cat"])}'
                       f'/{label}: {e["dur"] / 1e3:.3f} ms</title></rect>')
            if w > 6 * len(label):
                out.append(f'<text x="{x + 2:.1f}" y="{y + d * row_h + 11}" fill="white">{label}'
                           '</text>')
        y += depth * row_h + 20
    # Time axis.
    out.append(f'<line x1="{left}" y1="{y}" x2="{width - right}" y2="{y}" stroke="black"/>')
    span_ms = (t1 - t0) / 1e3
    tick = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200) if span_ms / t <= 10][0]
    t = 0.0
    while t <= span_ms + 1e-9:
        x = left + t * 1e3 * scale
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="black"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{t:g}</text>')
        t += tick
    out.append(f'<text x="{(left + width - right) / 2}" y="{y + 28}" text-anchor="middle">'
               'ms since the step began (the ranks\' clocks aligned at a barrier)</text>')
    lx = 10
    for name, c in (("step (iteration)", COLORS["iteration"]), ("trainer / bench phase", COLORS["step"]),
                    ("sharded collection phase", COLORS["sharded"]), ("collective", COLORS["collective"]),
                    ("RocksDB tier", COLORS["tier"])):
        out.append(f'<rect x="{lx}" y="{y + 38}" width="12" height="10" fill="{c}"/>'
                   f'<text x="{lx + 16}" y="{y + 47}">{name}</text>')
        lx += 30 + 6 * len(name)
    out.append("</svg>")
    open(a.out, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
