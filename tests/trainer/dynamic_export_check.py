#!/usr/bin/env python3
"""Reads a dynamic-table run's exported model and checkpoint with the real `safetensors` library.

Usage: dynamic_export_check.py RUN_DIR
Checks, through safetensors.numpy.load_file (PyPI's `safetensors`), that the export holds per
dynamic table `embedding.<name>.keys` (uint64, ascending, distinct) and `embedding.<name>.weight`
(float32 [len(keys), dim]), static tables only their weight, and that the newest checkpoint's
state.safetensors holds the dynamic tables' keys, weights, state, lookups, last_step, admission
counters (uint16) and stats. Skips (exit 0, with a message) when safetensors or numpy is absent.
"""
import os
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file
except ImportError:
    print("dynamic_export_check: skipped (PyPI's safetensors and numpy are not installed: "
          "pip install safetensors numpy)")
    sys.exit(0)

run = sys.argv[1]
model = load_file(os.path.join(run, "model.safetensors"))
dynamic = sorted(k[len("embedding."):-len(".keys")] for k in model if k.endswith(".keys"))
assert dynamic, f"no dynamic table in the export: {sorted(model)}"
for name in dynamic:
    keys = model[f"embedding.{name}.keys"]
    w = model[f"embedding.{name}.weight"]
    assert keys.dtype == np.uint64, keys.dtype
    assert w.dtype == np.float32 and w.ndim == 2 and w.shape[0] == keys.shape[0], w.shape
    assert keys.shape[0] > 0 and np.all(keys[1:] > keys[:-1]), f"{name}: keys not ascending"
    assert np.all(np.isfinite(w)), name
    print(f"dynamic_export_check: {name}: {keys.shape[0]} keys up to {int(keys.max())}, "
          f"weight {w.shape}")
latest = open(os.path.join(run, "checkpoints", "LATEST")).read().strip()
state = load_file(os.path.join(run, "checkpoints", latest, "state.safetensors"))
for name in dynamic:
    keys = state[f"table.{name}.keys"]
    n = keys.shape[0]
    assert keys.dtype == np.uint64 and np.all(keys[1:] > keys[:-1])
    assert state[f"table.{name}.weight"].shape[0] == n
    assert state[f"table.{name}.state"].shape == (n, 1)  # row-wise AdaGrad
    assert state[f"table.{name}.lookups"].dtype == np.int64
    assert state[f"table.{name}.last_step"].shape == (n,)
    stats = state[f"table.{name}.dynamic_stats"]
    assert stats.shape == (7,) and stats[0] > 0, stats  # training steps
    if f"table.{name}.admission_counters" in state:
        assert state[f"table.{name}.admission_counters"].dtype == np.uint16
print(f"dynamic_export_check: safetensors {__import__('safetensors').__version__} read "
      f"{len(model)} exported tensors and checkpoint {latest}")
