#!/usr/bin/env python3
"""PyTorch eager DLRM on a GPU, the baseline of bench/gpu_check.sh's end-to-end comparison.

The model, presets and id generator are those of bench/pytorch_dlrm.py (facebookresearch/dlrm:
nn.EmbeddingBag(mode="sum", sparse=True), ReLU MLPs, dot interaction, BCEWithLogitsLoss, SGD),
moved to `--device` (default cuda). Batches are generated and copied to the device before
timing; each step ends with loss.item(), which waits for the GPU, so the time is the step's.
Prints one JSON object, like tessera-bench's last line.
  python3 bench/gpu_pytorch_dlrm.py --preset kaggle --batch 16384 --steps 50
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_dlrm import DLRM, PRESETS, zipf_ids  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, default="kaggle")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=0, help="override the preset's batch size")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    dev = torch.device(args.device)
    p = PRESETS[args.preset]
    b = args.batch or p["batch"]
    rng = np.random.default_rng(1)
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
    model.li, model.lj = model.li.to(dev), model.lj.to(dev)
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
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    secs = time.perf_counter() - t0
    out = {"name": "pytorch-eager-" + args.preset, "device": str(dev), "batch_size": b,
           "steps": args.steps, "samples_per_sec": args.steps * b / secs,
           "ms_per_step": 1e3 * secs / args.steps, "final_loss": loss,
           "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else ""}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
