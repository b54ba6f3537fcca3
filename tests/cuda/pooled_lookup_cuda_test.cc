// The embedding CUDA twin against the CPU twin (embedding/pooled_lookup.h) on the same random
// inputs: pooled forward (sum, mean, per-id weights, float4 and scalar paths, absolute offsets,
// empty bags), the fused backward for SGD, row-wise AdaGrad and Adam (weights and optimizer
// state), gradient aggregation, determinism, error paths, and the input-dist id dedup and
// bucketisation against host references. Outputs are poisoned with NaN (or -1) first.
//
// Tolerances: every output is a sum of at most ~40 products of values in [-1, 1) taken in the
// same order by both twins; they differ only by fused multiply-adds (and powf/sqrtf ulps for
// the optimizers), so rtol 2e-5 with atol 2e-6 leaves ample margin while any indexing or
// ordering mistake (errors of order 1e-1) fails.
#include "embedding/pooled_lookup_cuda.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "embedding/pooled_lookup.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_testing::CudaTest;
using cuda_testing::ExpectNear;
using cuda_testing::Poisoned;
using cuda_testing::RandomFloats;
using cuda_testing::ToDevice;
using cuda_testing::ToHost;

constexpr double kRtol = 2e-5;
constexpr double kAtol = 2e-6;

struct Bags {
  std::vector<int64_t> offsets;  // absolute: start at `lead`
  std::vector<int64_t> indices;  // `lead` unused entries first
  std::vector<float> weights;
};

// num_bags bags of 0..max_len ids, half of them drawn from 8 hot rows (long runs in the backward).
Bags MakeBags(int64_t num_bags, int64_t rows, int max_len, uint64_t seed, int64_t lead = 5) {
  CounterRng rng(seed, 3);
  Bags b;
  for (int64_t i = 0; i < lead; ++i) b.indices.push_back(static_cast<int64_t>(rng.NextBelow(rows)));
  b.offsets.push_back(lead);
  for (int64_t i = 0; i < num_bags; ++i) {
    const int len = static_cast<int>(rng.NextBelow(max_len + 1));
    for (int k = 0; k < len; ++k) {
      const bool hot = rng.NextUniform() < 0.5f;
      b.indices.push_back(
          static_cast<int64_t>(hot ? rng.NextBelow(8) * 97 % rows : rng.NextBelow(rows)));
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  b.weights = RandomFloats(static_cast<int64_t>(b.indices.size()), seed + 1, 0.25f, 1.5f);
  return b;
}

struct ForwardCase {
  int64_t dim;
  int64_t out_pad;
  PoolingMode pooling;
  bool weighted;
};

class PooledForwardCuda : public CudaTest, public ::testing::WithParamInterface<ForwardCase> {};

TEST_P(PooledForwardCuda, MatchesCpuTwin) {
  const ForwardCase c = GetParam();
  const int64_t rows = 3000, num_bags = 777, stride = c.dim + c.out_pad;
  const Bags bags = MakeBags(num_bags, rows, 12, 100 + c.dim);
  const std::vector<float> table = RandomFloats(rows * c.dim, 7 + c.dim);

  PooledLookupArgs a;
  a.dim = c.dim;
  a.num_bags = num_bags;
  a.pooling = c.pooling;
  a.out_stride = stride;
  a.num_slots = rows;
  std::vector<float> want(num_bags * stride, 0.0f);
  a.weights = table.data();
  a.offsets = bags.offsets.data();
  a.indices = bags.indices.data();
  a.per_id_weights = c.weighted ? bags.weights.data() : nullptr;
  a.out = want.data();
  ASSERT_TRUE(PooledLookupForward(cpu(), a).ok());

  Buffer d_table = ToDevice(table), d_off = ToDevice(bags.offsets), d_idx = ToDevice(bags.indices),
         d_w = ToDevice(bags.weights), d_out = Poisoned<float>(num_bags * stride);
  a.weights = d_table.data<float>();
  a.offsets = d_off.data<int64_t>();
  a.indices = d_idx.data<int64_t>();
  a.per_id_weights = c.weighted ? d_w.data<float>() : nullptr;
  a.out = d_out.data<float>();
  ASSERT_TRUE(PooledLookupForward(gpu(), a).ok());
  ASSERT_TRUE(CudaSynchronize(gpu()).ok());
  const std::vector<float> got_all = ToHost<float>(d_out, num_bags * stride);
  std::vector<float> got, ref;
  for (int64_t b = 0; b < num_bags; ++b) {
    for (int64_t k = 0; k < c.dim; ++k) {
      got.push_back(got_all[b * stride + k]);
      ref.push_back(want[b * stride + k]);
    }
  }
  ExpectNear(got, ref, kRtol, kAtol, "pooled");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PooledForwardCuda,
    ::testing::Values(ForwardCase{16, 0, PoolingMode::kSum, false},
                      ForwardCase{64, 4, PoolingMode::kMean, false},
                      ForwardCase{128, 0, PoolingMode::kSum, true},
                      ForwardCase{13, 3, PoolingMode::kMean, true},   // scalar path
                      ForwardCase{200, 0, PoolingMode::kSum, true},   // > 32 lanes of float4
                      ForwardCase{8, 1, PoolingMode::kSum, false}));  // stride breaks float4

TEST_F(CudaTest, ForwardRejectsAnIndexOutOfRange) {
  Bags bags = MakeBags(50, 100, 4, 5);
  bags.indices.back() = 100;
  const std::vector<float> table = RandomFloats(100 * 8, 1);
  Buffer d_table = ToDevice(table), d_off = ToDevice(bags.offsets), d_idx = ToDevice(bags.indices),
         d_out = Poisoned<float>(50 * 8);
  PooledLookupArgs a;
  a.weights = d_table.data<float>();
  a.dim = 8;
  a.offsets = d_off.data<int64_t>();
  a.indices = d_idx.data<int64_t>();
  a.num_bags = 50;
  a.out = d_out.data<float>();
  a.out_stride = 8;
  a.num_slots = 100;
  const absl::Status st = PooledLookupForward(gpu(), a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("outside [0, 100)"), std::string::npos) << st;
}

// ---- Backward --------------------------------------------------------------------------------

struct BackwardCase {
  int64_t dim;
  RowOptimizerType type;
  PoolingMode pooling;
};

class FusedBackwardCuda : public CudaTest, public ::testing::WithParamInterface<BackwardCase> {
 protected:
  // Two features sharing one table (two sources), weighted ids, random gradients.
  void SetUpCase(const BackwardCase& c) {
    dim_ = c.dim;
    rows_ = 1500;
    bags_[0] = MakeBags(num_bags_, rows_, 10, 31 + c.dim);
    bags_[1] = MakeBags(num_bags_, rows_, 6, 57 + c.dim, 0);
    grad_ = RandomFloats(num_bags_ * 2 * dim_, 9);
    weights_ = RandomFloats(rows_ * dim_, 4);
    sd_ = RowStateDim(c.type, dim_);
    state_ = RandomFloats(std::max<int64_t>(1, rows_ * sd_), 6, 0.0f, 0.5f);  // u, v >= 0
    args_.dim = dim_;
    args_.optimizer.type = c.type;
    args_.lr = 0.05f;
    args_.step = 3;
  }
  std::vector<BagGradients> Sources(const int64_t* off0, const int64_t* idx0, const float* w0,
                                    const int64_t* off1, const int64_t* idx1, const float* w1,
                                    const float* grad) const {
    std::vector<BagGradients> s(2);
    s[0] = {off0, idx0, w0, num_bags_, grad, 2 * dim_};
    s[1] = {off1, idx1, w1, num_bags_, grad + dim_, 2 * dim_};
    return s;
  }

  int64_t dim_ = 0, rows_ = 0, sd_ = 0, num_bags_ = 600;
  Bags bags_[2];
  std::vector<float> grad_, weights_, state_;
  RowUpdateArgs args_;
};

TEST_P(FusedBackwardCuda, UpdatesMatchCpuTwin) {
  const BackwardCase c = GetParam();
  SetUpCase(c);
  // CPU twin on host copies.
  std::vector<float> w_cpu = weights_, s_cpu = state_;
  {
    RowUpdateArgs a = args_;
    a.weights = w_cpu.data();
    a.state = sd_ > 0 ? s_cpu.data() : nullptr;
    EmbeddingWorkspace ws;
    const auto src = Sources(bags_[0].offsets.data(), bags_[0].indices.data(),
                             bags_[0].weights.data(), bags_[1].offsets.data(),
                             bags_[1].indices.data(), bags_[1].weights.data(), grad_.data());
    ASSERT_TRUE(FusedBackwardUpdate(cpu(), src, c.pooling, a, &ws).ok());
  }
  Buffer o0 = ToDevice(bags_[0].offsets), i0 = ToDevice(bags_[0].indices),
         w0 = ToDevice(bags_[0].weights), o1 = ToDevice(bags_[1].offsets),
         i1 = ToDevice(bags_[1].indices), w1 = ToDevice(bags_[1].weights), g = ToDevice(grad_);
  const auto src =
      Sources(o0.data<int64_t>(), i0.data<int64_t>(), w0.data<float>(), o1.data<int64_t>(),
              i1.data<int64_t>(), w1.data<float>(), g.data<float>());
  // 1. The dispatching entry point (counts and slot range read from the device).
  {
    Buffer dw = ToDevice(weights_), ds = ToDevice(state_);
    RowUpdateArgs a = args_;
    a.weights = dw.data<float>();
    a.state = sd_ > 0 ? ds.data<float>() : nullptr;
    ASSERT_TRUE(FusedBackwardUpdate(gpu(), src, c.pooling, a, nullptr).ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    ExpectNear(ToHost<float>(dw, rows_ * dim_), w_cpu, kRtol, kAtol, "weights");
    if (sd_ > 0) ExpectNear(ToHost<float>(ds, rows_ * sd_), s_cpu, kRtol, kAtol, "state");
  }
  // 2. The explicit API with host id counts and a known slot range (no waits).
  {
    Buffer dw = ToDevice(weights_), ds = ToDevice(state_);
    RowUpdateArgs a = args_;
    a.weights = dw.data<float>();
    a.state = sd_ > 0 ? ds.data<float>() : nullptr;
    const std::vector<int64_t> counts = {bags_[0].offsets.back() - bags_[0].offsets.front(),
                                         bags_[1].offsets.back() - bags_[1].offsets.front()};
    CudaEmbeddingWorkspace ws(gpu());
    ASSERT_TRUE(FusedBackwardUpdateCuda(gpu(), src, counts, c.pooling, 11, a, &ws).ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    ExpectNear(ToHost<float>(dw, rows_ * dim_), w_cpu, kRtol, kAtol, "weights (explicit)");
    if (sd_ > 0)
      ExpectNear(ToHost<float>(ds, rows_ * sd_), s_cpu, kRtol, kAtol, "state (explicit)");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, FusedBackwardCuda,
    ::testing::Values(BackwardCase{16, RowOptimizerType::kSgd, PoolingMode::kSum},
                      BackwardCase{64, RowOptimizerType::kRowWiseAdagrad, PoolingMode::kSum},
                      BackwardCase{128, RowOptimizerType::kRowWiseAdagrad, PoolingMode::kMean},
                      BackwardCase{24, RowOptimizerType::kAdam, PoolingMode::kMean},
                      BackwardCase{13, RowOptimizerType::kAdam, PoolingMode::kSum}));

// The GPU sums a run that crosses a chunk boundary of the sorted entries (kChunkEntries = 256
// in pooled_lookup_cuda.cu; the 8 hot rows here own ~300 entries each) piece by piece, the CPU
// twin strictly in entry order: the same n terms t_i = scale_i * g_i added in two orders. For
// float recursive summation in any order (with or without fused multiply-adds),
//   |fl(sum) - sum| <= gamma_n * sum |t_i|,  gamma_n = n u / (1 - n u),  u = 2^-24
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 4.4; n - 1 additions
// plus the rounding of each product is within gamma_n). Both results obey it, so
//   |gpu - cpu| <= 2 gamma_n sum |t_i|.
// Each (row, column) gets max(that bound, the suite's rtol/atol): rows summed in one chunk keep
// the tight tolerance of identical orders, hot rows get the bound of the orders they really
// use. (A float32 simulation of this test's hot rows misses rtol 2e-5 in ~0.1% of sums.)
void ExpectAggregationNear(const std::vector<float>& got, const std::vector<float>& want,
                           const std::vector<int64_t>& slots, int64_t dim, PoolingMode pooling,
                           const Bags* bags, const std::vector<float>& grad) {
  ASSERT_EQ(got.size(), want.size());
  std::map<int64_t, size_t> row_of;
  for (size_t u = 0; u < slots.size(); ++u) row_of[slots[u]] = u;
  std::vector<double> abs_sum(want.size(), 0.0);
  std::vector<int64_t> terms(slots.size(), 0);
  for (int s = 0; s < 2; ++s) {  // the two sources of FusedBackwardCuda::Sources
    const Bags& b = bags[s];
    for (size_t bag = 0; bag + 1 < b.offsets.size(); ++bag) {
      const int64_t jb = b.offsets[bag], je = b.offsets[bag + 1];
      const double inv = (pooling == PoolingMode::kMean && je > jb) ? 1.0 / (je - jb) : 1.0;
      for (int64_t j = jb; j < je; ++j) {
        const size_t u = row_of.at(b.indices[j]);
        ++terms[u];
        const float* g = grad.data() + bag * 2 * dim + s * dim;
        for (int64_t c = 0; c < dim; ++c) {
          abs_sum[u * dim + c] += std::fabs(b.weights[j] * inv * g[c]);
        }
      }
    }
  }
  constexpr double kU = 1.0 / (1 << 24);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double n = static_cast<double>(terms[i / dim]);
    const double gamma = n * kU / (1.0 - n * kU);
    const double tol = std::max(kAtol + kRtol * std::fabs(want[i]), 2.0 * gamma * abs_sum[i]);
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "row_grads[" << i << "] (slot " << slots[i / dim] << ", " << n
                    << " terms): cuda " << got[i] << ", cpu " << want[i] << ", tolerance " << tol;
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << want.size() << " row gradients off";
}

TEST_P(FusedBackwardCuda, AggregationMatchesCpuAndIsDeterministic) {
  const BackwardCase c = GetParam();
  SetUpCase(c);
  std::vector<int64_t> cpu_slots;
  std::vector<float> cpu_grads;
  {
    EmbeddingWorkspace ws;
    const auto src = Sources(bags_[0].offsets.data(), bags_[0].indices.data(),
                             bags_[0].weights.data(), bags_[1].offsets.data(),
                             bags_[1].indices.data(), bags_[1].weights.data(), grad_.data());
    ASSERT_TRUE(
        AggregateRowGradients(cpu(), src, dim_, c.pooling, &ws, &cpu_slots, &cpu_grads).ok());
  }
  Buffer o0 = ToDevice(bags_[0].offsets), i0 = ToDevice(bags_[0].indices),
         w0 = ToDevice(bags_[0].weights), o1 = ToDevice(bags_[1].offsets),
         i1 = ToDevice(bags_[1].indices), w1 = ToDevice(bags_[1].weights), g = ToDevice(grad_);
  const auto src =
      Sources(o0.data<int64_t>(), i0.data<int64_t>(), w0.data<float>(), o1.data<int64_t>(),
              i1.data<int64_t>(), w1.data<float>(), g.data<float>());
  std::vector<int64_t> slots(3, -7);
  std::vector<float> grads(5, std::nanf(""));
  EmbeddingWorkspace unused;
  ASSERT_TRUE(AggregateRowGradients(gpu(), src, dim_, c.pooling, &unused, &slots, &grads).ok());
  EXPECT_EQ(slots, cpu_slots);
  ExpectAggregationNear(grads, cpu_grads, cpu_slots, dim_, c.pooling, bags_, grad_);
  // Same bits on a second run, through a reused workspace.
  CudaEmbeddingWorkspace ws(gpu());
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(AggregateRowGradientsCuda(gpu(), src, {}, dim_, c.pooling, 0, &ws).ok());
    auto u = ws.NumUniqueOnHost();
    ASSERT_TRUE(u.ok());
    ASSERT_EQ(*u, static_cast<int64_t>(cpu_slots.size()));
    std::vector<float> now = ToHost(ws.row_grads(), *u * dim_);
    if (run == 0) first = now;
    EXPECT_EQ(0, std::memcmp(first.data(), now.data(), sizeof(float) * now.size()));
  }
}

TEST_F(CudaTest, BackwardRejectsANegativeSlot) {
  Bags bags = MakeBags(40, 50, 4, 8, 0);
  bags.indices.back() = -3;
  const std::vector<float> grad = RandomFloats(40 * 4, 2);
  const std::vector<float> table = RandomFloats(50 * 4, 3);
  Buffer o = ToDevice(bags.offsets), i = ToDevice(bags.indices), g = ToDevice(grad),
         w = ToDevice(table);
  const std::vector<BagGradients> src = {
      {o.data<int64_t>(), i.data<int64_t>(), nullptr, 40, g.data<float>(), 4}};
  RowUpdateArgs a;
  a.weights = w.data<float>();
  a.dim = 4;
  a.optimizer.type = RowOptimizerType::kSgd;
  a.lr = 0.1f;
  const absl::Status st = FusedBackwardUpdate(gpu(), src, PoolingMode::kSum, a, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("slot -3 (negative)"), std::string::npos) << st;
  // Nothing was updated.
  ExpectNear(ToHost<float>(w, 50 * 4), table, 0.0, 0.0, "untouched table");
}

// ---- Dedup and bucketisation -----------------------------------------------------------------

std::vector<int64_t> RandomIds(int64_t n, int64_t range, uint64_t seed) {
  CounterRng rng(seed, 5);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = static_cast<int64_t>(rng.NextBelow(range)) * 1000003 % (range * 7);
  return ids;
}

TEST_F(CudaTest, DedupMatchesHostReference) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100000}}) {
    const std::vector<int64_t> ids = RandomIds(n, std::max<int64_t>(1, n / 4), 77 + n);
    const std::set<int64_t> want_set(ids.begin(), ids.end());
    const std::vector<int64_t> want(want_set.begin(), want_set.end());
    Buffer d_ids = ToDevice(ids), unique = Poisoned<int64_t>(n), inverse = Poisoned<int64_t>(n),
           count = Poisoned<int64_t>(1);
    CudaEmbeddingWorkspace ws(gpu());
    ASSERT_TRUE(DedupIdsCuda(gpu(), d_ids.data<int64_t>(), n, 0, &ws, unique.data<int64_t>(),
                             inverse.data<int64_t>(), count.data<int64_t>())
                    .ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    const int64_t u = ToHost<int64_t>(count, 1)[0];
    ASSERT_EQ(u, static_cast<int64_t>(want.size())) << "n " << n;
    EXPECT_EQ(ToHost<int64_t>(unique, u), want);
    const std::vector<int64_t> inv = ToHost<int64_t>(inverse, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(inv[i] >= 0 && inv[i] < u) << i;
      ASSERT_EQ(want[inv[i]], ids[i]) << i;
    }
  }
}

TEST_F(CudaTest, DedupRejectsANegativeId) {
  std::vector<int64_t> ids = {4, 9, -2, 4};
  Buffer d_ids = ToDevice(ids), unique = Poisoned<int64_t>(4), inverse = Poisoned<int64_t>(4),
         count = Poisoned<int64_t>(1);
  CudaEmbeddingWorkspace ws(gpu());
  const absl::Status st =
      DedupIdsCuda(gpu(), d_ids.data<int64_t>(), 4, 0, &ws, unique.data<int64_t>(),
                   inverse.data<int64_t>(), count.data<int64_t>());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("ids[2] = -2"), std::string::npos) << st;
}

TEST_F(CudaTest, BucketizeMatchesStableHostReference) {
  for (bool modulo : {false, true}) {
    const int buckets = 5;
    const int64_t rows_per_bucket = 2000, n = 30000;
    CounterRng rng(modulo ? 2 : 1, 9);
    std::vector<int64_t> ids(n);
    for (auto& id : ids) id = static_cast<int64_t>(rng.NextBelow(buckets * rows_per_bucket - 3));
    // Host reference: stable partition by owner.
    std::vector<std::vector<int64_t>> by_owner(buckets), pos_by_owner(buckets);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t owner = modulo ? ids[i] % buckets : ids[i] / rows_per_bucket;
      by_owner[owner].push_back(modulo ? ids[i] / buckets : ids[i] - owner * rows_per_bucket);
      pos_by_owner[owner].push_back(i);
    }
    std::vector<int64_t> want_local, want_pos, want_offsets = {0};
    for (int b = 0; b < buckets; ++b) {
      want_local.insert(want_local.end(), by_owner[b].begin(), by_owner[b].end());
      want_pos.insert(want_pos.end(), pos_by_owner[b].begin(), pos_by_owner[b].end());
      want_offsets.push_back(static_cast<int64_t>(want_local.size()));
    }
    Buffer d_ids = ToDevice(ids), local = Poisoned<int64_t>(n), pos = Poisoned<int64_t>(n),
           offsets = Poisoned<int64_t>(buckets + 1);
    BucketizeArgs a;
    a.ids = d_ids.data<int64_t>();
    a.n = n;
    a.num_buckets = buckets;
    a.rows_per_bucket = rows_per_bucket;
    a.modulo = modulo;
    a.local_ids = local.data<int64_t>();
    a.positions = pos.data<int64_t>();
    a.bucket_offsets = offsets.data<int64_t>();
    CudaEmbeddingWorkspace ws(gpu());
    ASSERT_TRUE(BucketizeIdsCuda(gpu(), a, &ws).ok());
    ASSERT_TRUE(CudaSynchronize(gpu()).ok());
    EXPECT_EQ(ToHost<int64_t>(offsets, buckets + 1), want_offsets) << "modulo " << modulo;
    EXPECT_EQ(ToHost<int64_t>(local, n), want_local) << "modulo " << modulo;
    EXPECT_EQ(ToHost<int64_t>(pos, n), want_pos) << "modulo " << modulo;
  }
}

}  // namespace
}  // namespace tessera
