#!/usr/bin/env python3
"""Table of bench/cpu_compare.sh's JSON lines: medians over rounds, min-max spread, checks.

  python3 bench/cpu_compare_report.py /tmp/tessera_cpu_compare.jsonl

Columns: samples/s of tessera-bench fp32 / bf16 and PyTorch fp32 / bf16 autocast (median, and
the spread over rounds as +-half the min-max range in %); "fp32 vs sgemm": the MLP GEMM work of
a step done at the bare sgemm rate (bench/dense_gemm_bench.cc, same shapes, same threads) divided
by tessera's fp32 step time, i.e. tessera's whole-step rate counting only MLP GEMM flops as a
fraction of the bare sgemm rate; ratios of tessera bf16 to PyTorch's two modes.
"""
import json
import statistics
import sys

# MLP GEMM flops per sample of one training step (forward + two backward products per layer,
# none for the first bottom layer's input gradient), the shapes of bench/dense_gemm_bench.cc.
SHAPES = {"small": (8, 64, [512, 256, 64], [512, 256, 1]),
          "kaggle": (26, 16, [512, 256, 16], [512, 256, 1]),
          "mlperf-mini": (26, 128, [512, 256, 128], [1024, 1024, 512, 256, 1])}


def mlp_flops(name):
    f, d, bottom, top = SHAPES[name]
    total, i = 0, 13
    for k, o in enumerate(bottom):
        total += (6 if k else 4) * i * o
        i = o
    i = d + (f + 1) * f // 2
    for o in top:
        total += 6 * i * o
        i = o
    return total


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    runs = {}
    for r in rows:
        key = (r["config"], int(r["threads"]), r["impl"])
        runs.setdefault(key, []).append(r)

    def med(cfg, t, impl, field="samples_per_sec"):
        v = [x[field] for x in runs.get((cfg, t, impl), []) if x.get(field) is not None]
        return (statistics.median(v), v) if v else (None, [])

    def fmt(cfg, t, impl):
        m, v = med(cfg, t, impl)
        if m is None:
            return "n/a"
        spread = 50.0 * (max(v) - min(v)) / m
        return f"{m / 1e3:.1f}k ±{spread:.0f}%"

    configs = [c for c in SHAPES if any(k[0] == c for k in runs)]
    print("| config | threads | tessera fp32 | tessera bf16 | PyTorch fp32 | PyTorch bf16 | "
          "fp32 vs sgemm | bf16 / PyTorch fp32 | bf16 / PyTorch bf16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        for t in (1, 2):
            tf, _ = med(c, t, "tessera-fp32")
            tb, _ = med(c, t, "tessera-bf16")
            pf, _ = med(c, t, "pytorch-fp32")
            pb, _ = med(c, t, "pytorch-bf16")
            gf, _ = med(c, t, "sgemm", "gflops")
            frac = (f"{100 * tf * mlp_flops(c) / (gf * 1e9):.0f}%" if tf and gf else "n/a")
            r1 = f"{tb / pf:.2f}x" if tb and pf else "n/a"
            r2 = f"{tb / pb:.2f}x" if tb and pb else "n/a"
            print(f"| {c} | {t} | {fmt(c, t, 'tessera-fp32')} | {fmt(c, t, 'tessera-bf16')} | "
                  f"{fmt(c, t, 'pytorch-fp32')} | {fmt(c, t, 'pytorch-bf16')} | {frac} | {r1} | "
                  f"{r2} |")
    print()
    print("CPU ms per step (medians): bare sgemm of the step's MLP products (main thread), "
          "tessera fp32 / bf16, PyTorch fp32 / bf16 (whole process); ratios of CPU times")
    print()
    print("| config | threads | bare sgemm | tessera fp32 | tessera bf16 | PyTorch fp32 | "
          "PyTorch bf16 | sgemm / tessera fp32 | PyTorch fp32 / tessera bf16 | "
          "PyTorch bf16 / tessera bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    f = lambda x: f"{x:.1f}" if x else "n/a"
    q = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    for c in configs:
        for t in (1, 2):
            # One thread only: with two, the bench's CPU time is its main thread's alone.
            g, _ = med(c, t, "sgemm", "cpu_ms_per_step") if t == 1 else (None, [])
            tf, _ = med(c, t, "tessera-fp32", "cpu_ms_per_step")
            tb, _ = med(c, t, "tessera-bf16", "cpu_ms_per_step")
            pf, _ = med(c, t, "pytorch-fp32", "cpu_ms_per_step")
            pb, _ = med(c, t, "pytorch-bf16", "cpu_ms_per_step")
            print(f"| {c} | {t} | {f(g)} | {f(tf)} | {f(tb)} | {f(pf)} | {f(pb)} | {q(g, tf)} | "
                  f"{q(pf, tb)} | {q(pb, tb)} |")
    print()
    for c in configs:
        for mode in ("fp32", "bf16"):
            one, _ = med(c, 1, "pytorch-" + mode)
            two, _ = med(c, 2, "pytorch-" + mode)
            if one and two:
                verdict = "ok" if two > one else "NOT FASTER"
                print(f"check: PyTorch {mode} {c}: 2 threads {two / one:.2f}x of 1 thread: {verdict}")


if __name__ == "__main__":
    main()
