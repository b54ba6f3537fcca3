// bf16 values and rows for the dense side: the bf16 embedding hand-off (DenseArch::ForwardBf16),
// where a kernel widens the rows it is about to read and rounds the rows it has just written, a
// sample (or a row) at a time while they are in L1, instead of a separate pass over the whole
// buffer; and the scalar rounding of the bf16 GEMM inputs (dnnl_gemm.cc FloatToBf16).
// The rounding is round to nearest even with NaN kept quiet, bit for bit the one of
// embedding/row_dtype.h FloatToBf16 (the tables' bf16 outputs), in integer arithmetic, so it
// does not depend on the CPU (AVX512_BF16's vcvtne2ps2bf16 flushes denormals; this does not).
// Private to dense/. Thread-compatible: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera::dense_internal {

// The exact float of bf16 `h`.
inline float WidenBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// `f` rounded to bf16, nearest even; a NaN stays a quiet NaN.
inline uint16_t RoundBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t nan = (u >> 16) | 0x40u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// dst[i] = WidenBf16(src[i]) for i < n. Branch-free loops the caller's vector clone
// vectorises (always inlined into it).
__attribute__((always_inline)) inline void WidenBf16Row(const uint16_t* __restrict src,
                                                        int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = WidenBf16(src[i]);
}

// dst[i] = RoundBf16(src[i]) for i < n.
__attribute__((always_inline)) inline void RoundBf16Row(const float* __restrict src, int64_t n,
                                                        uint16_t* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = RoundBf16(src[i]);
}

}  // namespace tessera::dense_internal
