#!/usr/bin/env bash
# gpu_bundle_rehearse.sh: proves here, without a GPU, that the bundle of bench/gpu_bundle.sh is
# complete: runs bench/gpu_check.sh on it inside a chroot that holds glibc and nothing else of
# this machine's libraries (docs/CUDA.md, "Rehearsal"). Needs root (unshare -m, chroot).
#
#   bench/gpu_bundle_rehearse.sh          # after bench/gpu_bundle.sh; prints a verdict, exit 0/1
#
# The chroot (a temp dir, in a private mount namespace):
#   /lib/x86_64-linux-gnu, /lib64   glibc only (libc, libm, libdl, libpthread, librt, ld.so, ...):
#                                   the dynamic loader's default folders find nothing else, and
#                                   there is no /etc/ld.so.cache
#   /usr/bin                        the shell tools gpu_check.sh uses; a tool that needs more
#                                   than glibc (bash: libtinfo, sed/grep/tar: pcre2, selinux, acl)
#                                   is a wrapper that starts it through ld.so --library-path
#                                   /opt/tools/lib, which its children do not inherit
#   /usr/lib/python3.11             Python's standard library (no site packages, no PyTorch)
#   /usr/local/lib/python3.11/dist-packages/nvidia/{cu13,nccl}/lib
#                                   libcublas.so.13, libcublasLt.so.13, libnccl.so.2 (hard links
#                                   of the toolkit's): pip's layout on the GPU machine
#   /repo                           this worktree (bind mount)
#   /opt/carry/gpu-bundle.tar.gz    the tarball the device tool carries; gpu_check.sh unpacks it
#   no libcuda.so.1                 so every CUDA test must reach its "no CUDA device" skip
# Checks: every bundle binary's libraries resolve inside the bundle or to glibc (ldd and
# LD_DEBUG=libs in the chroot), each CUDA test binary exits 0 with "no CUDA device" (the
# multi-rank one on 1, 2 and 4 ranks), the CPU stages of gpu_check.sh pass (CPU quickstart on 1
# and 2 ranks, the MPI communicator test on 4 ranks through the carried mpirun, the report), no
# log says "error while loading shared libraries".
# Environment: BUNDLE (build-bundle/gpu-bundle: its .tar.gz is what runs), KEEP=1 keeps the chroot, RESULTS (where the
# two result files land; default runs/gpu_rehearsal).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=${BUNDLE:-build-bundle/gpu-bundle}
RESULTS=${RESULTS:-$ROOT/runs/gpu_rehearsal}
[ -f "$BUNDLE.tar.gz" ] || { echo "no $BUNDLE.tar.gz: run bench/gpu_bundle.sh"; exit 1; }
R=$(mktemp -d /tmp/tessera-rehearse.XXXXXX)
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$R"; }
trap cleanup EXIT

# ---- the root -----------------------------------------------------------------------------------
mkdir -p "$R"/{lib/x86_64-linux-gnu,lib64,usr/bin,bin,opt/tools/bin,opt/tools/lib,etc,tmp,proc,dev,repo,out}
mkdir -p "$R/usr/lib"
GLIBC_LIBS="libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1
            libanl.so.1 libmvec.so.1 libnss_files.so.2 libnss_dns.so.2 ld-linux-x86-64.so.2"
for l in $GLIBC_LIBS; do
  [ -e "/lib/x86_64-linux-gnu/$l" ] && cp -L "/lib/x86_64-linux-gnu/$l" "$R/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
cp /etc/passwd /etc/group /etc/hosts "$R/etc/"
echo "localhost" > "$R/etc/hostname"

# Tools: glibc-only ones copied as they are, the others behind an ld.so wrapper.
TOOLS="bash sh timeout date mkdir rm cat tail head sed grep awk tar gzip find sort uniq paste wc cut
       tr basename dirname readlink ls cp mv ln mktemp sleep nproc tee true false env uname id
       hostname ldd xargs du stat python3"
for t in $TOOLS; do
  p=$(type -P "$t") || { echo "rehearse: no $t here"; exit 1; }
  [ "$t" = python3 ] && p=/usr/bin/python3  # Debian's (a pyenv shim may come first on PATH)
  src=$(readlink -f "$p")
  extra=$(ldd "$src" 2>/dev/null | awk '$2 == "=>" {print $1, $3}' |
          grep -vE '^(linux-vdso|libc|libm|libdl|libpthread|librt|ld-linux)' || true)
  if [ -z "$extra" ]; then
    cp "$src" "$R/usr/bin/$t"
  else
    cp "$src" "$R/opt/tools/bin/$t"
    echo "$extra" | while read -r so path; do cp -L "$path" "$R/opt/tools/lib/$so"; done
    printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path /opt/tools/lib /opt/tools/bin/%s "$@"\n' \
      "$t" > "$R/usr/bin/$t"
    chmod +x "$R/usr/bin/$t"
  fi
done
# /bin/sh must be a real binary (the wrappers' interpreter): dash needs glibc only.
cp "$(readlink -f "$(command -v dash)")" "$R/bin/sh"
cp "$(readlink -f "$(command -v dash)")" "$R/usr/bin/sh"
ln -s /usr/bin/bash "$R/bin/bash"
PYVER=$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$R/usr/lib/python$PYVER"
(cd "/usr/lib/python$PYVER" && tar --exclude=./test --exclude=./dist-packages --exclude=./site-packages \
   --exclude='__pycache__' -cf - .) | (cd "$R/usr/lib/python$PYVER" && tar -xf -)
# Python's extension modules may need libz/libexpat/libffi...: theirs, behind the wrapper only.
for so in "$R/usr/lib/python$PYVER"/lib-dynload/*.so; do
  ldd "$so" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    grep -vE '^(libc|libm|libdl|libpthread|librt|ld-linux)' |
    while read -r s p; do cp -nL "$p" "$R/opt/tools/lib/$s"; done || true
done
# pip's layout of the CUDA libraries on the GPU machine (hard links: same file system).
SITE="$R/usr/local/lib/python$PYVER/dist-packages/nvidia"
mkdir -p "$SITE/cu13/lib" "$SITE/nccl/lib"
for l in libcublas.so.13 libcublasLt.so.13; do
  cp -lL "/usr/local/cuda/lib64/$l" "$SITE/cu13/lib/$l" 2>/dev/null || cp -L "/usr/local/cuda/lib64/$l" "$SITE/cu13/lib/$l"
done
cp -lL /usr/local/cuda/lib64/libnccl.so.2 "$SITE/nccl/lib/libnccl.so.2" 2>/dev/null ||
  cp -L /usr/local/cuda/lib64/libnccl.so.2 "$SITE/nccl/lib/libnccl.so.2"

mkdir -p "$R/opt/carry"
cp "$BUNDLE.tar.gz" "$R/opt/carry/"

# ---- run inside ---------------------------------------------------------------------------------
cat > "$R/opt/inner.sh" <<'INNER'
cd /repo
echo "== inside: /lib/x86_64-linux-gnu holds: $(ls /lib/x86_64-linux-gnu | tr '\n' ' ')"
echo "== inside: /etc/ld.so.cache: $(ls /etc/ld.so.cache 2>&1)"
echo "== inside: libcuda.so.1 anywhere: $(find / -xdev -name 'libcuda.so*' 2>/dev/null | head -n 1)"
echo "== inside: carried: $(ls -la /opt/carry)"
bash bench/gpu_check.sh  # unpacks /opt/carry/gpu-bundle.tar.gz first
. bench/gpu_env.sh "$BUNDLE"
echo "== inside: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "== inside: LD_DEBUG=libs tessera-train --helpshort: each library loaded"
LD_DEBUG=libs "$BUNDLE/bin/tessera-train" --helpshort 2>&1 > /dev/null |
  grep -o 'calling init: .*' | sed 's/calling init: //' | sort -u > /tmp/loaded.txt
sed 's/^/   /' /tmp/loaded.txt
outside=$(grep -v "^$BUNDLE/" /tmp/loaded.txt | grep -v '^/lib/x86_64-linux-gnu/' |
          grep -v '^/lib64/' | grep -v '/nvidia/' | tr '\n' ' ')
echo "== inside: loaded from outside the bundle, glibc and pip's nvidia folders: ${outside}"
INNER
export R ROOT RESULTS
set +e
unshare -m --propagation private bash -c '
  set -e
  mount -t proc proc "$R/proc"
  mount --rbind /dev "$R/dev"
  mount -t tmpfs tmpfs "$R/tmp"
  mount --bind "$ROOT" "$R/repo"
  mount --bind "$RESULTS" "$R/out"
  exec chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp OUT=/out BUNDLE=/opt/carry/gpu-bundle \
    DEADLINE_S=900 CPU_THREADS=2 OMP_NUM_THREADS=2 \
    QUICK_SET="data.synthetic.train_samples=131072 data.synthetic.eval_samples=16384 train.eval_every=32 train.log_every=16" \
    /usr/bin/bash /opt/inner.sh' 2>&1 | tee "$RESULTS/rehearsal.log"
set -e

# ---- verdict ------------------------------------------------------------------------------------
X=$(mktemp -d)
tar -xzf "$RESULTS/gpu_check_results.tar.gz" -C "$X"
ok=1
say() { printf '%-58s %s\n' "$1" "$2"; [ "$2" = ok ] || ok=0; }
for t in "$BUNDLE"/tests/cuda_*_test; do
  n=$(basename "$t")
  if grep -q "^$n	ok" "$X/stages.tsv" && grep -q "no CUDA device" "$X/$n.log"; then say "$n: exits 0 with 'no CUDA device'" ok
  else say "$n: exits 0 with 'no CUDA device'" FAILED; fi
done
# The multi-rank CUDA test under the carried mpirun on 1, 2 and 4 ranks: every rank skips.
for np in 1 2 4; do
  n=sharded_cuda_np$np
  if grep -q "^$n	ok" "$X/stages.tsv" && grep -q "no CUDA device" "$X/$n.log"; then say "$n: exits 0 with 'no CUDA device'" ok
  else say "$n: exits 0 with 'no CUDA device'" FAILED; fi
done
for s in env sharding_communicator_test distributed_communicator_test quick_cpu mpi2_cpu; do
  if grep -q "^$s	ok" "$X/stages.tsv"; then say "stage $s" ok; else say "stage $s" FAILED; fi
done
# The probe prints what the runtime says (here: no driver) and passes where nvidia-smi lists no GPU.
if grep -q "^cuda_probe	ok" "$X/stages.tsv" && grep -q "CUDA runtime: " "$X/cuda_probe.log"; then
  say "stage cuda_probe prints the runtime's view" ok
else say "stage cuda_probe prints the runtime's view" FAILED; fi
# A test that only failed on values is not rerun under memcheck (none fail here at all).
if ls "$X"/*_memcheck.log > /dev/null 2>&1; then say "no memcheck reruns" FAILED
else say "no memcheck reruns" ok; fi
if grep -l "error while loading shared libraries\|cannot open shared object" "$X"/*.log; then
  say "no 'error while loading shared libraries' in any log" FAILED
else
  say "no 'error while loading shared libraries' in any log" ok
fi
if grep -q "^== inside: loaded from outside the bundle, glibc and pip's nvidia folders: *$" \
     "$RESULTS/rehearsal.log" && grep -q "^   /.*/lib/libtessera_trainer.so" "$RESULTS/rehearsal.log" &&
   grep -q "^   /.*/nvidia/nccl/lib/libnccl.so.2" "$RESULTS/rehearsal.log"; then
  say "LD_DEBUG: every library from the bundle, glibc or pip's nvidia" ok
else say "LD_DEBUG: every library from the bundle, glibc or pip's nvidia" FAILED; fi
[ -s "$RESULTS/gpu_check_summary.md" ] && say "summary written" ok || say "summary written" FAILED
echo "expected to fail here (they need a GPU or PyTorch): quick_gpu, quick_compare, the benchmarks"
rm -rf "$X"
(( ok == 1 )) && { echo "REHEARSAL PASSED"; exit 0; }
echo "REHEARSAL FAILED"; exit 1
