#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/seed_* (hand-made, small; no data set bytes).
Run from anywhere: python3 fuzz/make_seeds.py. Inputs of crashes found are kept beside the seeds
as crash_<what> and are not touched here (docs/TESTING.md lists them)."""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(13)


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


def criteo_row(sep, label=None):
    f = [str(label if label is not None else rng.randint(0, 1))]
    f += ["" if rng.random() < 0.2 else str(rng.randint(-2, 5000)) for _ in range(13)]
    f += ["" if rng.random() < 0.1 else "%08x" % rng.getrandbits(32) for _ in range(26)]
    return sep.join(f)


# criteo_text: first byte = mode (bit 0: CSV; bits 1-3: batch size - 1; bit 4: skip bad records)
tsv = "\n".join(criteo_row("\t") for _ in range(4)) + "\n"
put("criteo_text", "tsv", b"\x04" + tsv.encode())
put("criteo_text", "tsv_skip_bad", b"\x12" + (tsv + "2\tx\t\n" + criteo_row("\t")).encode())
header = "label," + ",".join("I%d" % i for i in range(1, 14)) + "," + \
    ",".join("C%d" % i for i in range(1, 27))
csv = header + "\r\n" + "\r\n".join(criteo_row(",") for _ in range(3)) + "\r\n"
put("criteo_text", "csv_header_crlf", b"\x03" + csv.encode())
put("criteo_text", "tsv_bom_short_rows", b"\x00\xef\xbb\xbf1\t3\n0\n\n1\t\t\t\tab\n")
put("criteo_text", "csv_floats", b"\x01" + b"1.0,12.0,-3,7.,,0.000,,,,,,,,,0a\n0,5\n")


# binary_reader: first byte = mode (bit 0: repair the checksum; bit 1: model rows 7)
def binary_file(num_records, num_dense=13, num_sparse=26, rows=7, good_checksum=True):
    record_bytes = 4 * (1 + num_dense + num_sparse)
    head = bytearray(4096)
    head[0:8] = b"TSRRECS\0"
    struct.pack_into("<IIIII", head, 8, 1, 4096, num_dense, num_sparse, record_bytes)
    struct.pack_into("<Q", head, 32, num_records)
    for k in range(num_sparse):
        struct.pack_into("<Q", head, 64 + 8 * k, rows)
    h = 2166136261
    for b in head[: 64 + 8 * num_sparse]:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    if good_checksum:
        struct.pack_into("<I", head, 28, h)
    recs = bytearray()
    for _ in range(num_records):
        recs += struct.pack("<f", float(rng.randint(0, 1)))
        recs += struct.pack("<%df" % num_dense, *[rng.random() * 5 for _ in range(num_dense)])
        recs += struct.pack("<%dI" % num_sparse, *[rng.randrange(rows) for _ in range(num_sparse)])
    return bytes(head + recs)


put("binary_reader", "three_records", b"\x02" + binary_file(3))
put("binary_reader", "repair_checksum", b"\x01" + binary_file(2, good_checksum=False))
put("binary_reader", "two_dense_one_sparse", b"\x04" + binary_file(4, 2, 1, rows=100))

# config: NUL-separated: the YAML text, then overrides
with open(os.path.join(HERE, "..", "configs", "quickstart.yaml"), "rb") as f:
    quick = f.read()
put("config", "quickstart", quick)
put("config", "quickstart_overrides",
    quick + b"\0model.bottom_mlp=[32,16]\0data.batch_size=64\0model.tables[0].rows=10")
put("config", "dcn_tables", b"""model:
  type: dcnv2
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  dcn: {num_layers: 2, low_rank: 4}
  tables:
    - {name: a, rows: 100, features: [0]}
    - {name: b, rows: 50, features: [1, 2], storage: {tier: memory}}
data:
  format: synthetic
  batch_size: 32
  synthetic: {num_samples: 100}
optimizer:
  dense: {type: adam, lr: 0.001}
  embedding: {type: adagrad, lr: 0.1}
train: {epochs: 1}
\0train.epochs=2""")

# plan: first byte = sharding group size - 1 (the fuzzer's model: t0 100x16, t1 7x8, big 2^40x128)
put("plan", "grid_rowwise", b"\x03" + b"""group_size: 4
tables:
  - name: t0
    type: grid
    shards:
      - {rank: 0, rows: [0, 50], cols: [0, 8]}
      - {rank: 1, rows: [50, 100], cols: [0, 8]}
      - {rank: 2, rows: [0, 100], cols: [8, 16]}
  - name: t1
    type: data_parallel
  - name: big
    type: row_wise
    shards:
      - {rank: 3, rows: [0, 1099511627776]}
""")
put("plan", "table_column_wise", b"\x01" + b"""tables:
  - {name: t0, type: table_wise, shards: [{rank: 1}]}
  - {name: t1, type: column_wise, shards: [{rank: 0, cols: [0, 4]}, {rank: 1, cols: [4, 8]}]}
  - {name: big, type: table_row_wise, shards: [{rank: 0, rows: [0, 10]}, {rank: 1, rows: [10, 1099511627776]}]}
""")


# safetensors
def safetensors(tensors, metadata=None, pad=True):
    import json
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "f32_i64", safetensors(
    [("a.weight", "F32", [2, 3], struct.pack("<6f", *range(6))),
     ("b", "I64", [2], struct.pack("<2q", 7, -1))], {"format": "pt"}))
put("safetensors", "unpadded_mixed", safetensors(
    [("h", "F16", [3], b"\0\x3c" * 3), ("w", "F32", [1], struct.pack("<f", 1.5)),
     ("i", "I32", [2], struct.pack("<2i", 1, 2)), ("z", "BF16", [0], b"")], pad=False))
put("safetensors", "scalar_escapes", safetensors(
    [("zeta\u00e9\U0001F600", "F32", [], struct.pack("<f", 2.0))], {"k": "v\\n"}))
