#!/usr/bin/env python3
"""Converts a Tessera model to the state_dict of TorchRec's DLRM / DLRM_DCN, and checks it.

  python3 tools/to_torchrec.py --model RUN/model.safetensors --config RUN/config.yaml \
      --out model_torchrec.pt [--check INPUTS.safetensors --scores SCORES.txt]

--model: Tessera's export (output.export), or a single-process checkpoint's state.safetensors
(tables "table.<name>.weight", dense "dense.<name>"; a sharded checkpoint: resume it on one
process with train.steps at its step, which exports the model, then convert that).
--config: the run's effective config (output.dir/config.yaml): the tables' features and pooling.
--out: torch.save of {"state_dict", "kwargs"} where kwargs rebuild the module:
  DLRM(embedding_bag_collection=EmbeddingBagCollection(tables=[EmbeddingBagConfig(...)]),
       dense_in_features, dense_arch_layer_sizes, over_arch_layer_sizes)
  DLRM_DCN(... , dcn_num_layers, dcn_low_rank_dim)
The mapping (docs/FORMATS.md, "TorchRec"):
  embedding.<t>.weight          -> sparse_arch.embedding_bag_collection.embedding_bags.<t>.weight
  bottom_mlp.<i>.{weight,bias}  -> dense_arch.model._mlp.<i>._linear.{weight,bias}
  top_mlp.<i> (all but last)    -> over_arch.model.0._mlp.<i>._linear.{weight,bias}
  top_mlp.<last>                -> over_arch.model.1.{weight,bias}
  cross.<l>.U.weight / V.weight -> inter_arch.crossnet.W_kernels.<l> / V_kernels.<l>
  cross.<l>.weight (full rank)  -> W_kernels.<l> = weight, V_kernels.<l> = identity (rank = width)
  cross.<l>.bias                -> inter_arch.crossnet.bias.<l>
DLRM's pairwise dots come in another order (TorchRec: torch.triu_indices(F+1, F+1, 1), Tessera:
tril (1,0), (2,0), (2,1), ...): the columns of top_mlp.0.weight that read them are permuted.

--check INPUTS --scores SCORES: builds the TorchRec module, loads the converted state_dict
(strict), scores the inputs `tessera-train --eval-only --inputs INPUTS --scores SCORES` wrote,
and prints the largest absolute difference from Tessera's scores; exit 1 above --tolerance
(1e-5). Needs torch, fbgemm-gpu-cpu and torchrec (bench/torchrec_setup.sh makes the venv).
"""
import argparse
import json
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        raw = data[base + b:base + e]
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DTYPES[t["dtype"]])
        out[name] = arr.reshape(t["shape"]).copy()
    return out, meta


def read_tables(config_path):
    """The tables of an effective config (ConfigToYaml writes one flow map per table)."""
    tables = []
    with open(config_path) as f:
        for line in f:
            m = re.match(r"\s*- \{name: (\w+), rows: (\d+), dim: (\d+), pooling: (\w+), "
                         r"features: \[([0-9, ]*)\]", line)
            if m:
                tables.append({"name": m.group(1), "rows": int(m.group(2)),
                               "dim": int(m.group(3)), "pooling": m.group(4),
                               "features": [int(x) for x in m.group(5).split(",") if x.strip()]})
    if not tables:
        sys.exit(f"{config_path}: no model.tables entries (give the run's effective config.yaml)")
    return tables


def normalize_names(tensors):
    """Export names as they are; a checkpoint's table.<t>.weight / dense.<x> renamed to them."""
    out = {}
    for name, t in tensors.items():
        if name.startswith("table.") and name.endswith(".weight"):
            out["embedding." + name[len("table."):]] = t
        elif name.startswith("dense."):
            out[name[len("dense."):]] = t
        elif name.startswith("embedding.") or name.split(".")[0] in ("bottom_mlp", "top_mlp", "cross"):
            out[name] = t
    return out


def layers(tensors, prefix):
    n = 0
    while f"{prefix}.{n}.weight" in tensors:
        n += 1
    return n


def convert(tensors, tables):
    t = normalize_names(tensors)
    num_features = sum(len(x["features"]) for x in tables)
    order = [f for x in tables for f in x["features"]]
    if order != list(range(num_features)):
        sys.exit("the tables' features, listed table by table, must be 0, 1, ..., F-1 in order "
                 f"(TorchRec orders a batch's embeddings so); these give {order}")
    dims = {x["dim"] for x in tables}
    if len(dims) != 1:
        sys.exit(f"TorchRec's DLRM needs one embedding dim for every table; these have {sorted(dims)}")
    dim = dims.pop()
    dcn = any(k.startswith("cross.") for k in t)
    sd = {}
    for x in tables:
        sd[f"sparse_arch.embedding_bag_collection.embedding_bags.{x['name']}.weight"] = \
            t[f"embedding.{x['name']}.weight"]
    nb = layers(t, "bottom_mlp")
    for i in range(nb):
        for p in ("weight", "bias"):
            sd[f"dense_arch.model._mlp.{i}._linear.{p}"] = t[f"bottom_mlp.{i}.{p}"]
    nt = layers(t, "top_mlp")
    top_w0 = t["top_mlp.0.weight"].copy()
    kwargs = {"dense_in_features": int(t["bottom_mlp.0.weight"].shape[1]),
              "dense_arch_layer_sizes": [int(t[f"bottom_mlp.{i}.weight"].shape[0]) for i in range(nb)],
              "over_arch_layer_sizes": [int(t[f"top_mlp.{i}.weight"].shape[0]) for i in range(nt)]}
    if dcn:
        nl, rank = 0, None
        while f"cross.{nl}.bias" in t:
            width = t[f"cross.{nl}.bias"].shape[0]
            if f"cross.{nl}.U.weight" in t:
                w, v = t[f"cross.{nl}.U.weight"], t[f"cross.{nl}.V.weight"]
            else:  # full rank: W x = W (I x)
                w, v = t[f"cross.{nl}.weight"], np.eye(width, dtype=np.float32)
            sd[f"inter_arch.crossnet.W_kernels.{nl}"] = w
            sd[f"inter_arch.crossnet.V_kernels.{nl}"] = v
            sd[f"inter_arch.crossnet.bias.{nl}"] = t[f"cross.{nl}.bias"]
            rank = w.shape[1]
            nl += 1
        kwargs.update(dcn_num_layers=nl, dcn_low_rank_dim=int(rank))
    else:
        # Tessera's pair k = (i, j), i > j, in tril order; TorchRec's in triu order (j < i).
        n = num_features + 1
        tessera = {}
        for i in range(1, n):
            for j in range(i):
                tessera[(i, j)] = len(tessera)
        perm = [tessera[(i, j)] for j in range(n) for i in range(j + 1, n)]
        pairs = top_w0[:, dim:]
        top_w0 = np.concatenate([top_w0[:, :dim], pairs[:, perm]], axis=1)
    for i in range(nt):
        last = i == nt - 1
        for p in ("weight", "bias"):
            v = t[f"top_mlp.{i}.{p}"]
            if i == 0 and p == "weight":
                v = top_w0
            sd[f"over_arch.model.1.{p}" if last else f"over_arch.model.0._mlp.{i}._linear.{p}"] = v
    ebc = [{"name": x["name"], "embedding_dim": x["dim"], "num_embeddings": x["rows"],
            "feature_names": [f"f{f}" for f in x["features"]], "pooling": x["pooling"].upper()}
           for x in tables]
    return sd, {"model": "DLRM_DCN" if dcn else "DLRM", "tables": ebc, **kwargs}


def build(kwargs):
    import torch
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    tables = [EmbeddingBagConfig(name=x["name"], embedding_dim=x["embedding_dim"],
                                 num_embeddings=x["num_embeddings"], feature_names=x["feature_names"],
                                 pooling=PoolingType[x["pooling"]]) for x in kwargs["tables"]]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
    args = {k: v for k, v in kwargs.items() if k not in ("model", "tables")}
    cls = DLRM_DCN if kwargs["model"] == "DLRM_DCN" else DLRM
    return cls(embedding_bag_collection=ebc, **args)


def check(sd, kwargs, inputs_path, scores_path, tolerance):
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    model = build(kwargs)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                          strict=True)
    model.eval()
    inp, _ = read_safetensors(inputs_path)
    features = [f for x in kwargs["tables"] for f in x["feature_names"]]
    n = inp["labels"].shape[0]
    want = np.loadtxt(scores_path, dtype=np.float64).reshape(-1)
    if want.shape[0] != n:
        sys.exit(f"{scores_path}: {want.shape[0]} scores for {n} samples")
    got = []
    with torch.no_grad():
        for b in range(0, n, 4096):
            e = min(n, b + 4096)
            values, lengths = [], []
            for name in features:
                f = int(name[1:])
                ln = inp[f"lengths.{f}"]
                off = np.concatenate([[0], np.cumsum(ln)])
                values.append(inp[f"ids.{f}"][off[b]:off[e]])
                lengths.append(ln[b:e])
            kjt = KeyedJaggedTensor.from_lengths_sync(
                keys=features, values=torch.from_numpy(np.concatenate(values)),
                lengths=torch.from_numpy(np.concatenate(lengths)))
            logits = model(torch.from_numpy(inp["dense"][b:e]), kjt)
            got.append(torch.sigmoid(logits.reshape(-1).double()).numpy())
    got = np.concatenate(got)
    diff = float(np.max(np.abs(got - want))) if n else 0.0
    print(f"TorchRec {kwargs['model']} on {n} samples: max |score - Tessera's score| = {diff:.3g}")
    return diff <= tolerance


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", default="")
    ap.add_argument("--check", default="", help="eval inputs (tessera-train --eval-only --inputs)")
    ap.add_argument("--scores", default="", help="Tessera's scores (tessera-train --eval-only --scores)")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    a = ap.parse_args()
    tensors, _ = read_safetensors(a.model)
    sd, kwargs = convert(tensors, read_tables(a.config))
    if a.out:
        import torch
        torch.save({"state_dict": {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                    "kwargs": kwargs}, a.out)
        print(f"wrote {a.out}: {kwargs['model']} with {len(sd)} tensors")
    if a.check:
        if not a.scores:
            sys.exit("--check needs --scores")
        return 0 if check(sd, kwargs, a.check, a.scores, a.tolerance) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
