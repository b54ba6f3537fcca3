// EmbeddingCollection's bf16 hand-off (ForwardBf16 / BackwardUpdateBf16, every table with
// output_dtype bf16): its bf16 outputs are the values the fp32 API widens, and its update from a
// bf16 d_out has the bits of the fp32 API's update from that d_out widened, over several steps
// at 1 and 2 threads (whole tables per thread, and a table split across threads); a collection
// with an fp32-output table is refused naming the table.
#include <cmath>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "embedding/embedding_collection.h"
#include "embedding/row_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace rd = row_dtype;
using ::testing::HasSubstr;

// Three bf16 / fp16 tables, output_dtype bf16 except table c's (`c_output`); table a serves
// two features.
EmbeddingCollectionOptions Options(RowDtype c_output) {
  EmbeddingCollectionOptions o;
  o.num_features = 4;
  o.seed = 4;
  o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  TableConfig a, b, c;
  a.name = "a";
  a.num_rows = 50;
  a.dim = 16;
  a.features = {0, 2};
  a.storage.dtype = RowDtype::kBf16;
  a.storage.rounding = RowRounding::kNearest;
  b.name = "b";
  b.num_rows = 3000;
  b.dim = 32;
  b.features = {1};
  b.storage.dtype = RowDtype::kF16;
  c.name = "c";
  c.num_rows = 40;
  c.dim = 24;
  c.features = {3};
  c.storage.dtype = RowDtype::kBf16;
  a.output_dtype = b.output_dtype = RowDtype::kBf16;
  c.output_dtype = c_output;
  o.tables = {a, b, c};
  return o;
}

// `long_bags`: feature 1's bags hold ~24 ids each (over 16384 ids in all: table b then runs
// alone with its kernels split across the threads, EmbeddingCollection::RunTables).
KeyedJagged MakeBatch(int64_t batch, bool long_bags, uint64_t seed) {
  KeyedJagged kj;
  kj.num_features = 4;
  kj.batch_size = batch;
  kj.offsets.push_back(0);
  CounterRng rng(seed, 0);
  const int64_t rows[4] = {50, 3000, 50, 40};
  for (int f = 0; f < 4; ++f) {
    for (int64_t s = 0; s < batch; ++s) {
      const int len = f == 1 && long_bags ? 16 + static_cast<int>(rng.NextBelow(17))
                                          : static_cast<int>(rng.NextBelow(4));
      for (int j = 0; j < len; ++j) kj.values.push_back(rng.NextBelow(rows[f]));
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  return kj;
}

TEST(Bf16Handoff, HasTheBitsOfTheFp32Api) {
  for (bool long_bags : {false, true}) {
    for (int threads : {1, 2}) {
      SetNumThreads(threads);
      SCOPED_TRACE(::testing::Message() << "long bags " << long_bags << " threads " << threads);
      auto via16 = EmbeddingCollection::Create(Options(RowDtype::kBf16), DeviceContext::Cpu());
      auto via32 = EmbeddingCollection::Create(Options(RowDtype::kBf16), DeviceContext::Cpu());
      ASSERT_TRUE(via16.ok() && via32.ok()) << via16.status() << via32.status();
      EmbeddingCollection& c16 = **via16;
      EmbeddingCollection& c32 = **via32;
      ASSERT_TRUE(c16.bf16_outputs());
      const int64_t width = c16.output_dim();
      for (int step = 1; step <= 3; ++step) {
        const KeyedJagged kj = MakeBatch(long_bags ? 700 : 64, long_bags, 7 + step);
        const int64_t n = kj.batch_size * width;
        std::vector<uint16_t> o16(n, 0xabcd);
        std::vector<float> o32(n);
        ASSERT_TRUE(c16.ForwardBf16(kj, o16.data()).ok());
        ASSERT_TRUE(c32.Forward(kj, o32.data()).ok());
        std::vector<uint16_t> d16(n);
        std::vector<float> d32(n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(rd::Bf16ToFloat(o16[i]), o32[i]) << "step " << step << " value " << i;
          d16[i] = rd::FloatToBf16(std::sin(0.1f * static_cast<float>(i + step)));
          d32[i] = rd::Bf16ToFloat(d16[i]);
        }
        ASSERT_TRUE(c16.BackwardUpdateBf16(d16.data(), 0.1f, step).ok());
        ASSERT_TRUE(c32.BackwardUpdate(d32.data(), 0.1f, step).ok());
      }
      for (int t = 0; t < c16.num_tables(); ++t) {
        const TableConfig& tc = c16.table(t);
        std::vector<float> w16(tc.num_rows * tc.dim), w32(w16.size());
        std::vector<float> s16(tc.num_rows), s32(tc.num_rows);
        ASSERT_TRUE(c16.store(t).ReadRows(0, tc.num_rows, w16.data(), s16.data()).ok());
        ASSERT_TRUE(c32.store(t).ReadRows(0, tc.num_rows, w32.data(), s32.data()).ok());
        EXPECT_EQ(w16, w32) << tc.name;
        EXPECT_EQ(s16, s32) << tc.name;
      }
    }
  }
  SetNumThreads(1);
}

// A step may take its output from one API and its gradient through the other.
TEST(Bf16Handoff, MixesWithTheFp32Api) {
  auto c = EmbeddingCollection::Create(Options(RowDtype::kBf16), DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  const KeyedJagged kj = MakeBatch(32, false, 3);
  const int64_t n = kj.batch_size * (*c)->output_dim();
  std::vector<uint16_t> o16(n), d16(n, rd::FloatToBf16(0.5f));
  std::vector<float> o32(n), d32(n, 0.5f);
  ASSERT_TRUE((*c)->ForwardBf16(kj, o16.data()).ok());
  ASSERT_TRUE((*c)->BackwardUpdate(d32.data(), 0.1f, 1).ok());
  ASSERT_TRUE((*c)->Forward(kj, o32.data()).ok());
  ASSERT_TRUE((*c)->BackwardUpdateBf16(d16.data(), 0.1f, 2).ok());
  absl::Status st = (*c)->BackwardUpdateBf16(d16.data(), 0.1f, 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("BackwardUpdateBf16: no Forward"));
}

TEST(Bf16Handoff, RefusesAnFp32OutputTableNamingIt) {
  auto c = EmbeddingCollection::Create(Options(RowDtype::kF32), DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->bf16_outputs());
  const KeyedJagged kj = MakeBatch(8, false, 1);
  std::vector<uint16_t> o16(kj.batch_size * (*c)->output_dim());
  absl::Status st = (*c)->ForwardBf16(kj, o16.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("table 'c'"));
  EXPECT_THAT(st.message(), HasSubstr("output_dtype fp32"));
  // The fp32 API still serves it (a Forward, then the bf16 update refused likewise).
  std::vector<float> o32(o16.size());
  ASSERT_TRUE((*c)->Forward(kj, o32.data()).ok());
  st = (*c)->BackwardUpdateBf16(o16.data(), 0.1f, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("table 'c'"));
  EXPECT_TRUE((*c)->BackwardUpdate(o32.data(), 0.1f, 1).ok());
}

TEST(Bf16Handoff, RefusesANullOutput) {
  auto c = EmbeddingCollection::Create(Options(RowDtype::kBf16), DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  const KeyedJagged kj = MakeBatch(8, false, 1);
  absl::Status st = (*c)->ForwardBf16(kj, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("ForwardBf16: null out"));
}

}  // namespace
}  // namespace tessera
