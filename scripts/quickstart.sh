#!/usr/bin/env bash
# Installs dependencies, builds, and trains the shipped default config (synthetic data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
build/bin/tessera-train --config configs/quickstart.yaml "$@"
