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

// GCC vector types for loops the auto-vectoriser leaves scalar (mixed float/double widths,
// fixed-width register accumulators). Each lowers to the clone's widest registers (one zmm, two
// ymm, or four xmm for 64 bytes). aligned(4/8): loads and stores may be unaligned. The helpers
// are always inlined, so the vector-return ABI note (-Wpsabi) does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tessera::dense_internal {

typedef float V16f __attribute__((vector_size(64), aligned(4)));
typedef float V8f __attribute__((vector_size(32), aligned(4)));
typedef int V8i __attribute__((vector_size(32), aligned(4)));
typedef double V8d __attribute__((vector_size(64), aligned(8)));

template <typename V, typename T>
__attribute__((always_inline)) inline V LoadV(const T* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
template <typename V, typename T>
__attribute__((always_inline)) inline void StoreV(T* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

}  // namespace tessera::dense_internal
