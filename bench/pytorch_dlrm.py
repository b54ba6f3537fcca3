#!/usr/bin/env python3
"""PyTorch DLRM of the same shape as a tessera-bench config, for side-by-side samples/s.

The model follows facebookresearch/dlrm: nn.EmbeddingBag(mode="sum") per table with sparse
gradients, bottom MLP (ReLU after every layer), dot interaction without self-interaction,
top MLP (no ReLU on the logit), BCEWithLogitsLoss, and SGD for everything (the dlrm default; the
embedding update is a sparse SGD step). Batches are generated before timing with ids drawn
Zipf(exponent) over each table's rows, so only the training step is timed, as in tessera-bench.

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


def zipf_ids(rng, rows, n, a):
    # Inverse CDF of a Zipf(a) law over ranks 1..rows, ranks scrambled over the table.
    ranks = np.arange(1, rows + 1, dtype=np.float64)
    cdf = np.cumsum(ranks ** -a)
    cdf /= cdf[-1]
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
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--lr", type=float, default=0.05)
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
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()

    def step(i):
        dense, idx, off, labels = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(dense, idx, off), labels)
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    secs = time.perf_counter() - t0
    out = {"name": "pytorch-" + args.preset, "device": str(dev), "threads": args.threads,
           "batch_size": b, "steps": args.steps, "samples_per_sec": args.steps * b / secs,
           "ms_per_step": 1e3 * secs / args.steps, "final_loss": loss,
           "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else ""}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
