// 16-bit embedding storage (embedding/row_dtype.h): the conversions, stochastic rounding's
// statistics and determinism, and the pooled lookup / fused update over fp16 and bf16 rows
// against double-precision references of the stored (rounded) values.
#include "embedding/row_dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace rd = row_dtype;

// Sets the thread count for a scope.
std::vector<uint16_t> Narrowed(RowDtype d, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  RowValuesFromFloat(d, v.data(), static_cast<int64_t>(v.size()), out.data());
  return out;
}

double Wide(RowDtype d, uint16_t h) { return static_cast<double>(rd::ToFloat(d, h)); }

// The two representable neighbours of x (lo <= x <= hi), by brute force over all 16-bit codes'
// order: nearest-even and truncation bracket x.
void Bracket(RowDtype d, float x, double* lo, double* hi) {
  const uint16_t n = rd::FromFloat(d, RowRounding::kNearest, 0, x);
  const double v = Wide(d, n);
  // Step one code toward x's other side (sign-magnitude: +-1 on the code moves away/toward 0).
  const uint16_t away = static_cast<uint16_t>(n + 1), toward = static_cast<uint16_t>(n - 1);
  const double a = Wide(d, away), t = Wide(d, toward);
  const double other = (v <= x) == (a > v) ? a : t;
  *lo = std::min(v, other);
  *hi = std::max(v, other);
}

class RowDtypeTest : public ::testing::TestWithParam<RowDtype> {};

TEST_P(RowDtypeTest, NearestIsExactOnRoundTripAndBracketsValues) {
  const RowDtype d = GetParam();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = u(rng) * std::pow(2.0f, static_cast<float>(i % 40) - 30.0f);
    const uint16_t h = rd::FromFloat(d, RowRounding::kNearest, 0, x);
    // Widening is exact, and narrowing a widened value gives it back.
    EXPECT_EQ(rd::FromFloat(d, RowRounding::kNearest, 0, rd::ToFloat(d, h)), h);
    double lo, hi;
    Bracket(d, x, &lo, &hi);
    const double got = Wide(d, h);
    EXPECT_LE(std::abs(got - x), 0.5 * (hi - lo) * (1 + 1e-12)) << x;
  }
}

TEST_P(RowDtypeTest, StochasticRoundsToANeighbourAndIsUnbiased) {
  const RowDtype d = GetParam();
  // Values between two codes at several places: a normal value, one with a 1/4 fraction and (for
  // fp16) a subnormal.
  std::vector<float> xs = {0.3f, -1.2345f, 0.01f, 7.77e-3f};
  if (d == RowDtype::kF16) xs.push_back(3.3e-6f);
  for (float x : xs) {
    double lo, hi;
    Bracket(d, x, &lo, &hi);
    ASSERT_LT(lo, hi);
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const uint16_t h =
          rd::FromFloat(d, RowRounding::kStochastic, rd::StochasticKey(11, i), x);
      const double v = Wide(d, h);
      ASSERT_TRUE(v == lo || v == hi) << x << " -> " << v;
      sum += v;
    }
    // E[round(x)] = x; the mean of n Bernoulli draws scaled by (hi - lo) has standard deviation
    // <= 0.5 (hi - lo) / sqrt(n): allow 5 of them.
    const double tol = 5 * 0.5 * (hi - lo) / std::sqrt(static_cast<double>(n));
    EXPECT_NEAR(sum / n, static_cast<double>(x), tol) << RowDtypeName(d) << " x=" << x;
  }
}

TEST_P(RowDtypeTest, StochasticDependsOnlyOnKeyAndValue) {
  const RowDtype d = GetParam();
  const uint32_t k1 = rd::StochasticKey(5, 3), k2 = rd::StochasticKey(5, 4);
  EXPECT_NE(k1, k2);
  EXPECT_EQ(k1, rd::StochasticKey(5, 3));
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const float x = 0.001f * static_cast<float>(i) + 0.0001234f;
    EXPECT_EQ(rd::FromFloat(d, RowRounding::kStochastic, k1, x),
              rd::FromFloat(d, RowRounding::kStochastic, k1, x));
    differ += rd::FromFloat(d, RowRounding::kStochastic, k1, x) !=
              rd::FromFloat(d, RowRounding::kStochastic, k2, x);
  }
  EXPECT_GT(differ, 100);  // another step rounds differently
}

// A 16-bit table of `rows` x `dim` with random values (stored rounded to nearest).
std::vector<uint16_t> RandomTable(RowDtype d, int64_t rows, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(rows * dim);
  for (float& x : v) x = u(rng);
  return Narrowed(d, v);
}

struct Bags {
  std::vector<int64_t> offsets, indices;
  std::vector<float> weights;
};

Bags MakeBags(int64_t num_bags, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  Bags b;
  b.offsets.push_back(0);
  for (int64_t i = 0; i < num_bags; ++i) {
    const int64_t len = static_cast<int64_t>(rng() % 6);  // some empty bags
    for (int64_t j = 0; j < len; ++j) {
      b.indices.push_back(static_cast<int64_t>(rng() % rows));
      b.weights.push_back(0.25f + static_cast<float>(rng() % 8) * 0.125f);
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  return b;
}

TEST_P(RowDtypeTest, PooledLookupMatchesDoubleReference) {
  const RowDtype d = GetParam();
  const int64_t rows = 300;
  // 16 and 128 take the AVX-512 path where the CPU has it, 24 the portable loop.
  for (int64_t dim : {16, 24, 128}) {
    for (bool weighted : {false, true}) {
      for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
        const std::vector<uint16_t> table = RandomTable(d, rows, dim, 3);
        const Bags bags = MakeBags(200, rows, 4);
        const int64_t nb = static_cast<int64_t>(bags.offsets.size()) - 1;
        std::vector<float> out(nb * dim, -1.0f);
        PooledLookupArgs a;
        a.weights = table.data();
        a.weight_dtype = d;
        a.dim = dim;
        a.offsets = bags.offsets.data();
        a.indices = bags.indices.data();
        a.per_id_weights = weighted ? bags.weights.data() : nullptr;
        a.num_bags = nb;
        a.pooling = mode;
        a.out = out.data();
        a.out_stride = dim;
        ASSERT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t jb = bags.offsets[b], je = bags.offsets[b + 1];
          for (int64_t k = 0; k < dim; ++k) {
            double ref = 0, mag = 0;
            for (int64_t j = jb; j < je; ++j) {
              const double w = weighted ? bags.weights[j] : 1.0;
              const double x = Wide(d, table[bags.indices[j] * dim + k]);
              ref += w * x;
              mag += std::abs(w * x);
            }
            if (mode == PoolingMode::kMean && je > jb) ref /= static_cast<double>(je - jb);
            EXPECT_NEAR(out[b * dim + k], ref, 4e-7 * (mag + 1e-30) + 1e-30)
                << RowDtypeName(d) << " dim " << dim << " bag " << b << " k " << k;
          }
        }
      }
    }
  }
}

// The fused update over 16-bit rows: each touched row ends as the 16-bit rounding of the fp32
// ApplyRowUpdate of its widened values (bit-exact, both roundings), within the rounding's error
// of a double-precision row-wise AdaGrad step, and bit-identical for any thread count.
TEST_P(RowDtypeTest, FusedUpdateMatchesReferenceAndThreadCounts) {
  const RowDtype d = GetParam();
  const int64_t rows = 400;
  for (int64_t dim : {16, 24, 128}) {
    for (RowRounding rounding : {RowRounding::kNearest, RowRounding::kStochastic}) {
      const std::vector<uint16_t> table0 = RandomTable(d, rows, dim, 9);
      std::vector<float> state0(rows);
      for (int64_t r = 0; r < rows; ++r) state0[r] = 0.01f * static_cast<float>(r % 7);
      const Bags bags = MakeBags(500, rows, 10);
      const int64_t nb = static_cast<int64_t>(bags.offsets.size()) - 1;
      std::vector<float> grad(nb * dim);
      std::mt19937 rng(12);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& g : grad) g = u(rng);
      BagGradients src{bags.offsets.data(), bags.indices.data(), nullptr, nb, grad.data(), dim};
      RowUpdateArgs args;
      args.dim = dim;
      args.weight_dtype = d;
      args.rounding = rounding;
      args.rounding_seed = 77;
      args.lr = 0.05f;
      args.step = 3;
      std::vector<std::vector<uint16_t>> results;
      std::vector<int64_t> unique;
      std::vector<float> sums;
      for (int threads : {1, 2, 3}) {
        ScopedNumThreads tc(threads);
        std::vector<uint16_t> table = table0;
        std::vector<float> state = state0;
        args.weights = table.data();
        args.state = state.data();
        EmbeddingWorkspace ws;
        ASSERT_TRUE(FusedBackwardUpdate(DeviceContext::Cpu(), {&src, 1}, PoolingMode::kSum,
                                        args, &ws)
                        .ok());
        results.push_back(table);
        if (threads == 1) {
          EmbeddingWorkspace ws2;
          ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), {&src, 1}, dim,
                                            PoolingMode::kSum, &ws2, &unique, &sums)
                          .ok());
        }
      }
      EXPECT_EQ(results[0], results[1]);
      EXPECT_EQ(results[0], results[2]);
      ASSERT_FALSE(unique.empty());
      const uint32_t key = rd::StochasticKey(77, 3);
      std::vector<bool> touched(rows, false);
      for (size_t i = 0; i < unique.size(); ++i) {
        const int64_t r = unique[i];
        touched[r] = true;
        // fp32 path on the widened row (the same ApplyRowUpdate), then the scalar rounding.
        std::vector<float> w(dim);
        for (int64_t k = 0; k < dim; ++k) w[k] = rd::ToFloat(d, table0[r * dim + k]);
        float v = state0[r];
        ApplyRowUpdate(args.optimizer, args.lr, args.step, dim, sums.data() + i * dim, w.data(),
                       &v);
        // Double reference of row-wise AdaGrad on the stored values.
        double sq = 0;
        for (int64_t k = 0; k < dim; ++k) sq += double(sums[i * dim + k]) * sums[i * dim + k];
        const double vd = state0[r] + sq / dim;
        const double scale = args.lr / (std::sqrt(vd) + 1e-8);
        for (int64_t k = 0; k < dim; ++k) {
          const uint16_t got = results[0][r * dim + k];
          ASSERT_EQ(got, rd::FromFloat(d, rounding, key, w[k]))
              << RowDtypeName(d) << " dim " << dim << " row " << r << " k " << k;
          const double ref = Wide(d, table0[r * dim + k]) - scale * sums[i * dim + k];
          double lo, hi;
          Bracket(d, static_cast<float>(ref), &lo, &hi);
          const double ulp = hi - lo;
          const double err = std::abs(Wide(d, got) - ref);
          // The fp32 update's own error scales with its terms, not with their difference.
          const double terms =
              std::abs(Wide(d, table0[r * dim + k])) + std::abs(scale * sums[i * dim + k]);
          EXPECT_LE(err, (rounding == RowRounding::kNearest ? 0.5 : 1.0) * ulp + 1e-6 * terms)
              << RowDtypeName(d) << " row " << r << " k " << k;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        if (touched[r]) continue;
        for (int64_t k = 0; k < dim; ++k) ASSERT_EQ(results[0][r * dim + k], table0[r * dim + k]);
      }
    }
  }
}

TEST_P(RowDtypeTest, InMemoryStoreHoldsHalfTheBytesAndRoundTrips) {
  const RowDtype d = GetParam();
  InMemoryRowStoreOptions o;
  o.num_rows = 50;
  o.dim = 8;
  o.state_dim = 1;
  o.init.type = RowInitType::kUniform;
  o.seed = 3;
  o.dtype = d;
  auto store = CreateInMemoryRowStore(o);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->weight_dtype(), d);
  EXPECT_EQ((*store)->weight_row_bytes(), 16);
  // The initial rows are InitRow rounded to nearest.
  o.dtype = RowDtype::kF32;
  auto ref = CreateInMemoryRowStore(o);
  ASSERT_TRUE(ref.ok());
  std::vector<float> w32(50 * 8), w16(50 * 8);
  ASSERT_TRUE((*ref)->ReadRows(0, 50, w32.data(), nullptr).ok());
  ASSERT_TRUE((*store)->ReadRows(0, 50, w16.data(), nullptr).ok());
  for (size_t i = 0; i < w32.size(); ++i) {
    EXPECT_EQ(w16[i], rd::ToFloat(d, rd::FromFloat(d, RowRounding::kNearest, 0, w32[i])));
  }
  // Bytes round-trip exactly; fp32 writes round to nearest.
  std::vector<uint16_t> bytes(50 * 8);
  std::vector<float> state(50);
  ASSERT_TRUE((*store)->ReadRowBytes(0, 50, bytes.data(), state.data()).ok());
  for (auto& b : bytes) b = static_cast<uint16_t>(b ^ 1);
  ASSERT_TRUE((*store)->WriteRowBytes(10, 40, bytes.data(), nullptr).ok());
  std::vector<uint16_t> back(40 * 8);
  ASSERT_TRUE((*store)->ReadRowBytes(10, 40, back.data(), nullptr).ok());
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), back.size() * 2), 0);
  EXPECT_FALSE((*store)->WriteRows(45, 10, w32.data(), nullptr).ok());  // out of range
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RowDtypeTest, ::testing::Values(RowDtype::kF16, RowDtype::kBf16),
                         [](const auto& info) { return std::string(RowDtypeName(info.param)); });

}  // namespace
}  // namespace tessera
