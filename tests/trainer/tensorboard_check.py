#!/usr/bin/env python3
"""Reads a run directory's TensorBoard event file back with TensorBoard's own reader.

Usage: tensorboard_check.py RUN_DIR
Checks that tensorboard.backend.event_processing.event_accumulator (PyPI's `tensorboard`) loads
the run's scalars: train/loss and train/samples_per_sec at every logged step, the phase times
and the final eval AUC / log loss / NE, equal to the metrics.jsonl lines. Skips (exit 0, with a
message) when the tensorboard package is not installed.
"""
import json
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print("tensorboard_check: skipped (PyPI's tensorboard is not installed: pip install tensorboard)")
    sys.exit(0)

run = sys.argv[1]
acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = acc.Tags()["scalars"]
lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
train = [l for l in lines if "train_loss" in l and "status" not in l]
evals = [l for l in lines if "eval_auc" in l and "status" not in l]
assert train, "no train lines in metrics.jsonl"
for tag in ("train/loss", "train/samples_per_sec", "eval/auc", "eval/logloss", "eval/ne"):
    assert tag in tags, f"{tag} missing; TensorBoard sees {sorted(tags)}"
assert any(t.startswith("phase_ms/") for t in tags), f"no phase times in {sorted(tags)}"
loss = {e.step: e.value for e in acc.Scalars("train/loss")}
for l in train:
    assert abs(loss[l["step"]] - l["train_loss"]) <= 1e-6 * max(1, abs(l["train_loss"])), l
auc = {e.step: e.value for e in acc.Scalars("eval/auc")}
for l in evals:
    assert abs(auc[l["step"]] - l["eval_auc"]) <= 1e-6, l
print(f"tensorboard_check: TensorBoard read {len(tags)} scalar tags, {len(loss)} train/loss "
      f"points and {len(auc)} eval/auc points, equal to metrics.jsonl")
