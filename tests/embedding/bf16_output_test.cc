// 16-bit tables with bf16 pooled outputs and gradients (FBGEMM's output_dtype BF16,
// PooledLookupArgs::out_bf16, BagGradients::grad_bf16, TableConfig::output_dtype): the lookup's
// bf16 outputs are the fp32 pools rounded to nearest even, bit for bit; the update from bf16
// gradients has the bits of the fp32 update from the widened gradients, for any thread count;
// the collection wires both; bad combinations are refused naming what is wrong.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "embedding/embedding_collection.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace rd = row_dtype;
using ::testing::HasSubstr;

struct Bags {
  std::vector<int64_t> offsets, indices;
  std::vector<float> weights;
};

Bags MakeBags(int64_t num_bags, int64_t rows, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  Bags b;
  b.offsets.push_back(0);
  for (int64_t i = 0; i < num_bags; ++i) {
    const int len = static_cast<int>(rng() % (max_len + 1));
    for (int j = 0; j < len; ++j) {
      // Zipf-ish: a few hot rows, so runs of several ids exist.
      const int64_t r = (rng() % 4 == 0) ? static_cast<int64_t>(rng() % 5)
                                         : static_cast<int64_t>(rng() % rows);
      b.indices.push_back(r);
      b.weights.push_back(0.25f + static_cast<float>(rng() % 1000) / 1000.0f);
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  return b;
}

std::vector<uint16_t> RandomTable(RowDtype d, int64_t rows, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(rows * dim);
  for (float& x : v) x = u(rng);
  std::vector<uint16_t> t(v.size());
  RowValuesFromFloat(d, v.data(), static_cast<int64_t>(v.size()), t.data());
  return t;
}

class Bf16OutputTest : public ::testing::TestWithParam<RowDtype> {};

TEST_P(Bf16OutputTest, LookupRoundsThePoolToNearestBf16) {
  const RowDtype d = GetParam();
  const int64_t rows = 300;
  // 16 and 128 take the AVX-512 path where the CPU has it, 24 the portable loop.
  for (int64_t dim : {16, 24, 128}) {
    for (bool weighted : {false, true}) {
      for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
        std::vector<uint16_t> table = RandomTable(d, rows, dim, 3);
        table[7 * dim + 1] = d == RowDtype::kBf16 ? 0x7fc0 : 0x7e00;  // a NaN stays visible
        const Bags bags = MakeBags(200, rows, 4, 5);
        const int64_t nb = static_cast<int64_t>(bags.offsets.size()) - 1;
        const int64_t stride = dim + 3;  // a wider output row, as the collection's
        PooledLookupArgs a;
        a.weights = table.data();
        a.weight_dtype = d;
        a.dim = dim;
        a.offsets = bags.offsets.data();
        a.indices = bags.indices.data();
        a.per_id_weights = weighted ? bags.weights.data() : nullptr;
        a.num_bags = nb;
        a.pooling = mode;
        a.out_stride = stride;
        std::vector<float> out(nb * stride, -1.0f);
        a.out = out.data();
        ASSERT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
        std::vector<uint16_t> out16(nb * stride, 0xabcd);
        a.out = nullptr;
        a.out_bf16 = out16.data();
        ASSERT_TRUE(PooledLookupForward(DeviceContext::Cpu(), a).ok());
        int nans = 0;
        for (int64_t b = 0; b < nb; ++b) {
          for (int64_t k = 0; k < stride; ++k) {
            if (k >= dim) {
              ASSERT_EQ(out16[b * stride + k], 0xabcd) << "wrote past dim";
              continue;
            }
            const float x = out[b * stride + k];
            const uint16_t got = out16[b * stride + k];
            if (std::isnan(x)) {
              ASSERT_TRUE(std::isnan(rd::Bf16ToFloat(got)));
              ++nans;
              continue;
            }
            ASSERT_EQ(got, rd::FloatToBf16(x))
                << RowDtypeName(d) << " dim " << dim << " bag " << b << " k " << k;
          }
        }
        EXPECT_GT(nans, 0);
      }
    }
  }
}

// Two sources (a table serving two features), per-id weights or not, mean or sum: the update from
// bf16 gradients equals the fp32 update from the widened gradients, bit for bit, at 1-3 threads;
// AggregateRowGradients likewise.
TEST_P(Bf16OutputTest, UpdateFromBf16GradientsHasTheBitsOfTheWidenedGradients) {
  const RowDtype d = GetParam();
  const int64_t rows = 400;
  for (int64_t dim : {16, 24, 128}) {
    for (bool weighted : {false, true}) {
      for (RowOptimizerType opt : {RowOptimizerType::kRowWiseAdagrad, RowOptimizerType::kSgd}) {
        const std::vector<uint16_t> table0 = RandomTable(d, rows, dim, 9);
        std::vector<float> state0(rows, 0.01f);
        const Bags b1 = MakeBags(300, rows, 6, 11), b2 = MakeBags(300, rows, 3, 12);
        const int64_t nb = 300, stride = 2 * dim;
        std::mt19937 rng(13);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> grad(nb * stride);
        for (float& g : grad) g = u(rng);
        std::vector<uint16_t> grad16(grad.size());
        RowValuesFromFloat(RowDtype::kBf16, grad.data(), static_cast<int64_t>(grad.size()),
                           grad16.data());
        std::vector<float> widened(grad.size());
        RowValuesToFloat(RowDtype::kBf16, grad16.data(), static_cast<int64_t>(grad.size()),
                         widened.data());
        auto sources = [&](bool bf16) {
          std::vector<BagGradients> s(2);
          const Bags* bb[2] = {&b1, &b2};
          for (int i = 0; i < 2; ++i) {
            s[i].offsets = bb[i]->offsets.data();
            s[i].indices = bb[i]->indices.data();
            s[i].per_id_weights = weighted ? bb[i]->weights.data() : nullptr;
            s[i].num_bags = nb;
            s[i].grad_stride = stride;
            if (bf16) {
              s[i].grad_bf16 = grad16.data() + i * dim;
            } else {
              s[i].grad = widened.data() + i * dim;
            }
          }
          return s;
        };
        RowUpdateArgs args;
        args.dim = dim;
        args.weight_dtype = d;
        args.optimizer.type = opt;
        args.rounding_seed = 5;
        args.lr = 0.05f;
        args.step = 2;
        auto run = [&](bool bf16, int threads, std::vector<float>* state_out) {
          ScopedNumThreads tc(threads);
          std::vector<uint16_t> table = table0;
          std::vector<float> state = state0;
          args.weights = table.data();
          args.state = state.data();
          EmbeddingWorkspace ws;
          const std::vector<BagGradients> s = sources(bf16);
          EXPECT_TRUE(FusedBackwardUpdate(DeviceContext::Cpu(), s, PoolingMode::kMean, args, &ws)
                          .ok());
          *state_out = state;
          return table;
        };
        std::vector<float> ref_state, got_state;
        const std::vector<uint16_t> ref = run(false, 1, &ref_state);
        ASSERT_NE(ref, table0);
        for (int threads : {1, 2, 3}) {
          EXPECT_EQ(run(true, threads, &got_state), ref)
              << RowDtypeName(d) << " dim " << dim << " threads " << threads;
          EXPECT_EQ(got_state, ref_state);
        }
        std::vector<int64_t> u32, u16;
        std::vector<float> s32, s16;
        EmbeddingWorkspace ws;
        ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), sources(false), dim,
                                          PoolingMode::kSum, &ws, &u32, &s32)
                        .ok());
        ASSERT_TRUE(AggregateRowGradients(DeviceContext::Cpu(), sources(true), dim,
                                          PoolingMode::kSum, &ws, &u16, &s16)
                        .ok());
        EXPECT_EQ(u16, u32);
        EXPECT_EQ(s16, s32);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Bf16OutputTest,
                         ::testing::Values(RowDtype::kF16, RowDtype::kBf16),
                         [](const auto& info) { return std::string(RowDtypeName(info.param)); });

TEST(Bf16OutputErrors, RefusedCombinations) {
  std::vector<float> w32(16 * 4, 0.5f), out(16);
  std::vector<uint16_t> out16(16);
  int64_t offsets[2] = {0, 1}, indices[1] = {2};
  PooledLookupArgs a;
  a.weights = w32.data();
  a.dim = 16;
  a.offsets = offsets;
  a.indices = indices;
  a.num_bags = 1;
  a.out_stride = 16;
  a.out_bf16 = out16.data();
  absl::Status st = PooledLookupForward(DeviceContext::Cpu(), a);
  EXPECT_THAT(st.message(), HasSubstr("need a 16-bit table"));
  a.weight_dtype = RowDtype::kBf16;
  a.out = out.data();
  st = PooledLookupForward(DeviceContext::Cpu(), a);
  EXPECT_THAT(st.message(), HasSubstr("both out and out_bf16"));

  std::vector<float> g(16);
  std::vector<uint16_t> g16(16);
  BagGradients s0{offsets, indices, nullptr, 1, g.data(), 16};
  BagGradients s1 = s0;
  s1.grad = nullptr;
  s1.grad_bf16 = g16.data();
  std::vector<uint16_t> w16(16 * 4);
  std::vector<float> state(4);
  RowUpdateArgs args;
  args.weights = w16.data();
  args.state = state.data();
  args.weight_dtype = RowDtype::kBf16;
  args.dim = 16;
  args.lr = 0.1f;
  EmbeddingWorkspace ws;
  BagGradients both[2] = {s0, s1};
  st = FusedBackwardUpdate(DeviceContext::Cpu(), {both, 2}, PoolingMode::kSum, args, &ws);
  EXPECT_THAT(st.message(), HasSubstr("one kind per call"));
}

// The collection: a bf16 table with output_dtype bf16 against the same table with fp32 outputs.
// Its outputs are the fp32 ones rounded to bf16; its update is the fp32-output collection's
// update from d_out rounded to bf16; the fp32-output table beside it is unchanged.
TEST(Bf16OutputCollection, OutputsAndUpdateAreTheRoundedFp32Ones) {
  auto make = [](RowDtype out_dtype) {
    EmbeddingCollectionOptions o;
    o.num_features = 3;
    o.seed = 4;
    o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
    TableConfig a, b;
    a.name = "a";
    a.num_rows = 50;
    a.dim = 16;
    a.features = {0, 2};
    a.storage.dtype = RowDtype::kBf16;
    a.storage.rounding = RowRounding::kNearest;
    a.output_dtype = out_dtype;
    b.name = "b";
    b.num_rows = 30;
    b.dim = 32;
    b.features = {1};
    b.storage.dtype = RowDtype::kF16;
    o.tables = {a, b};
    auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  auto c16 = make(RowDtype::kBf16);
  auto c32 = make(RowDtype::kF32);
  KeyedJagged kj;
  kj.num_features = 3;
  kj.batch_size = 64;
  kj.offsets.push_back(0);
  CounterRng rng(7, 0);
  for (int f = 0; f < 3; ++f) {
    for (int64_t s = 0; s < kj.batch_size; ++s) {
      const int len = static_cast<int>(rng.NextBelow(4));
      for (int j = 0; j < len; ++j) kj.values.push_back(rng.NextBelow(f == 1 ? 30 : 50));
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  const int64_t width = c16->output_dim();
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> o16(kj.batch_size * width), o32(kj.batch_size * width);
    ASSERT_TRUE(c16->Forward(kj, o16.data()).ok());
    ASSERT_TRUE(c32->Forward(kj, o32.data()).ok());
    std::vector<float> d(kj.batch_size * width), d_rounded(d.size());
    for (int64_t s = 0; s < kj.batch_size; ++s) {
      for (int64_t k = 0; k < width; ++k) {
        const int64_t i = s * width + k;
        const bool in_a = k < 16 || k >= 16 + 32;  // features 0 and 2 are table a's
        EXPECT_EQ(o16[i], in_a ? rd::Bf16ToFloat(rd::FloatToBf16(o32[i])) : o32[i])
            << "step " << step << " sample " << s << " column " << k;
        d[i] = std::sin(0.1f * static_cast<float>(i + step));
        d_rounded[i] = in_a ? rd::Bf16ToFloat(rd::FloatToBf16(d[i])) : d[i];
      }
    }
    ASSERT_TRUE(c16->BackwardUpdate(d.data(), 0.1f, step).ok());
    ASSERT_TRUE(c32->BackwardUpdate(d_rounded.data(), 0.1f, step).ok());
  }
  for (int t = 0; t < 2; ++t) {
    const TableConfig& tc = c16->table(t);
    std::vector<float> w16(tc.num_rows * tc.dim), w32(w16.size());
    ASSERT_TRUE(c16->store(t).ReadRows(0, tc.num_rows, w16.data(), nullptr).ok());
    ASSERT_TRUE(c32->store(t).ReadRows(0, tc.num_rows, w32.data(), nullptr).ok());
    EXPECT_EQ(w16, w32) << tc.name;
  }
}

TEST(Bf16OutputCollection, RefusesAnFp32TableNamingIt) {
  EmbeddingCollectionOptions o;
  o.num_features = 1;
  TableConfig t;
  t.name = "clicks";
  t.num_rows = 10;
  t.dim = 8;
  t.features = {0};
  t.output_dtype = RowDtype::kBf16;
  o.tables = {t};
  auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("table 'clicks'"));
  EXPECT_THAT(c.status().message(), HasSubstr("output_dtype bf16 needs 16-bit storage"));
}

}  // namespace
}  // namespace tessera
