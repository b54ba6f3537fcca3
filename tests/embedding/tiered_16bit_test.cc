// The RocksDB tier with 16-bit weights: training through a small cache (evictions, write-back,
// lazy init, prefetch) gives bit-identical rows to an in-memory 16-bit table, and the bytes
// survive a checkpoint and restore; the layout record refuses a reopen with another dtype.
#include <algorithm>
#include <cstring>
#include <vector>

#include "embedding/pooled_lookup.h"
#include "embedding/row_store.h"
#include "embedding/tiered_row_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::SkewedIdStream;
using ::tessera::testing::TempDir;
using ::tessera::testing::TestGrad;

constexpr int64_t kRows = 2000, kDim = 16;

TieredRowStoreOptions TierOptions(const std::string& path, RowDtype d) {
  TieredRowStoreOptions o;
  o.path = path;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.seed = 5;
  o.table_id = 1;
  o.cache_rows = 100;
  o.reader_threads = 2;
  o.dtype = d;
  return o;
}

std::unique_ptr<RowStore> Memory(RowDtype d) {
  InMemoryRowStoreOptions o;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.seed = 5;
  o.table_id = 1;
  o.dtype = d;
  return std::move(CreateInMemoryRowStore(o)).value();
}

// One step: Resolve the distinct ids, a stochastic-rounding row-wise AdaGrad update through
// ApplyRowUpdates, EndStep.
void Step(RowStore* store, int64_t step, std::vector<int64_t> ids, const std::vector<int64_t>* next) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (next != nullptr) store->Prefetch(*next);
  std::vector<int64_t> slots(ids.size());
  ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
  std::vector<float> g(ids.size() * kDim);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t k = 0; k < kDim; ++k) g[i * kDim + k] = TestGrad(step, ids[i], k);
  }
  RowUpdateArgs a;
  a.weights = store->weight_data();
  a.weight_dtype = store->weight_dtype();
  a.state = store->state();
  a.dim = kDim;
  a.lr = 0.05f;
  a.step = step + 1;
  a.rounding = RowRounding::kStochastic;
  a.rounding_seed = 9;
  ASSERT_TRUE(ApplyRowUpdates(DeviceContext::Cpu(), slots, g.data(), a).ok());
  ASSERT_TRUE(store->EndStep().ok());
}

std::vector<char> AllBytes(RowStore* s, std::vector<float>* state) {
  std::vector<char> w(kRows * s->weight_row_bytes());
  state->resize(kRows);
  EXPECT_TRUE(s->ReadRowBytes(0, kRows, w.data(), state->data()).ok());
  return w;
}

class Tiered16Test : public ::testing::TestWithParam<RowDtype> {};

TEST_P(Tiered16Test, TierMatchesMemoryAndCheckpointRoundTrips) {
  const RowDtype d = GetParam();
  TempDir tmp;
  auto tier = TieredRowStore::Open(TierOptions(tmp.Sub("db"), d));
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->weight_dtype(), d);
  auto mem = Memory(d);
  const auto ids = SkewedIdStream(3, kRows, 30);
  for (int t = 0; t < 30; ++t) {
    const std::vector<int64_t>* next = t + 1 < 30 ? &ids[t + 1] : nullptr;
    Step(tier->get(), t, ids[t], next);
    Step(mem.get(), t, ids[t], nullptr);
  }
  EXPECT_GT((*tier)->metrics().evictions, 0);
  std::vector<float> s_tier, s_mem;
  const std::vector<char> w_tier = AllBytes(tier->get(), &s_tier);
  const std::vector<char> w_mem = AllBytes(mem.get(), &s_mem);
  EXPECT_EQ(w_tier, w_mem);
  EXPECT_EQ(s_tier, s_mem);
  // The RocksDB values are the 16-bit bytes: checkpoint, train on, restore, same bytes.
  ASSERT_TRUE((*tier)->Checkpoint(tmp.Sub("ckpt")).ok());
  Step(tier->get(), 31, ids[0], nullptr);
  ASSERT_TRUE((*tier)->Restore(tmp.Sub("ckpt")).ok());
  std::vector<float> s_back;
  EXPECT_EQ(AllBytes(tier->get(), &s_back), w_mem);
  EXPECT_EQ(s_back, s_mem);
  tier->reset();
  // Reopening with another dtype is refused by the layout record.
  TieredRowStoreOptions other = TierOptions(tmp.Sub("db"), RowDtype::kF32);
  auto bad = TieredRowStore::Open(other);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("dtype"));
  auto again = TieredRowStore::Open(TierOptions(tmp.Sub("db"), d));
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<float> s_again;
  EXPECT_EQ(AllBytes(again->get(), &s_again), w_mem);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Tiered16Test, ::testing::Values(RowDtype::kF16, RowDtype::kBf16),
                         [](const auto& info) { return std::string(RowDtypeName(info.param)); });

}  // namespace
}  // namespace tessera
