#!/usr/bin/env python3
"""Bytes per rank per training step of Tessera's sparse traffic, 1-D vs 2-D sparse parallelism.

    bench/cost_model.py check runs/scaling.jsonl   # model vs tessera-bench's measured bytes
    bench/cost_model.py scale                      # 1-D (N = T) vs 2-D (N fixed) up to 4096 ranks

Notation: T ranks = M replica groups x N ranks per sharding group; G global batch, B = G / T
local batch; F features (one table each), L ids per bag, d dim, e bytes per payload float (4, or 2
with sharding.comm_dtype fp16/bf16); U(n, R) = expected distinct rows among n Zipf(s) draws
over R rows = sum_r 1 - (1 - p_r)^n.

Per rank per step (what Communicator's counters record: bytes put on the wire by this rank):
  input dist, table-wise   sum over the N-1 other ranks of Align8(sum over their tables of
                           8 U(B L) + 4 B + 4 B L)   (unique ids int64, lengths and positions
                           int32) + headers 8 x sections x (2 + 2 F / N) x (N-1)
  input dist, row-wise     ~ B F (8 L + 4) (N-1) / N + 4 B F (N-1)   (lengths go to every shard)
  output + backward dist   table-wise: 2 B F d e (N-1) / N; row-wise: 2 B F d e (N-1)
                           (every row shard returns a partial sum of every bag of its rows)
  replica sync (exact)     all-gather of own touched rows 8 u (M-1), u = rows of my shard the
                           group's batch touched; all-reduce of the union's gradients
                           2 (M-1) / M x U_s d 4, U_s = rows of my shard the global batch touched
  replica sync (average k) every k steps: weights (and optimizer state) of the rows touched in k
                           steps, all-reduced: the exact-mode bytes / k, roughly
  dense all-reduce         2 (T-1) / T x 4 P (P dense parameters), the same in 1-D and 2-D
Time (alpha-beta, per collective): t = alpha x peers + bytes / beta.
"""
import json
import math
import sys



def distinct(n, rows, s=1.05, _norm={}):
    """Expected distinct rows among n Zipf(s) draws over `rows` rows: exact sum over the first
    4096 ranks, geometric groups of ranks (probability at the group's geometric mid) beyond."""
    if n <= 0:
        return 0.0
    groups = [(r, r + 1) for r in range(1, min(rows, 4096) + 1)]
    lo = min(rows, 4096) + 1
    while lo <= rows:
        hi = min(rows + 1, max(lo + 1, int(lo * 1.005)))
        groups.append((lo, hi))
        lo = hi
    key = (rows, s)
    if key not in _norm:
        _norm[key] = sum((h - l) * math.sqrt(l * (h - 1)) ** (-s) for l, h in groups)
    total = 0.0
    for l, h in groups:
        p = math.sqrt(l * (h - 1)) ** (-s) / _norm[key]
        total += (h - l) * -math.expm1(n * math.log1p(-p))
    return total


def align8(x):
    return (x + 7) // 8 * 8


def table_wise(m, n, b, tables, L, d, e=4, sections=2, dense_params=0):
    """Bytes per rank per step for table-wise sharding with len(tables) equal tables spread
    evenly over the group (the default plan of equal tables). Returns a dict by collective."""
    f = len(tables)
    per_rank = f // n
    u_local = distinct(b * L, tables[0])
    ids = 0.0
    for _ in range(n - 1):
        ids += align8(per_rank * (8 * u_local + 4 * b + 4 * b * L))
        ids += 8 * sections * (2 + 2 * per_rank)
    emb = 2 * b * f * d * e * (n - 1) / n
    out = {"sharding group all_to_all": ids + emb}
    t = m * n
    if m > 1:
        u_group = distinct(n * b * L, tables[0])
        u_global = distinct(t * b * L, tables[0])
        out["replica group all_gather"] = 8 * per_rank * u_group * (m - 1)
        out["replica group all_reduce"] = 2 * (m - 1) * per_rank * u_global * d * 4 // m
    if t > 1 and dense_params:
        # dense gradients + the loss/count all-reduce (2 doubles)
        out["world all_reduce"] = 2 * (t - 1) * dense_params * 4 // t + 2 * (t - 1) * 16 // t
    return out


def dlrm_dense_params(num_dense, bottom, top, f, d):
    p, prev = 0, num_dense
    for w in bottom:
        p += prev * w + w
        prev = w
    prev = d + (f + 1) * f // 2  # dot interaction: bottom output + pairwise dots
    for w in top:
        p += prev * w + w
        prev = w
    return p


def check(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    # configs/bench/small.yaml: 8 tables x 100k rows, d 64, pooling 1, Zipf 1.05.
    tables, L, d = [100000] * 8, 1, 64
    p = dlrm_dense_params(13, [512, 256, 64], [512, 256, 1], 8, 64)
    print("| M x N | collective | measured B/step/rank | model | model / measured |")
    print("|---|---|---|---|---|")
    for r in rows:
        t, n = r["ranks"], r["group_size"]
        if t == 1:
            continue
        model = table_wise(t // n, n, r["batch_size"], tables, L, d, dense_params=p)
        for k, v in model.items():
            meas = r.get("bytes_" + k, 0.0)
            ratio = v / meas if meas else float("nan")
            print(f"| {r['name']} | {k} | {meas:.0f} | {v:.0f} | {ratio:.4f} |")


def scale():
    # A DLRM-DCNv2-like model: 26 tables (MLPerf sizes, capped), d 128, multi-hot pooling as the
    # MLPerf DCNv2 benchmark (mean ~8.2 ids per bag), global batch 65536, exact replica sync.
    G, d, e = 65536, 128, 4
    pool = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
    rows = [40_000_000, 39_060, 17_295, 7_424, 20_265, 3, 7_122, 1_543, 63, 40_000_000,
            3_067_956, 405_282, 10, 2_209, 11_938, 155, 4, 976, 14, 40_000_000, 40_000_000,
            40_000_000, 590_152, 12_973, 108, 36]
    F, Lbar = len(pool), sum(pool) / len(pool)
    alpha, beta = 10e-6, 12.5e9  # 10 us per peer message, 100 Gb/s per rank
    cache = {}

    def touched(n_samples):
        # distinct rows over all tables touched by n_samples samples
        key = n_samples
        if key not in cache:
            cache[key] = sum(distinct(n_samples * L, R) for L, R in zip(pool, rows))
        return cache[key]

    def rowwise(T, N):
        M, B = T // N, G / T
        ids = B * F * (8 * Lbar + 4) * (N - 1) / N + 4 * B * F * (N - 1)
        emb = 2 * B * F * d * e * (N - 1)
        a2a = ids + emb
        sync_b = 0.0
        if M > 1:
            sync_b = 8 * touched(G / M) / N * (M - 1) + 2 * (M - 1) / M * touched(G) / N * d * 4
        a2a_t = 3 * (N - 1) * alpha + a2a / beta  # input, output, backward all-to-alls
        sync_t = (0 if M == 1 else 2 * (M - 1) * alpha + sync_b / beta)
        return a2a, sync_b, a2a_t, sync_t

    print("Row-wise sharding in the group, exact replica sync; bytes and alpha-beta time per "
          "rank per step (alpha 10 us, beta 12.5 GB/s)")
    print("| T | layout | N | M | all-to-all MB | replica sync MB | all-to-all ms | sync ms |"
          " total ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T in [8, 64, 512, 4096]:
        for label, N in [("1-D", T), ("2-D", 8), ("2-D", 64)]:
            if N > T or (label == "2-D" and N == T):
                continue
            a2a, sync_b, a2a_t, sync_t = rowwise(T, N)
            print(f"| {T} | {label} | {N} | {T // N} | {a2a / 1e6:.2f} | {sync_b / 1e6:.2f} | "
                  f"{1e3 * a2a_t:.2f} | {1e3 * sync_t:.2f} | {1e3 * (a2a_t + sync_t):.2f} |")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "scale":
        scale()
    else:
        print(__doc__)
        sys.exit(2)
