#!/usr/bin/env python3
"""Reads the results bench/gpu_check.sh left in a folder and prints its closing table.

  gpu_check_report.py quickstart OUT_DIR   compare quickstart GPU vs CPU metrics.jsonl; exit 1 on
                                           a failed check; writes OUT_DIR/quickstart_compare.json
  gpu_check_report.py table OUT_DIR        the summary table (stdout) and OUT_DIR/summary.json
  gpu_check_report.py summary WORK MD      the one summary file of bench/gpu_check.sh: stages,
                                           each test binary's counts, the table, failed logs' tails

Acceptance (issue #5): eval AUC |GPU - CPU| <= 0.005; loss curve: every logged interval-mean
train loss within 0.01 (absolute) of the CPU run's at the same step. The twins differ only by
summation order and fused multiply-adds, so the curves drift apart slowly, far below this.
"""
import json
import os
import sys

AUC_TOL = 0.005
LOSS_TOL = 0.01


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def read_json(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            # tessera-bench / the PyTorch script: the JSON object is the last line.
            return json.loads(text.splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def quickstart(out, gpu_run="quick_gpu", cpu_run="quick_cpu"):
    paths = [os.path.join(out, run, "metrics.jsonl") for run in (gpu_run, cpu_run)]
    for path in paths:
        if not os.path.exists(path):
            print(f"quickstart: {path} is missing (that run failed; see its log)")
            return 1
    gpu, cpu = read_jsonl(paths[0]), read_jsonl(paths[1])
    done_g = [r for r in gpu if r.get("status") == "done"]
    done_c = [r for r in cpu if r.get("status") == "done"]
    if not done_g or not done_c:
        print("quickstart: a run did not finish (no 'done' line)")
        return 1
    auc_g, auc_c = done_g[-1]["eval_auc"], done_c[-1]["eval_auc"]
    loss_g = {r["step"]: r["train_loss"] for r in gpu if "train_loss" in r and "status" not in r}
    loss_c = {r["step"]: r["train_loss"] for r in cpu if "train_loss" in r and "status" not in r}
    common = sorted(set(loss_g) & set(loss_c))
    max_diff = max((abs(loss_g[s] - loss_c[s]) for s in common), default=float("nan"))
    res = {"auc_gpu": auc_g, "auc_cpu": auc_c, "auc_diff": abs(auc_g - auc_c),
           "loss_points": len(common), "loss_max_abs_diff": max_diff,
           "auc_ok": abs(auc_g - auc_c) <= AUC_TOL,
           "loss_ok": len(common) > 0 and max_diff <= LOSS_TOL,
           "gpu_samples_per_sec": done_g[-1].get("samples_per_sec"),
           "cpu_samples_per_sec": done_c[-1].get("samples_per_sec")}
    name = "quickstart" if gpu_run == "quick_gpu" else gpu_run
    with open(os.path.join(out, f"{name}_compare.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))
    return 0 if res["auc_ok"] and res["loss_ok"] else 1


def bench_value(path, name_prefix, counter=None, bytes_per_second=False):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    for b in data.get("benchmarks", []):
        if b.get("name", "").startswith(name_prefix) and not b.get("error_occurred"):
            if bytes_per_second:
                return b.get("bytes_per_second")
            return b.get(counter)
    return None


def fmt(v, scale=1.0, digits=1, unit=""):
    return "n/a" if v is None else f"{v * scale:.{digits}f}{unit}"


def table_rows(out):
    stages = {}
    stages_path = os.path.join(out, "stages.tsv")
    if os.path.exists(stages_path):
        for line in open(stages_path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                stages[parts[0]] = parts[1]
    q = read_json(os.path.join(out, "quickstart_compare.json"))
    lk = os.path.join(out, "cuda_lookup_bench.json")
    ln = os.path.join(out, "cuda_linear_bench.json")
    copy_bw = bench_value(lk, "BM_DeviceCopy", bytes_per_second=True)
    look_bw = {a: bench_value(lk, f"BM_PooledLookup/{a}", bytes_per_second=True)
               for a in ("64/20", "128/20", "128/1")}
    sgemm = bench_value(ln, "BM_CublasSgemm", "TFLOP/s")
    shapes = ("65536/512/256", "65536/1024/1024", "16384/479/1024")
    lin = {a: bench_value(ln, f"BM_LinearStep/{a}", "TFLOP/s") for a in shapes}
    lin16 = {a: bench_value(ln, f"BM_LinearStepBf16/{a}", "TFLOP/s") for a in shapes}

    def sps(name):
        d = read_json(os.path.join(out, name))
        return d.get("samples_per_sec") if d else None
    ts = sps("tessera_bench_gpu.json")  # headline: dense_dtype bf16
    t32 = sps("tessera_bench_gpu_fp32.json")
    tps = sps("tessera_bench_gpu_phases.json")
    ps = sps("pytorch_gpu.json")
    rows = [("stages ok", f"{sum(v == 'ok' for v in stages.values())} of {len(stages)}")]
    if q:
        rows.append(("quickstart eval AUC gpu / cpu (|diff| <= 0.005)",
                     f"{q['auc_gpu']:.4f} / {q['auc_cpu']:.4f} ({'ok' if q['auc_ok'] else 'FAIL'})"))
        rows.append(("quickstart max abs train loss diff (<= 0.01)",
                     f"{q['loss_max_abs_diff']:.5f} over {q['loss_points']} points "
                     f"({'ok' if q['loss_ok'] else 'FAIL'})"))
    else:
        rows.append(("quickstart gpu vs cpu", "n/a (a run failed)"))
    q2 = read_json(os.path.join(out, "mpi2_gpu_compare.json"))
    if q2:
        ok = "ok" if q2["auc_ok"] and q2["loss_ok"] else "FAIL"
        rows.append(("2 ranks sharing the GPU vs 2 CPU ranks: AUC / max loss diff",
                     f"{q2['auc_gpu']:.4f} / {q2['auc_cpu']:.4f}, {q2['loss_max_abs_diff']:.5f} "
                     f"({ok})"))
    else:
        rows.append(("2 ranks sharing the GPU vs 2 CPU ranks", "n/a (a run failed)"))
    for np_ in (1, 2, 4):
        c = gtest_counts(os.path.join(out, f"sharded_cuda_np{np_}.log"))
        how = "NCCL" if np_ == 1 else "MPI staged"
        label = f"CUDA shards vs CPU, {np_} rank{'s' if np_ > 1 else ''} ({how})"
        if c is None:
            rows.append((label, "n/a (not run)"))
        else:
            rows.append((label, f"{c[0]} passed, {c[1]} failed, {c[2]} skipped"
                                + (f": {', '.join(c[3][:4])}" if c[3] else "")))
    hbm = stages.get("hbm_cache_compare")
    rows.append(("HBM cache over host memory / RocksDB: exports equal the whole table's",
                 "ok (bit-identical)" if hbm == "ok" else f"{hbm or 'n/a'}"))
    rows.append(("device-to-device copy bandwidth", fmt(copy_bw, 1e-9, 0, " GB/s")))
    for a, v in look_bw.items():
        ratio = f" ({v / copy_bw:.0%} of copy)" if v and copy_bw else ""
        rows.append((f"pooled lookup dim/pooling {a}", fmt(v, 1e-9, 0, " GB/s") + ratio))
    rows.append(("cuBLAS SGEMM 8192^3", fmt(sgemm, 1, 1, " TFLOP/s")))
    for a, v in lin.items():
        ratio = f" ({v / sgemm:.0%} of SGEMM)" if v and sgemm else ""
        rows.append((f"Linear fwd+bwd {a}", fmt(v, 1, 1, " TFLOP/s") + ratio))
    for a, v in lin16.items():
        ratio = f" ({v / lin[a]:.1f}x fp32)" if v and lin[a] else ""
        rows.append((f"Linear fwd+bwd bf16 {a}", fmt(v, 1, 1, " TFLOP/s") + ratio))

    def vs_torch(v):
        return f" ({v / ps:.2f}x PyTorch eager)" if v and ps else ""
    rows.append(("tessera-bench kaggle on GPU, dense bf16, phase syncs off (headline)",
                 fmt(ts, 1, 0, " samples/s") + vs_torch(ts)))
    rows.append(("tessera-bench kaggle on GPU, dense fp32, phase syncs off",
                 fmt(t32, 1, 0, " samples/s") + vs_torch(t32)))
    rows.append(("tessera-bench kaggle on GPU, dense bf16, phase syncs on",
                 fmt(tps, 1, 0, " samples/s")))
    rows.append(("PyTorch eager DLRM kaggle on GPU (fp32)", fmt(ps, 1, 0, " samples/s")))
    for name, what in (("mlperf_dcnv2_gpu.json", "bf16"), ("mlperf_dcnv2_gpu_fp32.json", "fp32")):
        ms = sps(name)
        goal = f" ({ms / 2.1e6:.0%} of the 2.1 M/s goal)" if ms else ""
        rows.append((f"MLPerf DLRM-DCNv2 shape, dense {what}, batch 65,536, tables capped "
                     "(MLPERF_ROWS)", fmt(ms, 1, 0, " samples/s") + goal))
    return rows


def table(out):
    rows = table_rows(out)
    width = max(len(r[0]) for r in rows)
    print("\n==== gpu_check summary ====")
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({k: v for k, v in rows}, f, indent=1)
    return 0


def gtest_counts(log):
    """(passed, failed, skipped, failed names, skip reasons) from a GoogleTest log."""
    passed = failed = skipped = 0
    names, reasons = [], set()
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("[  PASSED  ]") and "test" in line:
            passed += int(line.split()[3])
        elif line.startswith("[  SKIPPED ]") and "test" in line and line.split()[3].isdigit():
            skipped += int(line.split()[3])
        elif line.startswith("[  FAILED  ]") and "," not in line and "listed below" not in line:
            parts = line.split()
            if len(parts) >= 4 and "." in parts[3]:
                names.append(parts[3])
        if "no CUDA device: " in line:
            reasons.add(line[line.index("no CUDA device: "):][:120])
    names = sorted(set(names))
    failed = len(names)
    return passed, failed, skipped, names, sorted(reasons)


def summary(work, md_path):
    stages = []
    path = os.path.join(work, "stages.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                stages.append((parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    out = ["# gpu_check summary", ""]
    env = os.path.join(work, "env.log")
    if os.path.exists(env):
        out += ["## Machine", "", "```"] + open(env, errors="replace").read().splitlines()[:20] + \
               ["```", ""]
    out += ["## Stages", "", "| stage | result | detail |", "| --- | --- | --- |"]
    out += [f"| {n} | {r} | {d} |" for n, r, d in stages]
    out += ["", "## Tests", "", "| binary | passed | failed | skipped | failed tests / skip reason |",
            "| --- | --- | --- | --- | --- |"]
    for n, r, d in stages:
        if not (n.startswith("cuda_") and n.endswith("_test") or n.endswith("_cuda_test")
                or n.endswith("communicator_test") or n == "cuda_probe"
                or n.endswith("_memcheck") or n.startswith("sharded_cuda_np")):
            continue
        c = gtest_counts(os.path.join(work, n + ".log"))
        if c is None:
            continue
        p, f, sk, names, reasons = c
        what = ", ".join(names) if names else "; ".join(reasons)
        out.append(f"| {n} | {p} | {f} | {sk} | {what} |")
    out += ["", "## Results", "", "| what | value |", "| --- | --- |"]
    for k, v in table_rows(work):
        out.append(f"| {k} | {v} |")
    bad = [n for n, r, _ in stages if r != "ok"]
    if bad:
        out += ["", "## Failed stages: last lines of their logs", ""]
        for n in bad:
            log = os.path.join(work, n + ".log")
            try:
                tail = open(log, errors="replace").read().splitlines()[-25:]
            except OSError:
                tail = ["(no log)"]
            out += [f"### {n}", "", "```"] + [t[:300] for t in tail] + ["```", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out[:60]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "summary":
        sys.exit(summary(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 5 and sys.argv[1] == "quickstart":  # quickstart WORK GPU_RUN CPU_RUN
        sys.exit(quickstart(sys.argv[2], sys.argv[3], sys.argv[4]))
    if len(sys.argv) != 3 or sys.argv[1] not in ("quickstart", "table"):
        print(__doc__)
        sys.exit(2)
    sys.exit(quickstart(sys.argv[2]) if sys.argv[1] == "quickstart" else table(sys.argv[2]))
