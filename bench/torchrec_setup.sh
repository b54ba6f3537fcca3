#!/usr/bin/env bash
# Creates the Python venv of bench/torchrec_dlrm.py (TorchRec + FBGEMM's CPU build), from PyPI only:
#   bash bench/torchrec_setup.sh [VENV_DIR [PYTHON]]
# VENV_DIR defaults to ~/.cache/tessera/venvs/torchrec, where bench/cpu_compare.sh looks unless
# TORCHREC_VENV names another; PYTHON (>= 3.10) defaults to python3. About 5.5 GB (the PyPI torch
# wheel pulls NVIDIA's CUDA libraries, unused here).
# An existing venv at VENV_DIR is reused (pip only adds what is missing).
# torchrec's metadata asks for the CUDA fbgemm-gpu, so torchrec goes in with --no-deps beside
# fbgemm-gpu-cpu, and its other runtime dependencies are named by hand. torch comes from PyPI
# (the CUDA-linked wheel; it runs on the CPU without a GPU). Versions (override by environment):
#   TORCH_VERSION=2.14.1 FBGEMM_VERSION=1.9.0 TORCHREC_VERSION=1.9.2
set -euo pipefail
venv=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/venvs/torchrec}
python=${2:-python3}
torch_v=${TORCH_VERSION:-2.14.1}
fbgemm_v=${FBGEMM_VERSION:-1.9.0}
torchrec_v=${TORCHREC_VERSION:-1.9.2}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --no-input)
"${pip[@]}" --upgrade pip
"${pip[@]}" "torch==$torch_v" "fbgemm-gpu-cpu==$fbgemm_v" numpy
"${pip[@]}" --no-deps "torchrec==$torchrec_v"
"${pip[@]}" tensordict "torchmetrics==1.0.3" pyre-extensions iopath tqdm  # torchmetrics as torchrec pins it
"$venv/bin/python" - <<'PY'
import torch, fbgemm_gpu, torchrec  # noqa: F401 (fbgemm_gpu registers torch.ops.fbgemm)
from importlib.metadata import version
print("torch", torch.__version__, "fbgemm-gpu-cpu", version("fbgemm-gpu-cpu"),
      "torchrec", version("torchrec"))
PY
