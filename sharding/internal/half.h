// float <-> IEEE fp16 / bfloat16, round to nearest even, for the 16-bit all-to-all payloads
// (ShardedEmbeddingOptions::comm_dtype). Portable bit arithmetic (no F16C needed); NaN stays NaN,
// fp16 overflow goes to infinity, fp16 subnormals are kept.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera::internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half, m * 2^-24; nearbyint rounds to nearest even (and m = 1024
    // is exactly the smallest normal's encoding).
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(BitsFloat(a) * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  a += 0xfffu + ((a >> 13) & 1);  // round the 13 dropped mantissa bits to nearest even
  a -= 112u << 23;                // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | (a >> 13));
}

inline float HalfToFloat(uint16_t h) {
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

}  // namespace tessera::internal
