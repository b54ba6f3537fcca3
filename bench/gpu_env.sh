# gpu_env.sh: sourced by bench/gpu_check.sh (and usable by hand) to run a bundle made by
# bench/gpu_bundle.sh on a machine without our Debian libraries (docs/CUDA.md).
#   source bench/gpu_env.sh BUNDLE_DIR
# Sets:
#   LD_LIBRARY_PATH  BUNDLE/lib first (the binaries also carry DT_RPATH $ORIGIN/../lib), then
#                    the folders that hold the CUDA libraries we do not carry: libcublas.so.13,
#                    libcublasLt.so.13 and libnccl.so.2, from pip's nvidia-* packages (found
#                    through python3's site-packages) or a CUDA toolkit; CUDA_LIB_DIRS
#                    (colon-separated) is searched first when set.
#   PATH             BUNDLE/mpi/bin first (mpirun of the carried OpenMPI).
#   OPAL_* / PMIX_PREFIX / OMPI_MCA_*  the carried OpenMPI and PMIx relocated into BUNDLE/mpi.
#   TESSERA_ENV_MISSING  the CUDA libraries not found (empty when all were).
# Prints one line per library found or missing. Does not exit: the caller decides.
_tb=${1:?usage: source bench/gpu_env.sh BUNDLE_DIR}
_tb=$(cd "$_tb" && pwd)
export TESSERA_BUNDLE_DIR=$_tb

# Candidate folders for the CUDA libraries, most specific first.
_tcands=()
if [ -n "${CUDA_LIB_DIRS:-}" ]; then IFS=: read -r -a _tcands <<< "$CUDA_LIB_DIRS"; fi
if command -v python3 > /dev/null 2>&1; then
  while IFS= read -r _d; do _tcands+=("$_d"); done < <(python3 - 2>/dev/null <<'PY'
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
roots += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")) +
                    glob.glob(os.path.join(r, "torch", "lib"))):
        if d not in seen:
            seen.add(d)
            print(d)
PY
  )
fi
_tcands+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
          /usr/lib/x86_64-linux-gnu)

_tlibdirs=""
TESSERA_ENV_MISSING=""
for _tlib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  _tfound=""
  for _d in "${_tcands[@]}"; do
    if [ -e "$_d/$_tlib" ]; then _tfound=$_d; break; fi
  done
  if [ -n "$_tfound" ]; then
    echo "gpu_env: $_tlib in $_tfound"
    case ":$_tlibdirs:" in *":$_tfound:"*) ;; *) _tlibdirs="$_tlibdirs:$_tfound" ;; esac
  else
    echo "gpu_env: $_tlib NOT FOUND (searched ${_tcands[*]})"
    TESSERA_ENV_MISSING="$TESSERA_ENV_MISSING $_tlib"
  fi
done
export TESSERA_ENV_MISSING
export LD_LIBRARY_PATH="$_tb/lib${_tlibdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The carried OpenMPI 4.1 (Debian's layout under BUNDLE/mpi) and its PMIx.
if [ -d "$_tb/mpi" ]; then
  export PATH="$_tb/mpi/bin:$PATH"
  export OPAL_PREFIX="$_tb/mpi" OPAL_EXEC_PREFIX="$_tb/mpi" OPAL_BINDIR="$_tb/mpi/bin"
  export OPAL_LIBDIR="$_tb/lib" OPAL_PKGLIBDIR="$_tb/mpi/openmpi3"
  export OPAL_DATAROOTDIR="$_tb/mpi/share" OPAL_DATADIR="$_tb/mpi/share"
  export OPAL_PKGDATADIR="$_tb/mpi/share/openmpi" OPAL_SYSCONFDIR="$_tb/mpi/etc"
  export PMIX_PREFIX="$_tb/mpi/pmix2"
  export OMPI_MCA_mca_base_component_path="$_tb/mpi/openmpi3"
  export PMIX_MCA_mca_base_component_path="$_tb/mpi/pmix2/lib/pmix"
  # One node, no fabrics carried: shared memory and loopback TCP only.
  export OMPI_MCA_btl="self,vader,tcp" OMPI_MCA_pml="ob1" OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_plm_rsh_agent="" OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
unset _tb _tcands _tlibdirs _tlib _tfound _d
