#include "io/auc.h"

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// The definition: P(score of a positive > score of a negative) + 1/2 P(equal), over all pairs.
double BruteForceAuc(const std::vector<double>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] != 1.0f || y[j] != 0.0f) continue;
      pairs += 1;
      wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return wins / pairs;
}

TEST(ExactAucTest, EqualsThePairwiseDefinitionWithTies) {
  CounterRng rng(5, 0);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 50 + trial * 20;
    std::vector<double> s(n);
    std::vector<float> y(n);
    for (int i = 0; i < n; ++i) {
      // Few distinct scores, so ties are common; labels correlated with scores.
      s[i] = static_cast<double>(rng.NextBelow(trial % 2 ? 7 : 1000));
      y[i] = rng.NextUniformDouble() < 0.2 + 0.6 * (s[i] / (trial % 2 ? 7 : 1000)) ? 1.0f : 0.0f;
    }
    y[0] = 1.0f;
    y[1] = 0.0f;
    EXPECT_NEAR(ExactAuc(s, y), BruteForceAuc(s, y), 1e-12) << trial;
  }
}

double Auc(std::vector<double> s, std::vector<float> y) { return ExactAuc(s, y); }

TEST(ExactAucTest, KnownValuesAndUndefinedCases) {
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.2, 0.3, 0.4}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.4, 0.3, 0.2, 0.1}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}), 0.75);
  // Soft labels: > 0.5 is positive.
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.2, 0.3, 0.4}, {0.2f, 0.4f, 0.6f, 0.9f}), 1.0);
  // Float scores take the same path.
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f},
                            std::vector<float>{0, 0, 1, 1}),
                   0.75);
  EXPECT_TRUE(std::isnan(Auc({0.1, 0.2}, {1, 1})));  // one class
  EXPECT_TRUE(std::isnan(Auc({0.1, 0.2}, {0, 0})));
  EXPECT_TRUE(std::isnan(Auc({}, {})));
  EXPECT_TRUE(std::isnan(Auc({0.1, std::nan("")}, {0, 1})));  // a NaN score
}

}  // namespace
}  // namespace tessera
