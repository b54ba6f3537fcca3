// DeviceRowCache with host memory standing in for the device (its CPU twins): an
// EmbeddingCollection whose tables are caches far smaller than the rows they touch (evictions and
// write-backs every step), over host memory and over the RocksDB tier, LRU and LFU, must train
// bit-identically to the same collection in memory: every forward output, and afterwards every
// weight and optimizer-state float. Also: evaluation steps dirty nothing, ReadRows / WriteRows see
// and update the cached rows, and a cache the device cannot hold is ResourceExhausted naming the
// table and the bytes.
#include "embedding/device_row_cache.h"

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "embedding/cache_rows.h"
#include "embedding/embedding_collection.h"
#include "embedding/tiered_row_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// Two tables (t0 serving two features), row-wise AdaGrad.
EmbeddingCollectionOptions TwoTables() {
  EmbeddingCollectionOptions o;
  o.num_features = 3;
  o.seed = 9;
  o.optimizer.type = RowOptimizerType::kRowWiseAdagrad;
  o.optimizer.adagrad_initial = 0.1f;
  const std::vector<std::vector<int>> features = {{0, 2}, {1}};
  for (int t = 0; t < 2; ++t) {
    TableConfig c;
    c.name = "t" + std::to_string(t);
    c.num_rows = t == 0 ? 700 : 300;
    c.dim = t == 0 ? 8 : 4;
    c.features = features[t];
    o.tables.push_back(c);
  }
  return o;
}

// 1-3 ids per bag, skewed toward low rows.
KeyedJagged MakeBatch(uint64_t seed, int64_t batch, const EmbeddingCollectionOptions& o) {
  CounterRng rng(seed, 0);
  KeyedJagged kj;
  kj.num_features = o.num_features;
  kj.batch_size = batch;
  kj.offsets.push_back(0);
  for (int f = 0; f < o.num_features; ++f) {
    const int64_t rows = o.tables[f == 1 ? 1 : 0].num_rows;
    for (int64_t b = 0; b < batch; ++b) {
      const int len = 1 + static_cast<int>(rng.NextBelow(3));
      for (int j = 0; j < len; ++j) {
        const double u = rng.NextUniform();
        kj.values.push_back(static_cast<int64_t>(u * u * static_cast<double>(rows)));
      }
      kj.offsets.push_back(static_cast<int64_t>(kj.values.size()));
    }
  }
  return kj;
}

enum class Backing { kMemory, kTier };

std::unique_ptr<RowStore> BackingStore(const EmbeddingCollectionOptions& o, int t, Backing b,
                                       const TempDir& tmp) {
  const TableConfig& c = o.tables[t];
  if (b == Backing::kMemory) {
    auto s = CreateInMemoryRowStore(TableRowStoreOptions(c, t, o.optimizer, o.seed));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  TieredRowStoreOptions so;
  so.path = tmp.Sub(c.name);
  so.num_rows = c.num_rows;
  so.dim = c.dim;
  so.state_dim = RowStateDim(o.optimizer.type, c.dim);
  so.state_init = o.optimizer.adagrad_initial;
  so.init = c.init;
  so.seed = o.seed;
  so.table_id = static_cast<uint64_t>(t);
  so.name = c.name;
  so.cache_rows = 64;  // smaller than one step's misses: the cache's copies go in chunks
  so.reader_threads = 2;
  auto s = TieredRowStore::Open(so);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<EmbeddingCollection> Cached(const EmbeddingCollectionOptions& o, Backing b,
                                            CachePolicy policy, int64_t rows,
                                            const TempDir& tmp) {
  std::vector<std::unique_ptr<RowStore>> stores;
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    DeviceRowCacheOptions co;
    co.ctx = DeviceContext::Cpu();
    co.cache_rows = rows;
    co.policy = policy;
    co.name = o.tables[t].name;
    auto c = DeviceRowCache::Create(co, BackingStore(o, t, b, tmp));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    stores.push_back(std::move(*c));
  }
  auto c = EmbeddingCollection::CreateWithStores(o, std::move(stores), DeviceContext::Cpu());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

DeviceRowCache& CacheOf(EmbeddingCollection& c, int t) {
  return dynamic_cast<DeviceRowCache&>(c.store(t));
}

struct Case {
  const char* name;
  Backing backing;
  CachePolicy policy;
};

class DeviceRowCacheTrainTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceRowCacheTrainTest, TrainsBitIdenticallyToTheTableInMemory) {
  const Case& k = GetParam();
  TempDir tmp;
  const EmbeddingCollectionOptions o = TwoTables();
  auto mem = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  ASSERT_TRUE(mem.ok()) << mem.status();
  // A step has at most 192 ids of t0 (32 samples x 2 features x 3) and 96 of t1; 192 slots
  // hold one step but not the hundreds of rows the run touches: rows are evicted and written
  // back every step.
  auto cached = Cached(o, k.backing, k.policy, 192, tmp);
  ASSERT_NE(cached, nullptr);
  constexpr int64_t kBatch = 32;
  const int64_t width = (*mem)->output_dim() * kBatch;
  std::vector<float> out_mem(width), out_cached(width), grad(width);
  int64_t evictions_before = 0;
  for (int step = 0; step < 30; ++step) {
    const KeyedJagged batch = MakeBatch(200 + step, kBatch, o);
    cached->Prefetch(MakeBatch(201 + step, kBatch, o));
    ASSERT_TRUE((*mem)->Forward(batch, out_mem.data()).ok());
    absl::Status st = cached->Forward(batch, out_cached.data());
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(out_mem, out_cached) << "forward differs at step " << step;
    if (step % 7 == 6) {  // an evaluation step: read only
      ASSERT_TRUE((*mem)->Forward(batch, out_mem.data()).ok());
      ASSERT_TRUE(cached->Forward(batch, out_cached.data()).ok());
    }
    for (int64_t i = 0; i < width; ++i) grad[i] = out_mem[i] * 0.5f - 0.01f * (i % 7);
    ASSERT_TRUE((*mem)->BackwardUpdate(grad.data(), 0.1f, step + 1).ok());
    st = cached->BackwardUpdate(grad.data(), 0.1f, step + 1);
    ASSERT_TRUE(st.ok()) << st;
    if (step >= 5) {
      const int64_t ev = CacheOf(*cached, 0).metrics().evictions;
      EXPECT_GT(ev, evictions_before) << "no eviction at step " << step;
      evictions_before = ev;
    }
  }
  for (int t = 0; t < 2; ++t) {
    const TableConfig& c = o.tables[t];
    const int64_t sd = RowStateDim(o.optimizer.type, c.dim);
    std::vector<float> wm(c.num_rows * c.dim), wc(wm.size()), sm(c.num_rows * sd), sc(sm.size());
    ASSERT_TRUE((*mem)->store(t).ReadRows(0, c.num_rows, wm.data(), sm.data()).ok());
    EXPECT_GT(CacheOf(*cached, t).metrics().dirty_rows, 0);
    ASSERT_TRUE(cached->store(t).ReadRows(0, c.num_rows, wc.data(), sc.data()).ok());
    EXPECT_EQ(wm, wc) << c.name;
    EXPECT_EQ(sm, sc) << c.name;
    const DeviceRowCacheMetrics m = CacheOf(*cached, t).metrics();
    EXPECT_EQ(m.dirty_rows, 0) << "ReadRows flushes";
    EXPECT_GT(m.writebacks, 0);
    EXPECT_GT(m.hits, 0);
    EXPECT_GT(m.prefetch_hints, 0);
  }
  if (k.backing == Backing::kTier) {
    const TieredRowStoreMetrics tm =
        dynamic_cast<TieredRowStore&>(CacheOf(*cached, 0).backing()).metrics();
    EXPECT_GT(tm.prefetched_rows, 0) << "the tier's prefetch was not used";
    EXPECT_GT(tm.rows_written, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeviceRowCacheTrainTest,
    ::testing::Values(Case{"memory_lru", Backing::kMemory, CachePolicy::kLru},
                      Case{"memory_lfu", Backing::kMemory, CachePolicy::kLfu},
                      Case{"tier_lru", Backing::kTier, CachePolicy::kLru},
                      Case{"tier_lfu", Backing::kTier, CachePolicy::kLfu}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(DeviceRowCacheTest, WriteRowsReachesCachedRowsAndReadRowsSeesDirtyOnes) {
  TempDir tmp;
  const EmbeddingCollectionOptions o = TwoTables();
  auto cached = Cached(o, Backing::kMemory, CachePolicy::kLru, 100, tmp);
  ASSERT_NE(cached, nullptr);
  RowStore& s = cached->store(1);
  std::vector<int64_t> ids = {3, 4, 5}, slots(3);
  ASSERT_TRUE(s.Resolve(ids, absl::MakeSpan(slots)).ok());
  float* w = s.weights();
  w[slots[1] * 4 + 2] = 42.0f;  // a kernel's update of row 4
  ASSERT_TRUE(s.EndStep().ok());
  std::vector<float> row(4), state(1);
  ASSERT_TRUE(s.ReadRows(4, 1, row.data(), state.data()).ok());
  EXPECT_EQ(row[2], 42.0f);
  // Overwrite rows 3..6 (3, 4 and 5 cached): the cache and the backing both change.
  std::vector<float> rows(16, 7.0f);
  ASSERT_TRUE(s.WriteRows(3, 4, rows.data(), nullptr).ok());
  EXPECT_EQ(w[slots[0] * 4], 7.0f);
  EXPECT_EQ(w[slots[1] * 4 + 2], 7.0f);
  std::vector<float> back(4);
  ASSERT_TRUE(dynamic_cast<DeviceRowCache&>(s).backing().ReadRows(4, 1, back.data(), nullptr).ok());
  EXPECT_EQ(back[2], 7.0f);
  // Range errors name the table.
  std::vector<int64_t> bad = {300}, bad_slot(1);
  absl::Status st = s.Resolve(bad, absl::MakeSpan(bad_slot));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("table 't1'"));
}

TEST(DeviceRowCacheTest, EvaluationStepsWriteNothingBack) {
  TempDir tmp;
  const EmbeddingCollectionOptions o = TwoTables();
  auto cached = Cached(o, Backing::kMemory, CachePolicy::kLfu, 150, tmp);
  ASSERT_NE(cached, nullptr);
  std::vector<float> out(cached->output_dim() * 32);
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(cached->Forward(MakeBatch(step, 32, o), out.data()).ok());
  }
  ASSERT_TRUE(cached->Forward(MakeBatch(99, 32, o), out.data()).ok());
  for (int t = 0; t < 2; ++t) {
    const DeviceRowCacheMetrics m = CacheOf(*cached, t).metrics();
    EXPECT_GT(m.evictions, 0);
    EXPECT_EQ(m.writebacks, 0);
    EXPECT_EQ(m.dirty_rows, 0);
  }
}

TEST(DeviceRowCacheTest, StepLargerThanTheCacheNamesTheTable) {
  TempDir tmp;
  const EmbeddingCollectionOptions o = TwoTables();
  auto cached = Cached(o, Backing::kMemory, CachePolicy::kLru, 20, tmp);
  ASSERT_NE(cached, nullptr);
  std::vector<float> out(cached->output_dim() * 32);
  absl::Status st = cached->Forward(MakeBatch(1, 32, o), out.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("table 't0'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("device_cache_rows"));
}

TEST(DeviceRowCacheTest, ACacheTheDeviceCannotHoldIsResourceExhaustedWithTheBytes) {
  TempDir tmp;
  const EmbeddingCollectionOptions o = TwoTables();
  DeviceRowCacheOptions co;
  co.cache_rows = 500;
  co.name = "t0";
  co.memory_limit_bytes = 10000;
  auto c = DeviceRowCache::Create(co, BackingStore(o, 0, Backing::kMemory, tmp));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  // 500 rows x (8 weights + 1 state) x 4 bytes.
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("table 't0'"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("18000 bytes"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("10000 bytes"));
  co.cache_rows = 0;
  co.cache_bytes = 20;  // less than one row
  co.memory_limit_bytes = 0;
  c = DeviceRowCache::Create(co, BackingStore(o, 0, Backing::kMemory, tmp));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("holds no row"));
}

TEST(CacheRowsTest, GatherAndScatterAreInverseByteCopies) {
  std::vector<uint16_t> base(10 * 3);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint16_t>(i * 7 + 1);
  std::vector<int64_t> slots = {4, 0, 9};
  std::vector<uint16_t> packed(9);
  CacheRowsArgs a;
  a.base = base.data();
  a.row_bytes = 6;  // not a multiple of 4: the byte path
  a.capacity = 10;
  a.slots = slots.data();
  a.n = 3;
  a.packed = packed.data();
  ASSERT_TRUE(GatherCacheRows(DeviceContext::Cpu(), a).ok());
  EXPECT_EQ(packed[0], base[12]);
  EXPECT_EQ(packed[3], base[0]);
  EXPECT_EQ(packed[8], base[29]);
  for (auto& p : packed) p = static_cast<uint16_t>(p + 1);
  ASSERT_TRUE(ScatterCacheRows(DeviceContext::Cpu(), a).ok());
  EXPECT_EQ(base[13], static_cast<uint16_t>(13 * 7 + 2));
  EXPECT_EQ(base[1], static_cast<uint16_t>(1 * 7 + 2));  // slot 0 was gathered too
  EXPECT_EQ(base[3], static_cast<uint16_t>(3 * 7 + 1));  // slot 1 was not
  a.row_bytes = 0;
  EXPECT_EQ(GatherCacheRows(DeviceContext::Cpu(), a).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
