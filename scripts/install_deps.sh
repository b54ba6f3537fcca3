#!/usr/bin/env bash
# Installs the Debian packages Tessera builds and tests with. Run as root on a fresh machine.
# CUDA, cuBLAS and NCCL are not installed here: they are found under /usr/local/cuda when present.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev librocksdb-dev libyaml-cpp-dev zlib1g-dev
  libopenblas-dev libopenblas0-openmp libdnnl-dev
  openmpi-bin libopenmpi-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  clang-14 libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh: libFuzzer and clang's OpenMP
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install_deps: all packages present"
