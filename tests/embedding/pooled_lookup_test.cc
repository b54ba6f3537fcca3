// Forward, gradient aggregation and fused update of pooled_lookup.h against double-precision
// references. Tolerances: forward and aggregated gradients |got - ref| <= (len + 2) * 2^-23 *
// sum_j |term_j| (the float rounding bound of a sum of len terms); updated weights and state
// |got - ref| <= 1e-5 * (1 + |ref|) after three steps, the double reference of each optimizer
// being applied per unique row to the aggregated gradient.
#include "embedding/pooled_lookup.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
constexpr double kFloatEps = 1.0 / (1 << 23);

// Bags with lengths in [0, max_len] (some empty) and ids drawn from [0, id_range), so ids repeat
// within and across bags. Offsets start at `first` (absolute into indices).
struct Bags {
  std::vector<int64_t> offsets, indices;
  std::vector<float> weights;
  int64_t num_bags() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

Bags MakeBags(uint64_t seed, int64_t num_bags, int max_len, int64_t id_range, int64_t first = 0) {
  CounterRng rng(seed, 0);
  Bags b;
  b.indices.assign(first, -7);  // padding before the first bag that no bag may read
  b.weights.assign(first, 1e9f);
  b.offsets.push_back(first);
  for (int64_t i = 0; i < num_bags; ++i) {
    int len = static_cast<int>(rng.NextBelow(max_len + 1));
    if (i % 5 == 3) len = 0;
    for (int j = 0; j < len; ++j) {
      b.indices.push_back(static_cast<int64_t>(rng.NextBelow(id_range)));
      b.weights.push_back(2.0f * rng.NextUniform() - 0.5f);
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  return b;
}

std::vector<float> RandomTable(uint64_t seed, int64_t rows, int64_t dim) {
  CounterRng rng(seed, 1);
  std::vector<float> w(rows * dim);
  for (float& v : w) v = 2.0f * rng.NextUniform() - 1.0f;
  return w;
}

struct ForwardCase {
  int64_t dim;
  PoolingMode pooling;
  bool weighted;
};

class ForwardTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardTest, MatchesDoubleReference) {
  const ForwardCase c = GetParam();
  const int64_t rows = 300, stride = c.dim + 3;
  std::vector<float> table = RandomTable(c.dim, rows, c.dim);
  Bags bags = MakeBags(c.dim * 7 + c.weighted, 500, 12, rows, /*first=*/5);
  std::vector<float> out(bags.num_bags() * stride, std::numeric_limits<float>::quiet_NaN());
  PooledLookupArgs a;
  a.weights = table.data();
  a.dim = c.dim;
  a.offsets = bags.offsets.data();
  a.indices = bags.indices.data();
  a.per_id_weights = c.weighted ? bags.weights.data() : nullptr;
  a.num_bags = bags.num_bags();
  a.pooling = c.pooling;
  a.out = out.data();
  a.out_stride = stride;
  a.num_slots = rows;
  ASSERT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
  for (int64_t b = 0; b < bags.num_bags(); ++b) {
    const int64_t jb = bags.offsets[b], je = bags.offsets[b + 1], len = je - jb;
    for (int64_t k = 0; k < c.dim; ++k) {
      double ref = 0, mag = 0;
      for (int64_t j = jb; j < je; ++j) {
        double term = (c.weighted ? double(bags.weights[j]) : 1.0) *
                      double(table[bags.indices[j] * c.dim + k]);
        ref += term;
        mag += std::abs(term);
      }
      if (c.pooling == PoolingMode::kMean && len > 0) ref /= len, mag /= len;
      const float got = out[b * stride + k];
      if (len == 0) {
        ASSERT_EQ(got, 0.0f) << "empty bag " << b;
      } else {
        ASSERT_NEAR(got, ref, (len + 2) * kFloatEps * mag + 1e-30) << "bag " << b << " k " << k;
      }
    }
    for (int64_t k = c.dim; k < stride; ++k) ASSERT_TRUE(std::isnan(out[b * stride + k]));
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, ForwardTest,
                         ::testing::Values(ForwardCase{1, PoolingMode::kSum, false},
                                           ForwardCase{7, PoolingMode::kMean, true},
                                           ForwardCase{16, PoolingMode::kSum, false},
                                           ForwardCase{16, PoolingMode::kMean, false},
                                           ForwardCase{16, PoolingMode::kSum, true},
                                           ForwardCase{33, PoolingMode::kSum, true},
                                           ForwardCase{64, PoolingMode::kMean, true},
                                           ForwardCase{128, PoolingMode::kSum, false},
                                           ForwardCase{128, PoolingMode::kMean, true},
                                           ForwardCase{200, PoolingMode::kSum, true}));

TEST(PooledLookupTest, ForwardBitIdenticalForAnyThreadCount) {
  const int64_t rows = 5000, dim = 64;
  std::vector<float> table = RandomTable(3, rows, dim);
  Bags bags = MakeBags(4, 4000, 10, rows);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    ScopedNumThreads tc(threads);
    std::vector<float> out(bags.num_bags() * dim);
    PooledLookupArgs a{table.data(),
                       dim,
                       bags.offsets.data(),
                       bags.indices.data(),
                       bags.weights.data(),
                       bags.num_bags(),
                       PoolingMode::kMean,
                       out.data(),
                       dim};
    ASSERT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
    outs.push_back(out);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(PooledLookupTest, ForwardRejectsInconsistentArgs) {
  std::vector<float> table(40), out(40);
  std::vector<int64_t> offsets = {0, 2, 1}, indices = {0, 9};
  PooledLookupArgs a{table.data(), 4, offsets.data(), indices.data(), nullptr, 2, PoolingMode::kSum,
                     out.data(),   4};
  absl::Status st = PooledLookupForward(DeviceContext::Cpu(), a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("offsets decrease at bag 1"));
  offsets = {0, 1, 2};
  a.out_stride = 3;
  EXPECT_THAT(PooledLookupForward(DeviceContext::Cpu(), a).message(), HasSubstr("out_stride"));
  a.out_stride = 4;
  a.num_slots = 5;
  st = PooledLookupForward(DeviceContext::Cpu(), a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("index 9"));
  a.num_slots = 10;
  EXPECT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
  a.dim = 0;
  EXPECT_EQ(PooledLookupForward(DeviceContext::Cpu(), a).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Backward.

struct Source {
  Bags bags;
  std::vector<float> grad;  // [num_bags, stride]
  int64_t stride;
  bool weighted;
  BagGradients View() const {
    return BagGradients{
        bags.offsets.data(), bags.indices.data(), weighted ? bags.weights.data() : nullptr,
        bags.num_bags(),     grad.data(),         stride};
  }
};

Source MakeSource(uint64_t seed, int64_t num_bags, int max_len, int64_t id_range, int64_t dim,
                  bool weighted, int64_t first = 0) {
  Source s{MakeBags(seed, num_bags, max_len, id_range, first), {}, dim + 2, weighted};
  s.grad = RandomTable(seed + 100, num_bags, s.stride);
  return s;
}

// slot -> summed gradient in double, plus the sum of |terms| for the tolerance.
struct RefGrad {
  std::vector<double> g, mag;
};
std::map<int64_t, RefGrad> ReferenceRowGrads(const std::vector<Source>& sources, int64_t dim,
                                             PoolingMode pooling) {
  std::map<int64_t, RefGrad> ref;
  for (const Source& s : sources) {
    for (int64_t b = 0; b < s.bags.num_bags(); ++b) {
      const int64_t jb = s.bags.offsets[b], je = s.bags.offsets[b + 1];
      for (int64_t j = jb; j < je; ++j) {
        RefGrad& r = ref[s.bags.indices[j]];
        r.g.resize(dim);
        r.mag.resize(dim);
        double scale = s.weighted ? s.bags.weights[j] : 1.0;
        if (pooling == PoolingMode::kMean) scale /= double(je - jb);
        for (int64_t k = 0; k < dim; ++k) {
          double term = scale * s.grad[b * s.stride + k];
          r.g[k] += term;
          r.mag[k] += std::abs(term);
        }
      }
    }
  }
  return ref;
}

void ExpectRowGradsMatch(const std::vector<Source>& sources, int64_t dim, PoolingMode pooling,
                         const std::vector<int64_t>& unique, const std::vector<float>& grads) {
  auto ref = ReferenceRowGrads(sources, dim, pooling);
  ASSERT_EQ(unique.size(), ref.size());
  ASSERT_EQ(grads.size(), ref.size() * dim);
  int64_t total_ids = 0;
  for (const Source& s : sources) total_ids += s.bags.offsets.back() - s.bags.offsets.front();
  size_t u = 0;
  for (const auto& [slot, r] : ref) {
    ASSERT_EQ(unique[u], slot) << "unique slots must be increasing";
    for (int64_t k = 0; k < dim; ++k) {
      ASSERT_NEAR(grads[u * dim + k], r.g[k], (total_ids + 2) * kFloatEps * r.mag[k] + 1e-30)
          << "slot " << slot << " k " << k;
    }
    ++u;
  }
}

TEST(AggregateRowGradientsTest, DuplicatesWithinAndAcrossBagsAndSources) {
  for (PoolingMode pooling : {PoolingMode::kSum, PoolingMode::kMean}) {
    for (int64_t dim : {5, 16, 64}) {
      // Two features sharing one table: ids from a small range repeat everywhere.
      std::vector<Source> sources = {MakeSource(1, 300, 8, 50, dim, true, 3),
                                     MakeSource(2, 300, 8, 80, dim, false)};
      std::vector<BagGradients> views = {sources[0].View(), sources[1].View()};
      EmbeddingWorkspace ws;
      std::vector<int64_t> unique;
      std::vector<float> grads;
      ASSERT_TRUE(
          AggregateRowGradients(DeviceContext::Cpu(), views, dim, pooling, &ws, &unique, &grads)
              .ok());
      ExpectRowGradsMatch(sources, dim, pooling, unique, grads);
    }
  }
}

// Without per-id weights the sort keys index per-bag gradient rows; with them, per-position
// ones. Weights of exactly 1 make the same terms, so both must give the same bits (and the
// unweighted sums match the double reference, with two sources of different bag counts).
TEST(AggregateRowGradientsTest, PerBagAndPerPositionIndexingGiveTheSameBits) {
  for (PoolingMode pooling : {PoolingMode::kSum, PoolingMode::kMean}) {
    for (int64_t dim : {5, 16, 128}) {
      for (int threads : {1, 2}) {
        ScopedNumThreads tc(threads);
        std::vector<Source> sources = {MakeSource(3, 700, 9, 60, dim, false, 2),
                                       MakeSource(4, 450, 9, 500, dim, false)};
        std::vector<BagGradients> views = {sources[0].View(), sources[1].View()};
        EmbeddingWorkspace ws;
        std::vector<int64_t> unique_bag, unique_pos;
        std::vector<float> grads_bag, grads_pos;
        ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), views, dim, pooling, &ws,
                                          &unique_bag, &grads_bag)
                        .ok());
        ExpectRowGradsMatch(sources, dim, pooling, unique_bag, grads_bag);
        std::vector<float> ones(sources[1].bags.indices.size(), 1.0f);
        views[1].per_id_weights = ones.data();
        ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), views, dim, pooling, &ws,
                                          &unique_pos, &grads_pos)
                        .ok());
        EXPECT_EQ(unique_bag, unique_pos);
        EXPECT_TRUE(grads_bag == grads_pos) << "dim " << dim << " threads " << threads;
      }
    }
  }
}

TEST(AggregateRowGradientsTest, LargeSlotsAndManyIdsSortCorrectly) {
  // Slots up to 2^40 need four radix passes; 60k ids use several chunks per pass.
  const int64_t dim = 4;
  Source s = MakeSource(9, 6000, 19, 3000, dim, true);
  for (int64_t& id : s.bags.indices) id = id * 366000001 + (id % 3);
  std::vector<Source> sources = {s};
  std::vector<BagGradients> views = {sources[0].View()};
  EmbeddingWorkspace ws;
  for (int threads : {1, 2}) {
    ScopedNumThreads tc(threads);
    ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), views, dim, PoolingMode::kSum, &ws,
                                      &ws.unique_slots, &ws.row_grads)
                    .ok());
    ExpectRowGradsMatch(sources, dim, PoolingMode::kSum, ws.unique_slots, ws.row_grads);
  }
}

TEST(AggregateRowGradientsTest, EmptyInputAndErrors) {
  EmbeddingWorkspace ws;
  std::vector<int64_t> unique = {1, 2};
  std::vector<float> grads = {1};
  std::vector<int64_t> offsets = {0, 0};
  std::vector<float> g(4);
  BagGradients empty{offsets.data(), nullptr, nullptr, 1, g.data(), 4};
  ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), {empty}, 4, PoolingMode::kSum, &ws,
                                    &unique, &grads)
                  .ok());
  EXPECT_TRUE(unique.empty());
  EXPECT_TRUE(grads.empty());

  std::vector<int64_t> offs = {0, 2}, idx = {3, -4};
  BagGradients neg{offs.data(), idx.data(), nullptr, 1, g.data(), 4};
  absl::Status st = AggregateRowGradients(DeviceContext::Cpu(), {neg}, 4, PoolingMode::kSum, &ws,
                                          &unique, &grads);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("slot -4"));
  idx[1] = 1;
  neg.grad_stride = 3;
  st = AggregateRowGradients(DeviceContext::Cpu(), {neg}, 4, PoolingMode::kSum, &ws, &unique,
                             &grads);
  EXPECT_THAT(st.message(), HasSubstr("grad_stride 3 < dim 4"));
}

// The row optimizers' formulas in double, applied per unique row.
void ReferenceUpdate(const RowOptimizerOptions& o, double lr, int64_t step, int64_t dim,
                     const double* g, double* w, double* s) {
  switch (o.type) {
    case RowOptimizerType::kSgd:
      for (int64_t k = 0; k < dim; ++k) w[k] -= lr * g[k];
      break;
    case RowOptimizerType::kRowWiseAdagrad: {
      double sq = 0;
      for (int64_t k = 0; k < dim; ++k) sq += g[k] * g[k];
      s[0] += sq / dim;
      const double scale = lr / (std::sqrt(s[0] / o.adagrad_divisor) + o.eps);
      for (int64_t k = 0; k < dim; ++k) w[k] -= scale * g[k];
      break;
    }
    case RowOptimizerType::kAdam: {
      const double bc1 = 1 - std::pow(double(o.beta1), double(step));
      const double bc2 = 1 - std::pow(double(o.beta2), double(step));
      for (int64_t k = 0; k < dim; ++k) {
        s[k] = o.beta1 * s[k] + (1 - double(o.beta1)) * g[k];
        s[dim + k] = o.beta2 * s[dim + k] + (1 - double(o.beta2)) * g[k] * g[k];
        w[k] -= lr * (s[k] / bc1) / (std::sqrt(s[dim + k] / bc2) + o.eps);
      }
      break;
    }
  }
}

class FusedUpdateTest : public ::testing::TestWithParam<RowOptimizerType> {};

TEST_P(FusedUpdateTest, ThreeStepsMatchDoubleReference) {
  const int64_t rows = 400, dim = 24;
  RowOptimizerOptions opt;
  opt.type = GetParam();
  opt.adagrad_divisor = 2.0f;
  const int64_t sd = RowStateDim(opt.type, dim);
  std::vector<float> w = RandomTable(11, rows, dim);
  std::vector<float> state(rows * sd, opt.type == RowOptimizerType::kRowWiseAdagrad ? 0.1f : 0.0f);
  std::vector<double> rw(w.begin(), w.end()), rs(state.begin(), state.end());
  EmbeddingWorkspace ws;
  const float lr = 0.05f;
  for (int64_t step = 1; step <= 3; ++step) {
    // Ids from half the table, so untouched rows exist; two features share the table.
    std::vector<Source> sources = {MakeSource(20 + step, 200, 6, rows / 2, dim, true),
                                   MakeSource(30 + step, 150, 6, rows / 2, dim, false, 4)};
    std::vector<BagGradients> views = {sources[0].View(), sources[1].View()};
    RowUpdateArgs args{w.data(), sd > 0 ? state.data() : nullptr, dim, opt, lr, step};
    std::vector<float> before = w;
    ASSERT_TRUE(
        FusedBackwardUpdate(DeviceContext::Cpu(), views, PoolingMode::kMean, args, &ws).ok());
    // The reference update is fed the aggregated float gradients (checked against the double
    // sums first): Adam's first step is ~lr * sign(g), so a row whose terms nearly cancel would
    // otherwise turn the sum's last-bit rounding into an lr-sized difference.
    EmbeddingWorkspace ref_ws;
    std::vector<int64_t> unique;
    std::vector<float> grads;
    ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), views, dim, PoolingMode::kMean, &ref_ws,
                                      &unique, &grads)
                    .ok());
    ExpectRowGradsMatch(sources, dim, PoolingMode::kMean, unique, grads);
    ASSERT_EQ(unique, ws.unique_slots);
    for (size_t u = 0; u < unique.size(); ++u) {
      std::vector<double> g(grads.begin() + u * dim, grads.begin() + (u + 1) * dim);
      ReferenceUpdate(opt, lr, step, dim, g.data(), rw.data() + unique[u] * dim,
                      rs.data() + unique[u] * sd);
    }
    auto touched = ReferenceRowGrads(sources, dim, PoolingMode::kMean);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < dim; ++k) {
        if (!touched.count(r)) ASSERT_EQ(w[r * dim + k], before[r * dim + k]) << "row " << r;
        ASSERT_NEAR(w[r * dim + k], rw[r * dim + k], 1e-5 * (1 + std::abs(rw[r * dim + k])))
            << "step " << step << " row " << r << " k " << k;
      }
    }
    for (int64_t i = 0; i < rows * sd; ++i) {
      ASSERT_NEAR(state[i], rs[i], 1e-5 * (1 + std::abs(rs[i]))) << "state " << i;
    }
  }
  // The update moved the touched rows (a test that cannot pass with a no-op update).
  EXPECT_GT(
      std::abs(w[ws.unique_slots[0] * dim] - RandomTable(11, rows, dim)[ws.unique_slots[0] * dim]),
      1e-4);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedUpdateTest,
                         ::testing::Values(RowOptimizerType::kSgd,
                                           RowOptimizerType::kRowWiseAdagrad,
                                           RowOptimizerType::kAdam));

TEST(FusedBackwardTest, BitIdenticalWithOneAndTwoThreads) {
  // Large enough that every phase (keys, sort, runs, sums, updates) splits into chunks.
  const int64_t rows = 20000, dim = 16;
  RowOptimizerOptions opt;
  opt.type = RowOptimizerType::kAdam;
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    ScopedNumThreads tc(threads);
    std::vector<float> w = RandomTable(5, rows, dim), state(rows * 2 * dim, 0.0f);
    EmbeddingWorkspace ws;
    for (int64_t step = 1; step <= 2; ++step) {
      std::vector<Source> sources = {MakeSource(40 + step, 8000, 10, rows, dim, true),
                                     MakeSource(50 + step, 4000, 10, 300, dim, false)};
      std::vector<BagGradients> views = {sources[0].View(), sources[1].View()};
      RowUpdateArgs args{w.data(), state.data(), dim, opt, 0.01f, step};
      ASSERT_TRUE(
          FusedBackwardUpdate(DeviceContext::Cpu(), views, PoolingMode::kSum, args, &ws).ok());
    }
    w.insert(w.end(), state.begin(), state.end());
    results.push_back(std::move(w));
  }
  EXPECT_TRUE(results[0] == results[1]);
}

// FusedBackwardUpdate sums and applies each row in one pass; it must give exactly the bits of
// its two halves (AggregateRowGradients, then ApplyRowUpdates on the sums) for every optimizer,
// fixed and generic dims (16-128: the in-register path; 24: the blocked one), weighted and mean
// pooling, and both thread counts.
TEST(FusedBackwardTest, BitIdenticalToAggregateThenApply) {
  const int64_t rows = 3000;
  for (RowOptimizerType type : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad,
                                RowOptimizerType::kAdam}) {
    for (int64_t dim : {16, 24, 32, 64, 128}) {
      for (int threads : {1, 2}) {
        ScopedNumThreads tc(threads);
        RowOptimizerOptions opt;
        opt.type = type;
        const int64_t sd = RowStateDim(type, dim);
        std::vector<float> w_fused = RandomTable(dim, rows, dim), w_split = w_fused;
        std::vector<float> s_fused(rows * sd, 0.25f), s_split = s_fused;
        EmbeddingWorkspace ws_fused, ws_split;
        for (int64_t step = 1; step <= 2; ++step) {
          // Hot ids (range 40) make long runs; enough ids that every phase splits into chunks.
          std::vector<Source> sources = {MakeSource(60 + step, 3000, 9, rows, dim, true),
                                         MakeSource(70 + step, 2000, 9, 40, dim, false, 3)};
          std::vector<BagGradients> views = {sources[0].View(), sources[1].View()};
          RowUpdateArgs fused{w_fused.data(), sd > 0 ? s_fused.data() : nullptr, dim, opt, 0.02f,
                              step};
          RowUpdateArgs split = fused;
          split.weights = w_split.data();
          split.state = sd > 0 ? s_split.data() : nullptr;
          ASSERT_TRUE(FusedBackwardUpdate(DeviceContext::Cpu(), views, PoolingMode::kMean, fused,
                                          &ws_fused)
                          .ok());
          std::vector<int64_t> unique;
          std::vector<float> grads;
          ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), views, dim, PoolingMode::kMean,
                                            &ws_split, &unique, &grads)
                          .ok());
          ASSERT_TRUE(ApplyRowUpdates(DeviceContext::Cpu(), unique, grads.data(), split).ok());
          ASSERT_EQ(ws_fused.unique_slots, unique);
        }
        const std::vector<float> w0 = RandomTable(dim, rows, dim);
        ASSERT_NE(w_fused, w0) << "the update moved nothing";
        // Bitwise: memcmp-equal floats (no NaNs arise here), so == on the vectors is exact.
        EXPECT_TRUE(w_fused == w_split) << "weights, optimizer " << int(type) << " dim " << dim
                                        << " threads " << threads;
        EXPECT_TRUE(s_fused == s_split) << "state, optimizer " << int(type) << " dim " << dim
                                        << " threads " << threads;
      }
    }
  }
}

TEST(FusedBackwardTest, RejectsBadUpdateArgs) {
  std::vector<float> w(16), g(4);
  std::vector<int64_t> slots = {1};
  RowUpdateArgs args{w.data(), nullptr, 4, RowOptimizerOptions{}, 0.1f, 1};
  absl::Status st = ApplyRowUpdates(DeviceContext::Cpu(), slots, g.data(), args);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("state is null"));
  args.optimizer.type = RowOptimizerType::kSgd;
  args.step = 0;
  EXPECT_THAT(ApplyRowUpdates(DeviceContext::Cpu(), slots, g.data(), args).message(),
              HasSubstr("step 0"));
  args.step = 1;
  g = {1, 2, 3, 4};
  ASSERT_TRUE(ApplyRowUpdates(DeviceContext::Cpu(), slots, g.data(), args).ok());
  EXPECT_FLOAT_EQ(w[4 + 3], -0.4f);
  EXPECT_EQ(w[0], 0.0f);
}

}  // namespace
}  // namespace tessera
