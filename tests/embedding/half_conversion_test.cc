// The round-to-nearest fp16 / bf16 conversions of embedding/row_dtype.h, which 16-bit tables and
// the 16-bit all-to-all payloads (sharding.comm_dtype) share: every 16-bit value survives a round
// trip, and a float goes to the nearest representable value (ties to even), checked against the
// neighbours in double precision.
#include "embedding/row_dtype.h"

#include <cmath>
#include <cstdint>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera::row_dtype {
namespace {

bool IsNan16(uint16_t h, bool bf16) {
  return bf16 ? ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) : ((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
}

TEST(HalfTest, EveryValueRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    if (IsNan16(h, false)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(h)));
      EXPECT_TRUE(IsNan16(FloatToHalf(HalfToFloat(h)), false));
    } else {
      ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << i;
    }
    if (IsNan16(h, true)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(h)));
    } else {
      ASSERT_EQ(FloatToBf16(Bf16ToFloat(h)), h) << i;
    }
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
}

// The nearest of the representable neighbours of the result, in double; ties to even codes.
void CheckNearest(float x, uint16_t h, float (*decode)(uint16_t), bool bf16) {
  const double got = decode(h);
  if (std::isinf(got)) {
    // x rounded past the largest finite value: at least the midpoint to the next power of two.
    const double limit = bf16 ? std::ldexp(2.0 - std::ldexp(1.0, -8), 127) : 65520.0;
    EXPECT_GE(std::fabs(static_cast<double>(x)), limit) << x;
    return;
  }
  const double err = std::fabs(got - x);
  for (int delta : {-1, 1}) {
    const uint16_t other = static_cast<uint16_t>(h + delta);
    if ((h & 0x7fff) == 0 && delta == -1) continue;
    const double alt = decode(other);
    if (std::isnan(alt) || std::isinf(alt)) continue;
    if (std::signbit(alt) != std::signbit(got) && got != 0) continue;
    const double alt_err = std::fabs(alt - x);
    ASSERT_LE(err, alt_err) << "x=" << x << " code " << h << " vs " << other;
    if (err == alt_err) EXPECT_EQ(h & 1, 0) << "tie not to even: x=" << x;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  CounterRng rng(11, 0);
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes across the fp16 range (subnormals to overflow) and far beyond for bf16.
    const float mag = std::ldexp(rng.NextUniform() + 0.5f, static_cast<int>(rng.NextUniform() * 46) - 28);
    const float x = rng.NextUniform() < 0.5f ? -mag : mag;
    CheckNearest(x, FloatToHalf(x), HalfToFloat, false);
    const float y = std::ldexp(x, static_cast<int>(rng.NextUniform() * 200) - 100);
    CheckNearest(y, FloatToBf16(y), Bf16ToFloat, true);
  }
  // Exact ties.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);   // 1 + half ulp -> 1 (even)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

}  // namespace
}  // namespace tessera::row_dtype
