// TESSERA_VECTOR_CLONES: compiles a hot loop for AVX-512, AVX2 and baseline x86-64 and picks one
// at load time (GCC function multi-versioning), so the library stays portable while the loops use
// the widest vectors of the machine. The build keeps -ffp-contract=off (ISO C++ mode), so every
// clone rounds identically: results do not depend on which clone runs.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TESSERA_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_VECTOR_CLONES
#endif
