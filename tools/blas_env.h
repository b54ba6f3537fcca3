// The process environment the binaries need before their libraries initialise, fixed by
// re-executing once. Both settings are read only when the libraries load, so main() can only
// change them by exec:
// - OpenBLAS kernel selection. Debian's OpenBLAS 0.3.21 picks its kernels by CPU model number and
//   falls back to the SSE3 "Prescott" kernels on models it does not know (the Xeons these
//   machines run on, family 6 model 207, are newer than it), which makes sgemm ~7x slower than
//   the AVX-512 kernels the CPU supports. OPENBLAS_CORETYPE is chosen from the CPU's features.
// - libgomp's wait policy (tools/omp_wait.h): a bounded spin when the job's threads own idle
//   cores, OMP_WAIT_POLICY=PASSIVE otherwise.
// A value already set in the environment is always respected.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/parallel.h"
#include "tools/omp_wait.h"

extern "C" char* openblas_get_corename(void);

namespace tessera {

// Call first thing in main(). Returns only when no re-exec was needed (or it failed).
// assume_idle: choose the OpenMP wait as if the cores were idle (tools/omp_wait.h ChooseOmpWait;
// tessera-plan, whose profile must not carry the load of the minute it was made in).
inline void MaybeReexecForBlasKernels(char** argv, bool assume_idle = false) {
  // Parallel regions sized for how this process's pool waits (core/parallel.h): libgomp read
  // its wait policy when it loaded, from the environment as it is now.
  SetParallelForkCheap(OmpPoolSpins());
  if (std::getenv("TESSERA_BLAS_REEXEC") != nullptr) return;  // already tried once
  bool reexec = false;
  if (ChooseOmpWait(argv, assume_idle)) reexec = true;
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
