// The process environment the binaries need before their libraries initialise, fixed by
// re-executing once. Both settings are read only when the libraries load, so main() can only
// change them by exec:
// - OpenBLAS kernel selection. Debian's OpenBLAS 0.3.21 picks its kernels by CPU model number and
//   falls back to the SSE3 "Prescott" kernels on models it does not know (the Xeons these
//   machines run on, family 6 model 207, are newer than it), which makes sgemm ~7x slower than
//   the AVX-512 kernels the CPU supports. OPENBLAS_CORETYPE is chosen from the CPU's features.
// - libgomp's wait policy. With neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, an idle libgomp
//   thread spins ~300,000 iterations (milliseconds) at every barrier and between parallel
//   regions before it sleeps. Our loops, OpenBLAS (OpenMP build) and oneDNN all run on that one
//   pool, so on a 2-core machine shared with other work the spinning thread takes the core the
//   working one (or another process) needs: `small` at 2 threads spent more than half its cycles
//   in libgomp's spin loop and ran 1.5x-7x slower than with OMP_WAIT_POLICY=PASSIVE, bimodally
//   (docs/PERFORMANCE.md, "Two threads"). The binaries therefore default to PASSIVE.
// A value already set in the environment is always respected.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace tessera {

// Call first thing in main(). Returns only when no re-exec was needed (or it failed).
inline void MaybeReexecForBlasKernels(char** argv) {
  if (std::getenv("TESSERA_BLAS_REEXEC") != nullptr) return;  // already tried once
  bool reexec = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    reexec = true;
  }
  const char* core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && core != nullptr &&
      std::strcmp(core, "Prescott") == 0) {
    const char* pick = nullptr;
    if (__builtin_cpu_supports("avx512f")) {
      pick = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2")) {
      pick = "Haswell";
    }
    if (pick != nullptr) {
      setenv("OPENBLAS_CORETYPE", pick, 1);
      reexec = true;
    }
  }
  if (!reexec) return;
  setenv("TESSERA_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the environment as it was at load.
}

}  // namespace tessera
