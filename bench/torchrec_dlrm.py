#!/usr/bin/env python3
"""TorchRec + FBGEMM DLRM of the same shape as a tessera-bench config, for side-by-side samples/s.

What a user picks on the CPU today: TorchRec's `EmbeddingBagCollection` (built on the meta
device), sharded by `DistributedModelParallel` over a 1-rank gloo group, so the tables become
FBGEMM's `SplitTableBatchedEmbeddingBagsCodegen` (fbgemm-gpu-cpu's CPU kernels) with the
row-wise AdaGrad update fused into the backward (EXACT_ROWWISE_ADAGRAD, through
`apply_optimizer_in_backward` with torchrec's `RowWiseAdagrad`); TorchRec's `DLRM` / `DLRMTrain`
(bottom MLP, dot interaction, top MLP, BCEWithLogitsLoss); plain SGD on the dense parameters.
The shapes and the batches are those of bench/pytorch_dlrm.py's presets (configs/bench/*.yaml):
--batches distinct batches (ids Zipf over each table's rows) made before timing and cycled.

--dtype bf16 runs the forward and the loss under torch.autocast("cpu", torch.bfloat16) (oneDNN's
bf16 matmuls: AMX where the CPU has it, AVX512_BF16 otherwise); tables and master weights stay
fp32, as in tessera-bench's bf16 runs.

The venv (PyPI only): bash bench/torchrec_setup.sh VENV_DIR, then
  VENV_DIR/bin/python bench/torchrec_dlrm.py --preset small --threads 1 [--dtype bf16]
Prints one JSON line (samples/s, ms and CPU ms per step, the versions, the kernel that ran the
tables and oneDNN's ISA).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_dlrm import PRESETS, zipf_ids  # noqa: E402  (the same shapes and ids)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def versions():
    from importlib.metadata import PackageNotFoundError, version
    out = {"torch": torch.__version__}
    for pkg in ("torchrec", "fbgemm-gpu-cpu", "fbgemm-gpu"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=0, help="override the preset's batch size")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--eps", type=float, default=1e-8, help="row-wise AdaGrad epsilon")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm's CPU kernels)
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.datasets.utils import Batch
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.models.dlrm import DLRM, DLRMTrain
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    try:
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    except ImportError:  # older torchrec: torch's private twin
        from torch.distributed.optim import (
            _apply_optimizer_in_backward as apply_optimizer_in_backward)

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 20000))
    dist.init_process_group("gloo", rank=0, world_size=1)

    p = PRESETS[args.preset]
    b = args.batch or p["batch"]
    rows, dim, pooling = p["rows"], p["dim"], p["pooling"]
    keys = [f"f{i}" for i in range(len(rows))]
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(args.batches):
        dense = torch.from_numpy(np.log1p(rng.exponential(3.0, (b, 13))).astype(np.float32))
        values = [torch.from_numpy(zipf_ids(rng, r, b * k, args.zipf)).long()
                  for r, k in zip(rows, pooling)]
        lengths = [torch.full((b,), k, dtype=torch.int64) for k in pooling]
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values),
                                                  lengths=torch.cat(lengths))
        labels = torch.from_numpy((rng.random(b) < 0.25).astype(np.float32))
        batches.append(Batch(dense_features=dense, sparse_features=kjt, labels=labels))

    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=r,
                                 feature_names=[keys[i]]) for i, r in enumerate(rows)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    model = DLRMTrain(DLRM(embedding_bag_collection=ebc, dense_in_features=13,
                           dense_arch_layer_sizes=p["bottom"], over_arch_layer_sizes=p["top"],
                           dense_device=torch.device("cpu")))
    # The fused update: FBGEMM runs row-wise AdaGrad inside the tables' backward.
    apply_optimizer_in_backward(RowWiseAdagrad, model.model.sparse_arch.parameters(),
                                {"lr": args.lr, "eps": args.eps})
    sharders = [EmbeddingBagCollectionSharder()]
    topology = Topology(world_size=1, compute_device="cpu")
    plan = EmbeddingShardingPlanner(topology=topology).collective_plan(
        model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan,
                                   sharders=sharders)
    dense_opt = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        lambda params: torch.optim.SGD(params, lr=args.lr))

    # Which kernel the tables got (FBGEMM's SplitTableBatchedEmbeddingBagsCodegen expected), the
    # optimizer it fuses and its device (the sharded collection keeps its lookups in a list).
    ebc = dmp.module.model.sparse_arch.embedding_bag_collection
    # (a lookup may come wrapped in DistributedDataParallel: its .module is the lookup)
    lookups = [getattr(lookup, "module", lookup) for lookup in ebc._lookups]
    tbes = [e._emb_module for lookup in lookups for e in getattr(lookup, "_emb_modules", [])]
    # Small tables may be planned data_parallel (FBGEMM's DenseTableBatchedEmbeddingBagsCodegen
    # under DistributedDataParallel, no fused optimizer): recorded as they come.
    def describe(e):
        opt = getattr(e, "optimizer", None)
        prec = getattr(e, "weights_precision", None)
        return (f"{type(e).__name__}({opt.name if opt is not None else 'no fused optimizer'}, "
                f"{prec.name if prec is not None else 'FP32'})")
    kernel = ", ".join(f"{n} x {k}" for k, n in sorted(
        {d: sum(describe(x) == d for x in tbes) for d in map(describe, tbes)}.items()))
    autocast = args.dtype == "bf16"

    def step(i):
        batch = batches[i % len(batches)]
        dense_opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, _ = dmp(batch)
        loss.backward()
        dense_opt.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    secs = time.perf_counter() - t0
    cpu_secs = time.process_time() - c0
    out = {"name": "torchrec-" + args.preset, "device": "cpu", "threads": args.threads,
           "dtype": args.dtype, "batches": len(batches), "batch_size": b, "steps": args.steps,
           "samples_per_sec": args.steps * b / secs, "ms_per_step": 1e3 * secs / args.steps,
           "cpu_ms_per_step": 1e3 * cpu_secs / args.steps, "final_loss": loss,
           "kernel": kernel, "sharding": "DistributedModelParallel, 1-rank gloo",
           "mkldnn": torch.backends.mkldnn.is_available(),
           **versions()}
    print(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
