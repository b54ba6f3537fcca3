// ApplyRowUpdate on single rows of awkward widths (tails of the 16-lane sum) against the
// formulas in double; |got - ref| <= 1e-6 * (1 + |ref|) after one update.
#include "embedding/row_optimizer.h"

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(RowOptimizerTest, RowSumOfSquaresMatchesDouble) {
  CounterRng rng(3, 4);
  for (int64_t dim : {1, 2, 15, 16, 17, 31, 64, 100, 128, 129}) {
    std::vector<float> g(dim);
    double ref = 0;
    for (float& x : g) {
      x = 4.0f * rng.NextUniform() - 2.0f;
      ref += double(x) * x;
    }
    EXPECT_NEAR(RowSumOfSquares(g.data(), dim), ref, 1e-6 * ref) << "dim " << dim;
  }
}

TEST(RowOptimizerTest, EachTypeMatchesDoubleFormula) {
  CounterRng rng(5, 6);
  for (RowOptimizerType type :
       {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad, RowOptimizerType::kAdam}) {
    for (int64_t dim : {1, 17, 40}) {
      RowOptimizerOptions o;
      o.type = type;
      o.adagrad_divisor = 3.0f;
      const int64_t step = 4;
      const float lr = 0.03f;
      const int64_t sd = RowStateDim(type, dim);
      std::vector<float> g(dim), w(dim), s(sd);
      for (float& x : g) x = rng.NextUniform() - 0.5f;
      for (float& x : w) x = rng.NextUniform() - 0.5f;
      for (float& x : s) x = rng.NextUniform();  // non-negative (AdaGrad v, Adam u)
      std::vector<double> rw(w.begin(), w.end()), rs(s.begin(), s.end());
      ApplyRowUpdate(o, lr, step, dim, g.data(), w.data(), s.data());
      if (type == RowOptimizerType::kSgd) {
        for (int64_t k = 0; k < dim; ++k) rw[k] -= lr * double(g[k]);
      } else if (type == RowOptimizerType::kRowWiseAdagrad) {
        double sq = 0;
        for (float x : g) sq += double(x) * x;
        rs[0] += sq / dim;
        const double scale = lr / (std::sqrt(rs[0] / 3.0) + double(o.eps));
        for (int64_t k = 0; k < dim; ++k) rw[k] -= scale * g[k];
      } else {
        const double b1 = o.beta1, b2 = o.beta2;
        for (int64_t k = 0; k < dim; ++k) {
          rs[k] = b1 * rs[k] + (1 - b1) * g[k];
          rs[dim + k] = b2 * rs[dim + k] + (1 - b2) * double(g[k]) * g[k];
          rw[k] -= lr * (rs[k] / (1 - std::pow(b1, step))) /
                   (std::sqrt(rs[dim + k] / (1 - std::pow(b2, step))) + double(o.eps));
        }
      }
      for (int64_t k = 0; k < dim; ++k) {
        ASSERT_NEAR(w[k], rw[k], 1e-6 * (1 + std::abs(rw[k]))) << int(type) << " dim " << dim;
      }
      for (int64_t k = 0; k < sd; ++k) {
        ASSERT_NEAR(s[k], rs[k], 1e-6 * (1 + std::abs(rs[k]))) << int(type) << " dim " << dim;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
