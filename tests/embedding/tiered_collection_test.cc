// EmbeddingCollection over RocksDB-tiered stores: with two threads the tables' Resolve, Prefetch
// and EndStep run side by side, and the forward outputs and trained tables must still be
// bit-identical to the same collection in memory; evaluation (Forward without BackwardUpdate)
// must not make rows dirty, so it writes nothing back to RocksDB.
#include <filesystem>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "embedding/embedding_collection.h"
#include "embedding/tiered_row_store.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using testing::TempDir;

// Three tables (one serving two features), row-wise AdaGrad.
EmbeddingCollectionOptions ThreeTables() {
  EmbeddingCollectionOptions o;
  o.num_features = 4;
  o.seed = 5;
  o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  o.optimizer.adagrad_initial = 0.1f;
  const int dims[3] = {8, 4, 8};
  const int rows[3] = {600, 400, 800};
  const std::vector<std::vector<int>> features = {{0, 3}, {1}, {2}};
  for (int t = 0; t < 3; ++t) {
    TableConfig c;
    c.name = "t" + std::to_string(t);
    c.num_rows = rows[t];
    c.dim = dims[t];
    c.features = features[t];
    o.tables.push_back(c);
  }
  return o;
}

// 1-3 ids per bag, skewed toward low rows (some rows hot, a long tail of cold ones).
KeyedJagged MakeBatch(uint64_t seed, int64_t batch, const EmbeddingCollectionOptions& o) {
  CounterRng rng(seed, 0);
  KeyedJagged kj;
  kj.num_features = o.num_features;
  kj.batch_size = batch;
  kj.offsets.push_back(0);
  for (int f = 0; f < o.num_features; ++f) {
    int64_t rows = 0;
    for (const TableConfig& t : o.tables) {
      for (int tf : t.features) rows = tf == f ? t.num_rows : rows;
    }
    for (int64_t b = 0; b < batch; ++b) {
      int len = 1 + static_cast<int>(rng.NextBelow(3));
      for (int j = 0; j < len; ++j) {
        double u = rng.NextUniform();
        kj.values.push_back(static_cast<int64_t>(u * u * u * static_cast<double>(rows)));
      }
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  return kj;
}

std::unique_ptr<EmbeddingCollection> Tiered(const EmbeddingCollectionOptions& o,
                                            const TempDir& tmp, int64_t cache_rows) {
  std::vector<std::unique_ptr<RowStore>> stores;
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    TieredRowStoreOptions so;
    so.path = tmp.Sub(o.tables[t].name);
    so.num_rows = o.tables[t].num_rows;
    so.dim = o.tables[t].dim;
    so.state_dim = RowStateDim(o.optimizer.type, o.tables[t].dim);
    so.state_init = o.optimizer.adagrad_initial;
    so.init = o.tables[t].init;
    so.seed = o.seed;
    so.table_id = static_cast<uint64_t>(t);
    so.name = o.tables[t].name;
    so.cache_rows = cache_rows;
    so.reader_threads = 2;
    auto store = TieredRowStore::Open(so);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    stores.push_back(std::move(*store));
  }
  auto c = EmbeddingCollection::CreateWithStores(o, std::move(stores), DeviceContext::Cpu());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TieredRowStore& TierOf(EmbeddingCollection& c, int t) {
  return dynamic_cast<TieredRowStore&>(c.store(t));
}

TEST(TieredCollectionTest, ConcurrentTablesMatchInMemoryBitForBit) {
  ScopedNumThreads threads(2);
  TempDir tmp;
  const EmbeddingCollectionOptions o = ThreeTables();
  auto mem = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(mem.ok()) << mem.status();
  // 90 rows per table: a few steps' distinct rows, so rows keep moving to and from RocksDB.
  auto tier = Tiered(o, tmp, 90);
  ASSERT_NE(tier, nullptr);
  constexpr int64_t kBatch = 24;
  const int64_t width = (*mem)->output_dim() * kBatch;
  std::vector<float> out_mem(width), out_tier(width), grad(width);
  for (int step = 0; step < 40; ++step) {
    KeyedJagged batch = MakeBatch(100 + step, kBatch, o);
    tier->Prefetch(MakeBatch(101 + step, kBatch, o));
    ASSERT_TRUE((*mem)->Forward(batch, out_mem.data()).ok());
    ASSERT_TRUE(tier->Forward(batch, out_tier.data()).ok());
    ASSERT_EQ(out_mem, out_tier) << "forward differs at step " << step;
    for (int64_t i = 0; i < width; ++i) grad[i] = out_mem[i] * 0.5f - 0.01f * (i % 7);
    ASSERT_TRUE((*mem)->BackwardUpdate(grad.data(), 0.1f, step + 1).ok());
    { absl::Status s = tier->BackwardUpdate(grad.data(), 0.1f, step + 1); ASSERT_TRUE(s.ok()) << s; }
  }
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = o.tables[t];
    const int64_t sd = RowStateDim(o.optimizer.type, c.dim);
    std::vector<float> wm(c.num_rows * c.dim), wt(wm.size()), sm(c.num_rows * sd), st(sm.size());
    ASSERT_TRUE((*mem)->store(t).ReadRows(0, c.num_rows, wm.data(), sm.data()).ok());
    ASSERT_TRUE(tier->store(t).ReadRows(0, c.num_rows, wt.data(), st.data()).ok());
    EXPECT_EQ(wm, wt) << c.name;
    EXPECT_EQ(sm, st) << c.name;
    EXPECT_GT(TierOf(*tier, t).metrics().rows_written, 0) << c.name << ": cache never spilled";
  }
}

TEST(TieredCollectionTest, EvaluationWritesNothingBack) {
  ScopedNumThreads threads(2);
  TempDir tmp;
  const EmbeddingCollectionOptions o = ThreeTables();
  auto tier = Tiered(o, tmp, 90);
  ASSERT_NE(tier, nullptr);
  constexpr int64_t kBatch = 24;
  std::vector<float> out(tier->output_dim() * kBatch), grad(out.size(), 0.01f);
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(tier->Forward(MakeBatch(step, kBatch, o), out.data()).ok());
    { absl::Status s = tier->BackwardUpdate(grad.data(), 0.1f, step + 1); ASSERT_TRUE(s.ok()) << s; }
  }
  std::vector<int64_t> written(3), evictions(3);
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(TierOf(*tier, t).Flush().ok());  // every trained row on disk, the cache clean
    written[t] = TierOf(*tier, t).metrics().rows_written;
    evictions[t] = TierOf(*tier, t).metrics().evictions;
  }
  // Evaluation: forwards only, over batches that touch many rows not in the cache.
  for (int i = 0; i < 15; ++i) {
    ASSERT_TRUE(tier->Forward(MakeBatch(1000 + i, kBatch, o), out.data()).ok());
  }
  // A training step after evaluation ends the pending forward-only step too.
  ASSERT_TRUE(tier->Forward(MakeBatch(2000, kBatch, o), out.data()).ok());
  ASSERT_TRUE(tier->BackwardUpdate(grad.data(), 0.1f, 11).ok());
  for (int t = 0; t < 3; ++t) {
    TieredRowStoreMetrics m = TierOf(*tier, t).metrics();
    EXPECT_GT(m.evictions, evictions[t] + 50) << o.tables[t].name << ": evaluation moved no rows";
    // Only the last training step's rows may have been written: evicted evaluation rows never.
    EXPECT_EQ(m.rows_written, written[t]) << o.tables[t].name;
  }
}

}  // namespace
}  // namespace tessera
