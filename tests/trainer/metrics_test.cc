#include "trainer/metrics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "io/auc.h"

namespace tessera {
namespace {

// The definition: the fraction of (positive, negative) pairs ranked correctly, ties count half.
double BruteForceAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] <= 0.5f) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] > 0.5f) continue;
      pairs += 1;
      wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
  }
  return wins / pairs;
}

TEST(AucTest, MatchesBruteForceWithManyTies) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    int n = 50 + trial * 37;
    int levels = trial % 2 == 0 ? 5 : 1000;  // few levels: nearly everything ties
    std::uniform_int_distribution<int> level(0, levels - 1);
    std::bernoulli_distribution pos(0.1 + 0.04 * trial);
    std::vector<float> s(n), y(n);
    for (int i = 0; i < n; ++i) {
      y[i] = pos(gen) ? 1.0f : 0.0f;
      // Positives score a bit higher on average so the AUC is not 0.5.
      s[i] = static_cast<float>(level(gen) + (y[i] > 0 ? levels / 5 : 0)) / levels;
    }
    y[0] = 1.0f;
    y[1] = 0.0f;
    EXPECT_NEAR(ExactAuc(s, y), BruteForceAuc(s, y), 1e-12) << "trial " << trial;
  }
}

TEST(AucTest, ExtremesAndAllTied) {
  std::vector<float> y = {0, 0, 1, 1, 0, 1};
  std::vector<float> perfect = {0.1f, 0.2f, 0.8f, 0.9f, 0.3f, 0.7f};
  std::vector<float> reversed = {0.9f, 0.8f, 0.2f, 0.1f, 0.7f, 0.3f};
  std::vector<float> tied(6, 0.5f);
  EXPECT_DOUBLE_EQ(ExactAuc(perfect, y), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc(reversed, y), 0.0);
  EXPECT_DOUBLE_EQ(ExactAuc(tied, y), 0.5);
  // Hand count: positives at 0.4 (beats 0.1, ties 0.4: 1.5) and 0.9 (beats both: 2) -> 3.5 / 4.
  EXPECT_DOUBLE_EQ(ExactAuc(std::vector<float>{0.1f, 0.4f, 0.4f, 0.9f},
                              std::vector<float>{0, 0, 1, 1}),
                   3.5 / 4.0);
}

TEST(AucTest, OnlyDependsOnOrder) {
  std::mt19937 gen(3);
  std::normal_distribution<float> z;
  std::vector<float> logits(500), probs(500), y(500);
  for (int i = 0; i < 500; ++i) {
    logits[i] = z(gen);
    y[i] = (logits[i] + z(gen)) > 0 ? 1.0f : 0.0f;
    probs[i] = 1.0f / (1.0f + std::exp(-logits[i]));
  }
  double auc = ExactAuc(logits, y);
  EXPECT_GT(auc, 0.6);
  EXPECT_NEAR(ExactAuc(probs, y), auc, 1e-3);  // float sigmoid may merge a few close values
}

TEST(AucTest, UndefinedWithOneClass) {
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1})));
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{0, 0})));
  EXPECT_TRUE(std::isnan(ExactAuc(std::vector<float>{}, std::vector<float>{})));
}

TEST(LogLossTest, HandComputed) {
  std::vector<float> p = {0.9f, 0.2f, 0.6f, 0.5f};
  std::vector<float> y = {1, 0, 0, 1};
  EvalMetrics m = ComputeEvalMetrics(p, y);
  // -(ln 0.9 + ln 0.8 + ln 0.4 + ln 0.5) / 4, computed by hand.
  EXPECT_NEAR(m.logloss, 0.4844854950, 1e-7);
  // CTR 0.5: entropy ln 2.
  EXPECT_NEAR(m.ne, 0.4844854950 / 0.6931471806, 1e-7);
  EXPECT_EQ(m.count, 4);
  EXPECT_EQ(m.positives, 2);
  EXPECT_DOUBLE_EQ(m.auc, 0.75);  // pairs: 0.9>0.2, 0.9>0.6, 0.5>0.2, 0.5<0.6
}

TEST(LogLossTest, ClampsConfidentMistakes) {
  EvalMetrics m = ComputeEvalMetrics(std::vector<float>{0.0f, 1.0f}, std::vector<float>{1, 0});
  EXPECT_NEAR(m.logloss, -std::log(1e-7), 1e-6);  // 16.118..., not infinity
  EXPECT_TRUE(std::isfinite(m.ne));
}

TEST(LogLossTest, NormalizedEntropyAtBaseRateIsOne) {
  // Predicting the empirical CTR everywhere is exactly the normalizer.
  std::vector<float> y = {1, 0, 0, 0, 1, 0, 0, 0, 0, 0};  // CTR 0.2
  std::vector<float> p(y.size(), 0.2f);
  EvalMetrics m = ComputeEvalMetrics(p, y);
  EXPECT_NEAR(m.ne, 1.0, 1e-6);
  double h = -(0.2 * std::log(0.2) + 0.8 * std::log(0.8));
  EXPECT_NEAR(m.logloss, h, 1e-6);
}

TEST(LogLossTest, NeUndefinedWhenCtrIsZeroOrOne) {
  EXPECT_TRUE(std::isnan(
      ComputeEvalMetrics(std::vector<float>{0.3f}, std::vector<float>{1}).ne));
  EvalMetrics empty = ComputeEvalMetrics(std::vector<float>{}, std::vector<float>{});
  EXPECT_EQ(empty.count, 0);
  EXPECT_TRUE(std::isnan(empty.logloss));
}

TEST(LogLossTest, SumsMergeLikeOneSet) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(1000), y(1000);
  for (int i = 0; i < 1000; ++i) {
    p[i] = u(gen);
    y[i] = u(gen) < p[i] ? 1.0f : 0.0f;
  }
  EvalMetrics whole = ComputeEvalMetrics(p, y);
  LogLossSums sums;
  EvalAccumulator acc;
  for (int b = 0; b < 1000; b += 300) {
    size_t n = std::min(300, 1000 - b);
    absl::Span<const float> ps(p.data() + b, n), ys(y.data() + b, n);
    sums += ComputeLogLossSums(ps, ys);
    acc.Add(ps, ys);
  }
  EvalMetrics merged;
  FinishLogLoss(sums, &merged);
  EXPECT_NEAR(merged.logloss, whole.logloss, 1e-12);
  EXPECT_NEAR(merged.ne, whole.ne, 1e-12);
  EXPECT_EQ(merged.positives, whole.positives);
  EvalMetrics from_acc = acc.Compute();
  EXPECT_EQ(from_acc.count, 1000);
  EXPECT_DOUBLE_EQ(from_acc.auc, whole.auc);
  EXPECT_DOUBLE_EQ(from_acc.logloss, whole.logloss);
  acc.Clear();
  EXPECT_EQ(acc.count(), 0);
}

}  // namespace
}  // namespace tessera
