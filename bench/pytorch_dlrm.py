#!/usr/bin/env python3
"""PyTorch DLRM of the same shape as a tessera-bench config, for side-by-side samples/s.

The model follows facebookresearch/dlrm: nn.EmbeddingBag(mode="sum") per table with sparse
gradients, bottom MLP (ReLU after every layer), dot interaction without self-interaction,
top MLP (no ReLU on the logit), BCEWithLogitsLoss. The optimizers do the same work as the
tessera-bench configs (configs/bench/*.yaml): row-wise AdaGrad on the embedding tables (FBGEMM's
rule, as embedding/row_optimizer.h: v[row] += mean(g_row^2); w[row] -= lr g_row / (sqrt(v) +
eps), on the coalesced sparse gradient) and plain SGD on the dense parameters. Batches are
generated before timing with ids drawn Zipf(exponent) over each table's rows, so only the
training step is timed, as in tessera-bench; --batches of them are cycled (default 64, the same
default as tessera-bench, so the rows touched exceed the last-level cache).

--dtype bf16 runs forward and loss under torch.autocast("cpu", torch.bfloat16) (oneDNN's bf16
matmuls on AVX512_BF16; the backward follows autocast's casts), fp32 master weights as in fp32.
For its best CPU speed run it with the OpenMP build of OpenBLAS on the library path and passive
OpenMP waiting, as bench/cpu_compare.sh does:
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_WAIT_POLICY=PASSIVE ...

Run with Debian's python3-torch (`apt-get install python3-torch`):
  /usr/bin/python3 bench/pytorch_dlrm.py --preset small --threads 1
On a GPU (bench/gpu_check.sh's eager baseline) batches are copied to the device before timing
and each step ends with loss.item(), which waits for the GPU:
  python3 bench/pytorch_dlrm.py --device cuda --preset kaggle --batch 16384 --steps 50
"""
import argparse
import json
import time

import numpy as np
import torch
from torch import nn

KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
          27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
MLPERF = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
          2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
MLPERF_MULTI_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10,
                    3, 1, 1]

PRESETS = {
    "small": dict(rows=[100000] * 8, dim=64, pooling=[1] * 8, batch=2048,
                  bottom=[512, 256, 64], top=[512, 256, 1]),
    "kaggle": dict(rows=[min(r, 1000000) for r in KAGGLE], dim=16, pooling=[1] * 26, batch=2048,
                   bottom=[512, 256, 16], top=[512, 256, 1]),
    "mlperf-mini": dict(rows=[min(r, 2000000) for r in MLPERF], dim=128,
                        pooling=[(p + 1) // 2 for p in MLPERF_MULTI_HOT], batch=1024,
                        bottom=[512, 256, 128], top=[1024, 1024, 512, 256, 1]),
    # configs/bench/skewed.yaml: two large one-hot tables and one small hot table, 40 ids a bag.
    "skewed": dict(rows=[1200000, 1000000, 200000], dim=64, pooling=[1, 1, 40], batch=2048,
                   bottom=[64, 64], top=[64, 1]),
}


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or relu_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, rows, dim, bottom, top, num_dense=13):
        super().__init__()
        self.embedding = nn.ModuleList(
            [nn.EmbeddingBag(r, dim, mode="sum", sparse=True) for r in rows])
        self.bottom_mlp = mlp([num_dense] + bottom, relu_last=True)
        f = len(rows) + 1
        li, lj = torch.tril_indices(f, f, offset=-1)
        self.register_buffer("li", li, persistent=False)  # moves with .to(device)
        self.register_buffer("lj", lj, persistent=False)
        self.top_mlp = mlp([dim + f * (f - 1) // 2] + top, relu_last=False)

    def forward(self, dense, indices, offsets):
        x = self.bottom_mlp(dense)
        embs = [bag(i, o) for bag, i, o in zip(self.embedding, indices, offsets)]
        z = torch.stack([x] + embs, dim=1)
        zz = torch.bmm(z, z.transpose(1, 2))
        inter = zz[:, self.li, self.lj]
        return self.top_mlp(torch.cat([x, inter], dim=1)).squeeze(1)


_CDF = {}


def zipf_ids(rng, rows, n, a):
    # Inverse CDF of a Zipf(a) law over ranks 1..rows, ranks scrambled over the table.
    cdf = _CDF.get((rows, a))
    if cdf is None:
        cdf = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -a)
        cdf /= cdf[-1]
        _CDF[(rows, a)] = cdf
    r = np.searchsorted(cdf, rng.random(n))
    return (r * 2654435761) % rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=0, help="override the preset's batch size")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--eps", type=float, default=1e-8, help="row-wise AdaGrad epsilon")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast(device, torch.bfloat16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    p = PRESETS[args.preset]
    dev = torch.device(args.device)
    rng = np.random.default_rng(1)
    b = args.batch or p["batch"]
    batches = []
    for _ in range(args.batches):
        dense = torch.from_numpy(np.log1p(rng.exponential(3.0, (b, 13))).astype(np.float32))
        idx, off = [], []
        for r, k in zip(p["rows"], p["pooling"]):
            idx.append(torch.from_numpy(zipf_ids(rng, r, b * k, args.zipf)).long().to(dev))
            off.append(torch.arange(0, b * k, k, dtype=torch.long, device=dev))
        labels = torch.from_numpy((rng.random(b) < 0.25).astype(np.float32)).to(dev)
        batches.append((dense.to(dev), idx, off, labels))
    model = DLRM(p["rows"], p["dim"], p["bottom"], p["top"]).to(dev)
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("embedding.")]
    opt = torch.optim.SGD(dense_params, lr=args.lr)
    tables = [bag.weight for bag in model.embedding]
    # Row-wise AdaGrad state: one float per row, as tessera's RowStore keeps it.
    row_sq = [torch.zeros(t.shape[0], device=dev) for t in tables]
    loss_fn = nn.BCEWithLogitsLoss()
    autocast = args.dtype == "bf16"

    @torch.no_grad()
    def rowwise_adagrad():
        for w, v in zip(tables, row_sq):
            g = w.grad.coalesce()  # one gradient row per distinct id
            rows, vals = g.indices()[0], g.values()
            v.index_add_(0, rows, vals.pow(2).mean(1))
            scale = args.lr / (v.index_select(0, rows).sqrt_() + args.eps)
            w.index_add_(0, rows, vals * scale.unsqueeze(1), alpha=-1.0)
            w.grad = None

    def step(i):
        dense, idx, off, labels = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(dense, idx, off).float(), labels)
        loss.backward()
        opt.step()
        rowwise_adagrad()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    secs = time.perf_counter() - t0
    cpu_secs = time.process_time() - c0
    out = {"name": "pytorch-" + args.preset, "device": str(dev), "threads": args.threads,
           "dtype": args.dtype, "batches": len(batches),
           "batch_size": b, "steps": args.steps, "samples_per_sec": args.steps * b / secs,
           "ms_per_step": 1e3 * secs / args.steps, "final_loss": loss,
           "cpu_ms_per_step": 1e3 * cpu_secs / args.steps,
           "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else ""}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
