// RowDtype: how an embedding table stores its weights (the config's `storage.dtype`), and the
// scalar conversions between fp32 and the 16-bit formats that every path (kernels, stores,
// checkpoints, tests) shares, so they all produce the same bits.
//
// A 16-bit table stores each weight as IEEE binary16 (kF16) or bfloat16 (kBf16); lookups and
// updates compute in fp32 (the row is widened, pooled or updated, and an updated row is rounded
// back). Optimizer state is always fp32. Rounding on write (RowRounding):
//   kNearest     round to nearest, ties to even (what a plain conversion does);
//   kStochastic  round up or down with probability proportional to the distance (unbiased:
//                E[round(x)] = x), as FBGEMM's 16-bit tables do. The random bits are a hash of
//                (key, the fp32 value's bits), where key = StochasticKey(seed, step): they do
//                not depend on the slot, the row's position, the thread or the rank, so a
//                sharded table and one rank round identically and runs are bit-reproducible.
// Header-only, depending on core/ only. Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "core/bf16.h"
#include "core/enum_names.h"
#include "core/hd.h"
#include "core/rng.h"

namespace tessera {

enum class RowDtype { kF32, kF16, kBf16 };
inline constexpr EnumName<RowDtype> kRowDtypeNames[] = {
    {RowDtype::kF32, "fp32"}, {RowDtype::kF16, "fp16"}, {RowDtype::kBf16, "bf16"}};
// "fp32" / "fp16" / "bf16" (storage.dtype); Parse: InvalidArgument naming the value otherwise.
inline const char* RowDtypeName(RowDtype d) { return NameIn(kRowDtypeNames, d); }
inline absl::StatusOr<RowDtype> ParseRowDtype(const std::string& name) {
  return ParseIn(kRowDtypeNames, name, "embedding storage dtype");
}
// Bytes of one stored weight: 4 or 2.
inline constexpr int64_t RowDtypeBytes(RowDtype d) { return d == RowDtype::kF32 ? 4 : 2; }

enum class RowRounding { kStochastic, kNearest };
inline constexpr EnumName<RowRounding> kRowRoundingNames[] = {
    {RowRounding::kStochastic, "stochastic"}, {RowRounding::kNearest, "nearest"}};
// "stochastic" / "nearest" (storage.rounding); Parse: InvalidArgument otherwise.
inline const char* RowRoundingName(RowRounding r) { return NameIn(kRowRoundingNames, r); }
inline absl::StatusOr<RowRounding> ParseRowRounding(const std::string& name) {
  return ParseIn(kRowRoundingNames, name, "embedding storage rounding");
}

namespace row_dtype {

// The nearest-rounding conversions compile for the device too (TESSERA_HD_INLINE), so the CUDA
// kernels that move 16-bit payloads use these very functions; the bf16 ones are core/bf16.h's.
using ::tessera::Bf16ToFloat;
using ::tessera::BitsFloat;
using ::tessera::FloatBits;
using ::tessera::FloatToBf16;

// ---- bfloat16 -------------------------------------------------------------------------------
// Stochastic: adds 16 random bits (the top half of `r`) below the kept bits, then truncates.
// Inf and NaN round to nearest (they are kept).
inline uint16_t FloatToBf16Stochastic(float f, uint32_t r) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return FloatToBf16(f);
  return static_cast<uint16_t>((u + (r >> 16)) >> 16);
}

// ---- IEEE binary16 --------------------------------------------------------------------------
TESSERA_HD_INLINE float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float r;
  if (e == 0) {
    r = static_cast<float>(m) * (1.0f / 16777216.0f);
  } else if (e == 31) {
    r = BitsFloat(0x7f800000u | (m << 13));
  } else {
    r = BitsFloat(((e + 112u) << 23) | (m << 13));
  }
  return BitsFloat(FloatBits(r) | sign);
}
// Round to nearest even; overflow goes to infinity, subnormals are kept, NaN stays NaN.
TESSERA_HD_INLINE uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half m * 2^-24 (m = 1024 is the smallest normal's encoding).
#ifdef __CUDA_ARCH__
    const uint32_t m = static_cast<uint32_t>(rintf(BitsFloat(a) * 16777216.0f));
#else
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(BitsFloat(a) * 16777216.0f));
#endif
    return static_cast<uint16_t>(sign | m);
  }
  a += 0xfffu + ((a >> 13) & 1);  // round the 13 dropped mantissa bits to nearest even
  a -= 112u << 23;                // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | (a >> 13));
}
// The fp16 normal range where stochastic rounding works on the fp32 bits: [2^-14, 65504).
inline bool HalfStochasticNormal(uint32_t a) { return a >= 0x38800000u && a < 0x477fe000u; }
// Stochastic: in the normal range adds 13 random bits (the top bits of `r`) below the kept
// mantissa and truncates; below 2^-14 rounds m * 2^-24 with a uniform offset from r's top 24
// bits; at or beyond 65504, Inf and NaN round to nearest.
inline uint16_t FloatToHalfStochastic(float f, uint32_t r) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (HalfStochasticNormal(a)) {
    return static_cast<uint16_t>(sign | (((a + (r >> 19)) >> 13) - (112u << 10)));
  }
  if (a < 0x38800000u) {
    const float m = BitsFloat(a) * 16777216.0f +
                    static_cast<float>(r >> 8) * (1.0f / 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(m));
  }
  return FloatToHalf(f);
}

// ---- Stochastic rounding's random bits ------------------------------------------------------
// The per-step key (32 bits of a hash of seed and step).
inline uint32_t StochasticKey(uint64_t seed, int64_t step) {
  return static_cast<uint32_t>(HashCombine(seed ^ 0x5eed16b175ull, static_cast<uint64_t>(step)));
}
// 32 random bits for rounding the fp32 value with bits `bits` under `key` (murmur3's fmix32).
inline uint32_t StochasticBits(uint32_t key, uint32_t bits) {
  uint32_t h = bits ^ key;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// One stored 16-bit value (dtype kF16 or kBf16) as fp32, and fp32 rounded into it.
inline float ToFloat(RowDtype d, uint16_t h) {
  return d == RowDtype::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
}
inline uint16_t FromFloat(RowDtype d, RowRounding rounding, uint32_t key, float f) {
  if (rounding == RowRounding::kNearest) {
    return d == RowDtype::kF16 ? FloatToHalf(f) : FloatToBf16(f);
  }
  const uint32_t r = StochasticBits(key, FloatBits(f));
  return d == RowDtype::kF16 ? FloatToHalfStochastic(f, r) : FloatToBf16Stochastic(f, r);
}

}  // namespace row_dtype

// Widens n stored values of `dtype` at `src` to fp32 at `dst` (a copy for kF32).
void RowValuesToFloat(RowDtype dtype, const void* src, int64_t n, float* dst);
// Narrows n fp32 values into `dtype` at `dst`, rounding to nearest even (a copy for kF32).
// Exact for values that came from RowValuesToFloat of the same dtype.
void RowValuesFromFloat(RowDtype dtype, const float* src, int64_t n, void* dst);

}  // namespace tessera
