#include "core/rng.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CounterRngTest, SameKeySameStream) {
  CounterRng a(7, 3), b(7, 3), c(7, 4);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.NextBits();
    EXPECT_EQ(x, b.NextBits());
    EXPECT_NE(x, c.NextBits());
  }
}

TEST(CounterRngTest, RandomAccessMatchesSequential) {
  CounterRng a(1, 2);
  std::vector<uint64_t> seq;
  for (int i = 0; i < 50; ++i) seq.push_back(a.NextBits());
  CounterRng b(1, 2);
  for (int i = 49; i >= 0; --i) EXPECT_EQ(b.Bits(i), seq[i]);
}

TEST(CounterRngTest, UniformAndNormalMoments) {
  CounterRng r(42, 0);
  double su = 0, sn = 0, sn2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = r.NextUniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    float z = r.NextNormal();
    sn += z;
    sn2 += double(z) * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(CounterRngTest, NextBelowInRangeAndCoversAll) {
  CounterRng r(5, 5);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    uint64_t v = r.NextBelow(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 10u);
}

}  // namespace
}  // namespace tessera
