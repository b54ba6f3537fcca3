// bfloat16 scalars: the one definition of the conversions every part uses (the tables' 16-bit
// rows and outputs, embedding/row_dtype.h; the dense side's bf16 hand-off and GEMM inputs,
// dense/internal/bf16_rows.h; the CUDA kernels that move 16-bit payloads). Round to nearest even
// with a NaN kept quiet, in integer arithmetic: the bits do not depend on the CPU (AVX512_BF16's
// vcvtne2ps2bf16 flushes denormals; this does not) and the select form vectorises in a caller's
// loop. Compiles for host and device (TESSERA_HD_INLINE). Thread-compatible: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.h"

namespace tessera {

// The bits of `f`, and the float of bits `u`.
#ifdef __CUDA_ARCH__
TESSERA_HD_INLINE uint32_t FloatBits(float f) { return __float_as_uint(f); }
TESSERA_HD_INLINE float BitsFloat(uint32_t u) { return __uint_as_float(u); }
#else
// (memcpy, not std::bit_cast: nvcc's host pass of the .cu files does not have it.)
TESSERA_HD_INLINE uint32_t FloatBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
TESSERA_HD_INLINE float BitsFloat(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
#endif

// The exact float of bf16 `h`.
TESSERA_HD_INLINE float Bf16ToFloat(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

// `f` rounded to bf16, nearest even; a NaN stays a quiet NaN.
TESSERA_HD_INLINE uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t nan = (u >> 16) | 0x40u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace tessera
