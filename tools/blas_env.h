// OpenBLAS kernel selection for the binaries. Debian's OpenBLAS 0.3.21 picks its kernels by CPU
// model number and falls back to the SSE3 "Prescott" kernels on models it does not know (the
// Xeons these machines run on, family 6 model 207, are newer than it), which makes sgemm ~7x
// slower than the AVX-512 kernels the CPU supports. OpenBLAS reads OPENBLAS_CORETYPE once, when
// the library loads, so a binary that finds the fallback re-executes itself once with the core
// type chosen from the CPU's features. A value already set in the environment is respected.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace tessera {

// Call first thing in main(). Returns only when no re-exec was needed (or it failed).
inline void MaybeReexecForBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (std::getenv("TESSERA_BLAS_REEXEC") != nullptr) return;  // already tried once
  const char* core = openblas_get_corename();
  if (core == nullptr || std::strcmp(core, "Prescott") != 0) return;
  const char* pick = nullptr;
  if (__builtin_cpu_supports("avx512f")) {
    pick = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2")) {
    pick = "Haswell";
  }
  if (pick == nullptr) return;
  setenv("OPENBLAS_CORETYPE", pick, 1);
  setenv("TESSERA_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the slow kernels.
}

}  // namespace tessera
