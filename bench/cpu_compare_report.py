#!/usr/bin/env python3
"""Tables of bench/cpu_compare.sh's JSON lines: medians over rounds, min-max spread, checks.

  python3 bench/cpu_compare_report.py /tmp/tessera_cpu_compare.jsonl

Table 1, samples/s (median, and the spread over rounds as +-half the min-max range in %) of
tessera-bench fp32 / bf16, TorchRec + FBGEMM fp32 / bf16 autocast and PyTorch 1.13 fp32 / bf16
autocast, and tessera over the best anchor of its dtype.
Table 2, against the bare matmuls (bench/dense_gemm_bench.cc, same shapes, same threads): the MLP
GEMM work of a step done at the bare rate divided by tessera's step time, i.e. tessera's
whole-step rate counting only MLP GEMM flops as a fraction of the bare rate: fp32 against the
faster of OpenBLAS sgemm and oneDNN fp32, bf16 against oneDNN bf16 (operands already bf16); and
2 threads over 1 thread for each implementation.
Table 3, CPU ms per step (all threads of the process; one thread: what a quiet core would take).
"""
import json
import statistics
import sys

# MLP GEMM flops per sample of one training step (forward + two backward products per layer,
# none for the first bottom layer's input gradient), the shapes of bench/dense_gemm_bench.cc.
SHAPES = {"small": (8, 64, [512, 256, 64], [512, 256, 1]),
          "kaggle": (26, 16, [512, 256, 16], [512, 256, 1]),
          "mlperf-mini": (26, 128, [512, 256, 128], [1024, 1024, 512, 256, 1]),
          "skewed": (3, 64, [64, 64], [64, 1])}
IMPLS = ["tessera-fp32", "tessera-bf16", "torchrec-fp32", "torchrec-bf16", "pytorch-fp32",
         "pytorch-bf16"]


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
        if r.get("impl") == "machine":
            print(f"machine: {r['cpu']}, {r['cores']} cores, Linux {r['linux']}, "
                  f"AMX-BF16 {r['amx_bf16']}, AVX512_BF16 {r['avx512_bf16']}")
            continue
        key = (r["config"], int(r["threads"]), r["impl"])
        runs.setdefault(key, []).append(r)
    seen = set()
    for (c, t, impl), rs in sorted(runs.items()):
        if impl.startswith("torchrec") and impl not in seen:
            seen.add(impl)
            x = rs[0]
            print(f"{impl}: torch {x.get('torch')}, torchrec {x.get('torchrec')}, "
                  f"fbgemm-gpu-cpu {x.get('fbgemm-gpu-cpu')}, kernel {x.get('kernel')}")
        if impl.startswith("pytorch") and impl not in seen:
            seen.add(impl)
            print(f"{impl}: torch {rs[0].get('torch')}, nn.EmbeddingBag + sparse row-wise AdaGrad")
    print()

    def med(cfg, t, impl, field="samples_per_sec"):
        v = [x[field] for x in runs.get((cfg, t, impl), []) if x.get(field) is not None]
        return (statistics.median(v), v) if v else (None, [])

    def fmt(cfg, t, impl):
        m, v = med(cfg, t, impl)
        if m is None:
            return "n/a"
        spread = 50.0 * (max(v) - min(v)) / m
        return f"{m / 1e3:.1f}k ±{spread:.0f}%"

    q = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"
    configs = [c for c in SHAPES if any(k[0] == c and k[2] in IMPLS for k in runs)]
    print("| config | threads | tessera fp32 | tessera bf16 | TorchRec fp32 | TorchRec bf16 | "
          "PyTorch 1.13 fp32 | PyTorch 1.13 bf16 | fp32 / best fp32 anchor | "
          "bf16 / best bf16 anchor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        for t in (1, 2):
            m = {i: med(c, t, i)[0] for i in IMPLS}
            best = lambda dt: max([v for v in (m[f"torchrec-{dt}"], m[f"pytorch-{dt}"]) if v],
                                  default=None)
            cells = " | ".join(fmt(c, t, i) for i in IMPLS)
            print(f"| {c} | {t} | {cells} | {q(m['tessera-fp32'], best('fp32'))} | "
                  f"{q(m['tessera-bf16'], best('bf16'))} |")
    print()
    print("Against the bare matmuls of the step's MLPs (same shapes and threads), and 2 threads "
          "over 1:")
    print()
    print("| config | threads | bare sgemm GFLOP/s | bare oneDNN fp32 | bare oneDNN bf16 | "
          "tessera fp32 / best bare fp32 | tessera bf16 / bare bf16 | 2 thr / 1 thr: tessera fp32 "
          "| tessera bf16 | TorchRec fp32 | TorchRec bf16 | PyTorch fp32 | PyTorch bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    g = lambda x: f"{x:.0f}" if x else "n/a"
    for c in configs:
        for t in (1, 2):
            sg, _ = med(c, t, "sgemm", "gflops")
            df, _ = med(c, t, "dnnl-f32", "gflops")
            db, _ = med(c, t, "dnnl-bf16", "gflops")
            tf, _ = med(c, t, "tessera-fp32")
            tb, _ = med(c, t, "tessera-bf16")
            bare32 = max([v for v in (sg, df) if v], default=None)
            f32 = f"{100 * tf * mlp_flops(c) / (bare32 * 1e9):.0f}%" if tf and bare32 else "n/a"
            b16 = f"{100 * tb * mlp_flops(c) / (db * 1e9):.0f}%" if tb and db else "n/a"
            scale = " | ".join(q(med(c, 2, i)[0], med(c, 1, i)[0]) if t == 2 else ""
                               for i in IMPLS)
            print(f"| {c} | {t} | {g(sg)} | {g(df)} | {g(db)} | {f32} | {b16} | {scale} |")
    print()
    print("CPU ms per step (medians, whole process; on a loaded machine the 1-thread CPU times are "
          "what a quiet core would take): the bare matmuls (1 thread, main thread), each "
          "implementation, and ratios of CPU times: best anchor over tessera (fp32, bf16), bare "
          "matmul over tessera (fp32 against the faster bare fp32, bf16 against bare bf16)")
    print()
    print("| config | threads | bare fp32 | bare bf16 | " + " | ".join(IMPLS) +
          " | anchor / tessera fp32 | anchor / tessera bf16 | bare / tessera fp32 | "
          "bare / tessera bf16 |")
    print("|---|---|---|---|" + "---|" * (len(IMPLS) + 4))
    f = lambda x: f"{x:.1f}" if x else "n/a"
    r = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    for c in configs:
        for t in (1, 2):
            m = {i: med(c, t, i, "cpu_ms_per_step")[0] for i in IMPLS}
            # One thread only: with two, the bare bench's CPU time is its main thread's alone.
            b32 = min([v for v in (med(c, t, "sgemm", "cpu_ms_per_step")[0],
                                   med(c, t, "dnnl-f32", "cpu_ms_per_step")[0]) if v],
                      default=None) if t == 1 else None
            b16 = med(c, t, "dnnl-bf16", "cpu_ms_per_step")[0] if t == 1 else None
            a32 = min([v for v in (m["torchrec-fp32"], m["pytorch-fp32"]) if v], default=None)
            a16 = min([v for v in (m["torchrec-bf16"], m["pytorch-bf16"]) if v], default=None)
            cells = " | ".join(f(m[i]) for i in IMPLS)
            print(f"| {c} | {t} | {f(b32)} | {f(b16)} | {cells} | {r(a32, m['tessera-fp32'])} | "
                  f"{r(a16, m['tessera-bf16'])} | {r(b32, m['tessera-fp32'])} | "
                  f"{r(b16, m['tessera-bf16'])} |")
    print()
    for c in configs:
        for impl in IMPLS:
            one, _ = med(c, 1, impl)
            two, _ = med(c, 2, impl)
            if one and two:
                verdict = "ok" if two > one else "NOT FASTER"
                print(f"check: {impl} {c}: 2 threads {two / one:.2f}x of 1 thread: {verdict}")


if __name__ == "__main__":
    main()
