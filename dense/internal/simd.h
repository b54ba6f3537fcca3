// TESSERA_VECTOR_CLONES: compiles a hot loop for AVX-512, AVX2 and baseline x86-64 and picks one
// at load time (GCC function multi-versioning), so the library stays portable while the loops use
// the widest vectors of the machine. GCC contracts a * b + c into FMA where the target has it
// (the AVX2 and AVX-512 clones), so the baseline clone can differ in the last bits: results are
// reproducible on one machine (one clone), not across CPU generations (nor is OpenBLAS).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TESSERA_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_VECTOR_CLONES
#endif
