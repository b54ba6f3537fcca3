// A dynamic table trains exactly as a static one when every key is admitted at once and none
// is evicted: a key's row starts as InitRow of (seed, table, key), which is the static table's
// row `key`, and the fused update is per row. So with keys below the static table's size the two
// collections give the same pooled outputs and the same rows, bit for bit, for every optimizer
// and storage dtype. Also: unseen ids in an evaluation forward read zero rows.
#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/embedding_collection.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr int64_t kRows = 512;
constexpr int64_t kDim = 8;
constexpr int64_t kBatch = 32;

EmbeddingCollectionOptions Options(bool dynamic, RowOptimizerType opt, RowDtype dtype) {
  EmbeddingCollectionOptions o;
  TableConfig t;
  t.name = "t0";
  t.num_rows = kRows;
  t.dim = kDim;
  t.features = {0, 1};
  t.pooling = PoolingMode::kSum;
  t.storage.dtype = dtype;
  t.dynamic.enabled = dynamic;
  o.tables.push_back(t);
  TableConfig u = t;
  u.name = "t1";
  u.features = {2};
  u.pooling = PoolingMode::kMean;
  u.dynamic.enabled = false;  // a static table beside the dynamic one
  o.tables.push_back(u);
  o.num_features = 3;
  o.optimizer.type = opt;
  o.seed = 99;
  return o;
}

KeyedJagged MakeBatch(CounterRng& rng) {
  KeyedJagged b;
  b.num_features = 3;
  b.batch_size = kBatch;
  b.offsets.assign(1, 0);
  for (int64_t bag = 0; bag < 3 * kBatch; ++bag) {
    const int64_t n = static_cast<int64_t>(rng.NextBelow(4));
    for (int64_t j = 0; j < n; ++j) {
      const double u = rng.NextUniformDouble();
      b.values.push_back(static_cast<int64_t>(std::pow(double(kRows), u)) - 1);
    }
    b.offsets.push_back(static_cast<int64_t>(b.values.size()));
  }
  return b;
}

// Rows `keys` of table 0 as fp32.
std::vector<float> StaticRows(EmbeddingCollection& c, const std::vector<uint64_t>& keys) {
  std::vector<float> out;
  std::vector<float> row(kDim);
  for (uint64_t k : keys) {
    EXPECT_TRUE(c.store(0).ReadRows(static_cast<int64_t>(k), 1, row.data(), nullptr).ok());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

void CheckSameAsStatic(RowOptimizerType opt, RowDtype dtype) {
  auto stat = EmbeddingCollection::Create(Options(false, opt, dtype), DeviceContext::Cpu());
  auto dyn = EmbeddingCollection::Create(Options(true, opt, dtype), DeviceContext::Cpu());
  ASSERT_TRUE(stat.ok()) << stat.status();
  ASSERT_TRUE(dyn.ok()) << dyn.status();
  auto* store = dynamic_cast<DynamicRowStore*>(&(*dyn)->store(0));
  ASSERT_NE(store, nullptr);
  CounterRng rng(4, 4);
  const int64_t width = (*stat)->output_dim();
  std::vector<float> out_s(kBatch * width), out_d(kBatch * width), grad(kBatch * width);
  for (int64_t step = 1; step <= 30; ++step) {
    const KeyedJagged b = MakeBatch(rng);
    ASSERT_TRUE((*stat)->Forward(b, out_s.data()).ok());
    ASSERT_TRUE((*dyn)->Forward(b, out_d.data()).ok());
    ASSERT_EQ(out_s, out_d) << "step " << step;
    for (float& g : grad) g = static_cast<float>(rng.NextUniformDouble() - 0.5);
    ASSERT_TRUE((*stat)->BackwardUpdate(grad.data(), 0.05f, step).ok());
    ASSERT_TRUE((*dyn)->BackwardUpdate(grad.data(), 0.05f, step).ok());
  }
  DynamicTableState st;
  ASSERT_TRUE(store->SaveState(true, &st).ok());
  ASSERT_GT(st.keys.size(), 50u);
  std::vector<float> dyn_rows(st.keys.size() * kDim);
  RowValuesToFloat(dtype, st.weights.data(), static_cast<int64_t>(dyn_rows.size()),
                   dyn_rows.data());
  EXPECT_EQ(dyn_rows, StaticRows(**stat, st.keys));
  EXPECT_EQ(store->stats().unadmitted_lookups, 0);
  EXPECT_EQ(store->stats().occupancy, static_cast<int64_t>(st.keys.size()));
}

TEST(DynamicCollectionTest, SameAsStaticRowWiseAdagrad) {
  CheckSameAsStatic(RowOptimizerType::kRowWiseAdagrad, RowDtype::kF32);
}
TEST(DynamicCollectionTest, SameAsStaticSgd) {
  CheckSameAsStatic(RowOptimizerType::kSgd, RowDtype::kF32);
}
TEST(DynamicCollectionTest, SameAsStaticAdam) {
  CheckSameAsStatic(RowOptimizerType::kAdam, RowDtype::kF32);
}
TEST(DynamicCollectionTest, SameAsStaticBf16) {
  CheckSameAsStatic(RowOptimizerType::kRowWiseAdagrad, RowDtype::kBf16);
}
TEST(DynamicCollectionTest, SameAsStaticF16Adam) {
  CheckSameAsStatic(RowOptimizerType::kAdam, RowDtype::kF16);
}

TEST(DynamicCollectionTest, HugeKeysAndUnseenKeysInEvaluation) {
  auto c = EmbeddingCollection::Create(
      Options(true, RowOptimizerType::kRowWiseAdagrad, RowDtype::kF32), DeviceContext::Cpu());
  ASSERT_TRUE(c.ok()) << c.status();
  KeyedJagged b;
  b.num_features = 3;
  b.batch_size = 1;
  b.values = {int64_t{1} << 45, -7, 3};  // a key of 2^45 and one above 2^63 for feature 0 and 1
  b.offsets = {0, 1, 2, 3};
  std::vector<float> out((*c)->output_dim()), grad((*c)->output_dim(), 0.1f);
  ASSERT_TRUE((*c)->Forward(b, out.data()).ok());
  std::vector<float> want(kDim);
  InitRow(RowInit{}, 99, 0, kRows, int64_t{1} << 45, kDim, want.data());
  for (int k = 0; k < kDim; ++k) EXPECT_EQ(out[k], want[k]);
  ASSERT_TRUE((*c)->BackwardUpdate(grad.data(), 0.05f, 1).ok());
  // Evaluation with a key never trained: its bag pools the zero row, the table is unchanged.
  b.values = {12345678901, -7, 3};
  (*c)->set_training(false);
  ASSERT_TRUE((*c)->Forward(b, out.data()).ok());
  for (int k = 0; k < kDim; ++k) EXPECT_EQ(out[k], 0.0f);
  ASSERT_TRUE((*c)->Forward(b, out.data()).ok());  // ends the evaluation step
  auto* store = dynamic_cast<DynamicRowStore*>(&(*c)->store(0));
  EXPECT_EQ(store->stats().occupancy, 2);
  EXPECT_EQ(store->stats().unadmitted_lookups, 2);
}

}  // namespace
}  // namespace tessera
