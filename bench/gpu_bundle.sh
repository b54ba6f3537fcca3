#!/usr/bin/env bash
# gpu_bundle.sh: builds here, for sm_90, every binary and CUDA test that bench/gpu_check.sh runs
# on the GPU machine, and packs them with every library they need that the GPU machine lacks
# (docs/CUDA.md, "The GPU bundle"). The GPU machine has the CUDA driver, nvcc 13, Python with
# PyTorch and pip's cuBLAS/NCCL, but none of our Debian libraries.
#
#   bench/gpu_bundle.sh   # -> build-bundle/gpu-bundle/ (~111 MiB) and gpu-bundle.tar.gz (~36 MiB)
#
# What the device tool carries is the tarball, build-bundle/gpu-bundle.tar.gz (one path; the
# unpacked folder is over the 64 MiB a call carries, OpenBLAS alone being 36 MiB);
# bench/gpu_check.sh unpacks it beside itself. Layout of the bundle:
#   bin/    tessera-train, tessera-bench, tessera-data, cuda_lookup_bench, cuda_linear_bench
#   tests/  cuda_*_test, sharding_*_cuda_test, sharding_communicator_test,
#           distributed_communicator_test, distributed_*_cuda_test
#   lib/    libtessera_*.so, the CUDA runtime (libcudart.so.13) and every non-glibc library the
#           above load, copied from this machine (Abseil, yaml-cpp, RocksDB + compression,
#           OpenBLAS (OpenMP) + gfortran, gomp, libstdc++, Google Benchmark, OpenMPI, hwloc,
#           libevent, PMIx); the binaries find them through DT_RPATH $ORIGIN/../lib
#   mpi/    OpenMPI's mpirun, its plugins (those that need no network fabric library), help
#           texts and config, and PMIx's plugins: relocated by bench/gpu_env.sh (OPAL_PREFIX...)
#   MANIFEST.txt  commit, build flags, files and sizes, the newest glibc symbol version needed
# Not carried (found on the device by bench/gpu_env.sh): libcublas.so.13, libcublasLt.so.13,
# libnccl.so.2 (hundreds of MiB; pip's nvidia-* packages have them), libcuda.so.1 (the driver),
# and glibc itself.
#
# Environment: BUILD_DIR (build-bundle), DEST (BUILD_DIR/gpu-bundle; the tarball is DEST.tar.gz),
# ARCHS (90), JOBS (2), LIMIT_MIB (56: fail when the tarball is larger; the device tool carries
# 64 MiB in all, the repo's ~3 MiB included).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD_DIR:-build-bundle}
DEST=$(realpath -m "${DEST:-$BUILD/gpu-bundle}")
ARCHS=${ARCHS:-90}
JOBS=${JOBS:-2}
LIMIT_MIB=${LIMIT_MIB:-56}

BINS="tessera-train tessera-bench tessera-data cuda_lookup_bench cuda_linear_bench"
TESTS=$(for f in tests/cuda/*_test.cc; do echo "cuda_$(basename "$f" .cc)"; done)
[ -f tests/sharding/communicator_test.cc ] && TESTS="$TESTS sharding_communicator_test"
# CUDA-twin tests that live beside their CPU tests (e.g. sharding's shard kernels).
for f in tests/sharding/*_cuda_test.cc; do
  [ -f "$f" ] && TESTS="$TESTS sharding_$(basename "$f" .cc)"
done
[ -f tests/distributed/communicator_test.cc ] && TESTS="$TESTS distributed_communicator_test"
# Multi-rank CUDA tests (the CUDA shards against the CPU collection, run on 1, 2 and 4 ranks).
for f in tests/distributed/*_cuda_test.cc; do
  [ -f "$f" ] && TESTS="$TESTS distributed_$(basename "$f" .cc)"
done

# ---- 1. build ---------------------------------------------------------------------------------
LAUNCH=""
command -v ccache > /dev/null && LAUNCH="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DTESSERA_CUDA_ARCHS="$ARCHS" -DTESSERA_BUNDLE=ON $LAUNCH > "$BUILD/configure.log" 2>&1 ||
  { tail -n 30 "$BUILD/configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$JOBS" --target $BINS $TESTS

# ---- 2. our files -----------------------------------------------------------------------------
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/tests" "$DEST/lib" "$DEST/mpi/bin" "$DEST/mpi/openmpi3" \
  "$DEST/mpi/share" "$DEST/mpi/etc" "$DEST/mpi/pmix2/lib/pmix" "$DEST/mpi/pmix2/share"
for b in $BINS; do install -m 755 "$BUILD/bin/$b" "$DEST/bin/"; done
for t in $TESTS; do install -m 755 "$BUILD/tests/$t" "$DEST/tests/"; done
cp "$BUILD"/lib/libtessera_*.so "$DEST/lib/"
strip --strip-unneeded "$DEST"/bin/* "$DEST"/tests/* "$DEST"/lib/libtessera_*.so

# ---- 3. OpenMPI's runtime (Debian's OpenMPI 4.1 layout, relocated by gpu_env.sh) --------------
OMPI_PKGLIB=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/.*://')
OMPI_PKGLIB=${OMPI_PKGLIB:-/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}
install -m 755 "$(readlink -f "$(command -v mpirun)")" "$DEST/mpi/bin/mpirun"
cp -r /usr/share/openmpi "$DEST/mpi/share/"
cp /etc/openmpi/*.conf "$DEST/mpi/etc/" 2>/dev/null || true
PMIX_DIR=/usr/lib/x86_64-linux-gnu/pmix2
[ -d "$PMIX_DIR/lib/pmix" ] && cp "$PMIX_DIR"/lib/pmix/*.so "$DEST/mpi/pmix2/lib/pmix/"
[ -d "$PMIX_DIR/share/pmix" ] && cp -r "$PMIX_DIR/share/pmix" "$DEST/mpi/pmix2/share/"
# Plugins that need a network fabric (UCX, libfabric, PSM, verbs) or OpenSHMEM stay behind:
# one node needs shared memory and TCP only, and their libraries would double the bundle.
FABRIC='lib(ucp|ucs|uct|ucm|psm_infinipath|psm2|infinipath|ibverbs|rdmacm|fabric|efa|nl-3|nl-route-3|oshmem|mca_common_ucx|mca_common_ofi|mca_common_verbs)\.so'
for p in "$OMPI_PKGLIB"/*.so; do
  ldd "$p" | grep -Eq "$FABRIC" && continue
  cp "$p" "$DEST/mpi/openmpi3/"
done

# ---- 4. every library they load, but glibc, the driver and the CUDA libraries of the device ----
GLIBC='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so'
DEVICE='^(libcuda|libcublas|libcublasLt|libnccl|libnvidia-ml)\.so'
copy_deps() {  # copy_deps ELF...: copies what ldd resolves, by soname, into lib/
  local f
  for f in "$@"; do
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u | while read -r soname path; do
    [[ $soname =~ $GLIBC || $soname =~ $DEVICE ]] && continue
    [ -e "$DEST/lib/$soname" ] || cp -L "$path" "$DEST/lib/$soname"
  done
}
copy_deps "$DEST"/bin/* "$DEST"/tests/* "$DEST"/lib/*.so* "$DEST"/mpi/bin/* \
  "$DEST"/mpi/openmpi3/*.so "$DEST"/mpi/pmix2/lib/pmix/*.so
copy_deps "$DEST"/lib/*.so*  # the copied libraries' own needs (ldd lists them already; cheap)

# ---- 5. check: nothing but glibc and the device's CUDA libraries resolves outside the bundle ---
missing=0
for f in "$DEST"/bin/* "$DEST"/tests/* "$DEST"/lib/*.so* "$DEST"/mpi/bin/* \
         "$DEST"/mpi/openmpi3/*.so "$DEST"/mpi/pmix2/lib/pmix/*.so; do
  while read -r soname path; do
    [[ $soname =~ $GLIBC || $soname =~ $DEVICE ]] && continue
    case "$path" in "$DEST"/*) ;; *) echo "gpu_bundle: $f loads $soname from $path"; missing=1 ;; esac
  done < <(LD_LIBRARY_PATH="$DEST/lib" ldd "$f" 2>/dev/null |
           awk '$2 == "=>" {print $1, ($3 == "not" ? "not-found" : $3)}')
done
(( missing == 0 )) || { echo "gpu_bundle: the bundle is incomplete (above)"; exit 1; }

# ---- 6. manifest and size ---------------------------------------------------------------------
GLIBC_MAX=$(find "$DEST" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null |
            grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
{
  echo "Tessera GPU bundle"
  echo "commit: $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%FT%TZ) on $(uname -n), nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || /usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*'), sm_$ARCHS"
  echo "needs on the device: glibc >= ${GLIBC_MAX#GLIBC_}, libcuda.so.1 (driver for CUDA 13), libcublas.so.13, libcublasLt.so.13, libnccl.so.2"
  echo "files:"
  (cd "$DEST" && find . -type f -printf '%s\t%p\n' | sort -k2)
} > "$DEST/MANIFEST.txt"
bytes=$(du -sb "$DEST" | cut -f1)
tar -C "$(dirname "$DEST")" -czf "$DEST.tar.gz" "$(basename "$DEST")"
tar_bytes=$(stat -c %s "$DEST.tar.gz")
mib=$(( (tar_bytes + 1048575) / 1048576 ))
echo "gpu_bundle: $DEST: $(find "$DEST" -type f | wc -l) files, $(( (bytes + 1048575) / 1048576 )) MiB unpacked (du -sb $bytes bytes); needs glibc >= ${GLIBC_MAX#GLIBC_}"
echo "gpu_bundle: carry $DEST.tar.gz: $mib MiB ($tar_bytes bytes)"
if (( mib > LIMIT_MIB )); then
  echo "gpu_bundle: the tarball is over LIMIT_MIB=$LIMIT_MIB"
  exit 1
fi
