// The tiered row store against the in-memory store: the same steps give bit-identical rows for
// every cache size and policy; lazy init, eviction write-back, pinning and a 2^31-row table.
#include "embedding/tiered_row_store.h"

#include <sys/resource.h>

#include <random>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/embedding/tiered_test_util.h"

namespace tessera {
namespace {

using testing::AllRows;
using testing::BitEqual;
using testing::DistinctCount;
using testing::SkewedIds;
using testing::TempDir;
using testing::TrainStep;

constexpr int64_t kRows = 3000;
constexpr int64_t kDim = 12;
constexpr int64_t kBatch = 96;

TieredRowStoreOptions TierOptions(const std::string& path, int64_t cache_rows,
                                  CachePolicy policy) {
  TieredRowStoreOptions o;
  o.path = path;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.state_init = 0.25f;
  o.seed = 1234;
  o.table_id = 7;
  o.cache_rows = cache_rows;
  o.policy = policy;
  o.reader_threads = 3;
  o.multiget_batch = 16;
  return o;
}

InMemoryRowStoreOptions MemOptions() {
  InMemoryRowStoreOptions o;
  o.num_rows = kRows;
  o.dim = kDim;
  o.state_dim = 1;
  o.state_init = 0.25f;
  o.seed = 1234;
  o.table_id = 7;
  return o;
}

// (policy, cache rows, prefetch, Resolve calls per step)
using IdentityParam = std::tuple<CachePolicy, int64_t, bool, int>;

class TieredIdentityTest : public ::testing::TestWithParam<IdentityParam> {};

TEST_P(TieredIdentityTest, BitIdenticalToInMemoryStore) {
  auto [policy, cache_rows, prefetch, groups] = GetParam();
  TempDir tmp;
  auto topts = TierOptions(tmp.Sub("db"), cache_rows, policy);
  topts.prefetch = prefetch;
  auto tier_or = TieredRowStore::Open(topts);
  ASSERT_TRUE(tier_or.ok()) << tier_or.status();
  auto tier = std::move(tier_or).value();
  auto mem_or = CreateInMemoryRowStore(MemOptions());
  ASSERT_TRUE(mem_or.ok()) << mem_or.status();
  auto mem = std::move(mem_or).value();

  // Pre-draw the id stream so Prefetch can see the next step's ids.
  constexpr int kSteps = 60;
  std::mt19937_64 rng(99);
  std::vector<std::vector<std::vector<int64_t>>> steps(kSteps);
  std::vector<std::vector<int64_t>> flat(kSteps);
  for (int t = 0; t < kSteps; ++t) {
    for (int g = 0; g < groups; ++g) {
      steps[t].push_back(SkewedIds(rng, kRows, kBatch / groups));
      flat[t].insert(flat[t].end(), steps[t].back().begin(), steps[t].back().end());
    }
  }
  for (int t = 0; t < kSteps; ++t) {
    const std::vector<int64_t>* next = t + 1 < kSteps ? &flat[t + 1] : nullptr;
    ASSERT_TRUE(TrainStep(mem.get(), t, steps[t], next).ok());
    absl::Status s = TrainStep(tier.get(), t, steps[t], next);
    ASSERT_TRUE(s.ok()) << "step " << t << ": " << s;
    if (t == kSteps / 2) {
      // Mid-run export (cache + write-back + RocksDB + lazy rows) must agree too.
      std::vector<float> ms, ts;
      ASSERT_TRUE(BitEqual(AllRows(mem.get(), &ms), AllRows(tier.get(), &ts)));
      ASSERT_TRUE(BitEqual(ms, ts));
    }
  }
  std::vector<float> ms, ts;
  std::vector<float> mw = AllRows(mem.get(), &ms);
  std::vector<float> tw = AllRows(tier.get(), &ts);
  EXPECT_TRUE(BitEqual(mw, tw));
  EXPECT_TRUE(BitEqual(ms, ts));

  TieredRowStoreMetrics m = tier->metrics();
  EXPECT_EQ(m.steps, kSteps);
  EXPECT_GT(m.hits, 0);
  EXPECT_GT(m.misses, 0);
  if (cache_rows < 1000) {
    // A small cache must have evicted, written back and re-read rows: the test exercised them.
    EXPECT_GT(m.evictions, 0);
    EXPECT_GT(m.rows_written, 0);
    EXPECT_GT(m.rows_read, 0);
  }
  if (prefetch) {
    EXPECT_GT(m.prefetch_used, 0);
  }
  // Same rows after closing and reopening the same path (destructor flushes).
  tier.reset();
  auto reopened = TieredRowStore::Open(topts);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::vector<float> rs;
  EXPECT_TRUE(BitEqual(mw, AllRows(reopened->get(), &rs)));
  EXPECT_TRUE(BitEqual(ms, rs));
}

// The tiniest cache is just above one step's distinct rows (at most kBatch).
INSTANTIATE_TEST_SUITE_P(
    CacheSizes, TieredIdentityTest,
    ::testing::Combine(::testing::Values(CachePolicy::kLru, CachePolicy::kLfu),
                       ::testing::Values(kBatch + 1, 300, kRows / 2, 2 * kRows),
                       ::testing::Bool(), ::testing::Values(1, 3)),
    [](const ::testing::TestParamInfo<IdentityParam>& info) {
      return std::string(CachePolicyName(std::get<0>(info.param))) + "_cache" +
             std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_prefetch" : "_sync") + "_groups" +
             std::to_string(std::get<3>(info.param));
    });

TEST(TieredRowStoreTest, LazyInitEqualsInitRow) {
  TempDir tmp;
  for (RowInitType type : {RowInitType::kUniform, RowInitType::kNormal}) {
    auto o = TierOptions(tmp.Sub(type == RowInitType::kUniform ? "u" : "n"), 64,
                         CachePolicy::kLru);
    o.init.type = type;
    o.state_dim = 2;
    auto store = TieredRowStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<int64_t> ids = {0, 5, kRows - 1, 5, 1000};
    std::vector<int64_t> slots(ids.size());
    ASSERT_TRUE((*store)->Resolve(ids, absl::MakeSpan(slots)).ok());
    EXPECT_EQ(slots[1], slots[3]);
    std::vector<float> expect(kDim);
    for (size_t i = 0; i < ids.size(); ++i) {
      InitRow(o.init, o.seed, o.table_id, o.num_rows, ids[i], kDim, expect.data());
      const float* w = (*store)->weights() + slots[i] * kDim;
      for (int64_t k = 0; k < kDim; ++k) ASSERT_EQ(w[k], expect[k]) << ids[i] << " " << k;
      const float* s = (*store)->state() + slots[i] * 2;
      EXPECT_EQ(s[0], 0.25f);
      EXPECT_EQ(s[1], 0.25f);
    }
    ASSERT_TRUE((*store)->EndStep().ok());
    // Rows never resolved read as InitRow too, and nothing was stored for them.
    std::vector<float> w(10 * kDim), s(10 * 2);
    ASSERT_TRUE((*store)->ReadRows(2000, 10, w.data(), s.data()).ok());
    for (int64_t r = 0; r < 10; ++r) {
      InitRow(o.init, o.seed, o.table_id, o.num_rows, 2000 + r, kDim, expect.data());
      for (int64_t k = 0; k < kDim; ++k) ASSERT_EQ(w[r * kDim + k], expect[k]);
      EXPECT_EQ(s[r * 2], 0.25f);
    }
    EXPECT_EQ((*store)->metrics().rows_initialized, 4);
    EXPECT_EQ((*store)->metrics().rows_read, 0);
  }
}

// A shard of a larger table: local row r, column c starts as the full table's row
// row_offset + r, column init_col_begin + c (default scale resolved by the caller), read
// through Resolve and ReadRows alike; the offsets are part of the recorded layout.
TEST(TieredRowStoreTest, RowOffsetAndInitColumnsSliceTheFullTable) {
  TempDir tmp;
  constexpr int64_t kFullRows = 5000, kFullDim = 20, kOffset = 1234, kCol = 3;
  RowInit full_init;  // uniform, default scale of the full table
  auto o = TierOptions(tmp.Sub("shard"), 16, CachePolicy::kLru);
  o.num_rows = 100;
  o.dim = kDim;
  ASSERT_LE(kCol + kDim, kFullDim);
  o.init.scale = sqrtf(1.0f / static_cast<float>(kFullRows));
  o.row_offset = kOffset;
  o.init_dim = kFullDim;
  o.init_col_begin = kCol;
  std::vector<float> full(kFullDim);
  auto expect_row = [&](const float* got, int64_t local_row) {
    InitRow(full_init, o.seed, o.table_id, kFullRows, kOffset + local_row, kFullDim,
            full.data());
    for (int64_t k = 0; k < kDim; ++k) ASSERT_EQ(got[k], full[kCol + k]) << local_row << " " << k;
  };
  {
    auto store = TieredRowStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<int64_t> ids = {0, 7, 99};
    std::vector<int64_t> slots(ids.size());
    ASSERT_TRUE((*store)->Resolve(ids, absl::MakeSpan(slots)).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      expect_row((*store)->weights() + slots[i] * kDim, ids[i]);
    }
    ASSERT_TRUE((*store)->EndStep().ok());
    std::vector<float> w(10 * kDim);
    ASSERT_TRUE((*store)->ReadRows(40, 10, w.data(), nullptr).ok());
    for (int64_t r = 0; r < 10; ++r) expect_row(w.data() + r * kDim, 40 + r);
  }
  // Whole-row offset only (init_dim 0 = dim).
  auto rows_only = TierOptions(tmp.Sub("rows"), 16, CachePolicy::kLru);
  rows_only.row_offset = kOffset;
  {
    auto store = TieredRowStore::Open(rows_only);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<float> w(kDim), want(kDim);
    ASSERT_TRUE((*store)->ReadRows(5, 1, w.data(), nullptr).ok());
    InitRow(rows_only.init, rows_only.seed, rows_only.table_id, rows_only.num_rows, kOffset + 5,
            kDim, want.data());
    EXPECT_EQ(w, want);
  }
  // Reopening with another offset would change every lazily initialised row: refused.
  rows_only.row_offset = kOffset + 1;
  auto reopened = TieredRowStore::Open(rows_only);
  ASSERT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find("row_offset"), std::string::npos)
      << reopened.status();
  // Bad slices are named.
  auto bad = o;
  bad.path = tmp.Sub("bad");
  bad.init_col_begin = kFullDim - kDim + 1;
  auto st = TieredRowStore::Open(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("not inside init_dim 20"), std::string::npos)
      << st.status();
  bad.init_col_begin = 0;
  bad.row_offset = -1;
  st = TieredRowStore::Open(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("row_offset -1"), std::string::npos) << st.status();
}

TEST(TieredRowStoreTest, EvictionWritesBackAndRereads) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(TierOptions(tmp.Sub("db"), 4, CachePolicy::kLru));
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  auto& store = *store_or;
  auto set_rows = [&](std::vector<int64_t> ids, float base) {
    std::vector<int64_t> slots(ids.size());
    ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < kDim; ++k) store->weights()[slots[i] * kDim + k] = base + i + k;
      store->state()[slots[i]] = base - i;
    }
    ASSERT_TRUE(store->EndStep().ok());
  };
  set_rows({0, 1, 2, 3}, 100.0f);
  EXPECT_EQ(store->metrics().rows_written, 0);
  set_rows({10, 11, 12, 13}, 200.0f);  // evicts 0..3, all dirty
  EXPECT_EQ(store->metrics().evictions, 4);
  EXPECT_EQ(store->metrics().rows_written, 4);
  // The write-back runs in the background; Flush waits for it, so the re-read below must come
  // from RocksDB (not from the in-flight write buffer).
  ASSERT_TRUE(store->Flush().ok());
  std::vector<int64_t> ids = {3, 2, 1, 0};
  std::vector<int64_t> slots(4);
  ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
  EXPECT_EQ(store->metrics().rows_read, 4);
  for (int i = 0; i < 4; ++i) {
    int64_t orig = ids[i];  // written at position `orig` of the first batch
    for (int64_t k = 0; k < kDim; ++k) {
      EXPECT_EQ(store->weights()[slots[i] * kDim + k], 100.0f + orig + k);
    }
    EXPECT_EQ(store->state()[slots[i]], 100.0f - orig);
  }
  ASSERT_TRUE(store->EndStep().ok());
  // Rows 10..13 now live in RocksDB (evicted again) and read back through ReadRows.
  std::vector<float> w(4 * kDim), s(4);
  ASSERT_TRUE(store->ReadRows(10, 4, w.data(), s.data()).ok());
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(w[r * kDim + 1], 200.0f + r + 1);
    EXPECT_EQ(s[r], 200.0f - r);
  }
}

// A row evicted one step and hinted the next is in the write-back in flight; the EndStep
// before the Resolve it is hinted for drops that buffer (the row is in RocksDB by then), so
// Prefetch must copy it into staging, or Resolve would read it from RocksDB synchronously.
TEST(TieredRowStoreTest, PrefetchCopiesRowsOfTheWriteBackInFlight) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(TierOptions(tmp.Sub("db"), 4, CachePolicy::kLru));
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  auto& store = *store_or;
  std::vector<int64_t> slots(4);
  auto set_rows = [&](std::vector<int64_t> ids, float base) {
    ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < kDim; ++k) store->weights()[slots[i] * kDim + k] = base + i + k;
      store->state()[slots[i]] = base - i;
    }
    ASSERT_TRUE(store->EndStep().ok());
  };
  set_rows({0, 1, 2, 3}, 100.0f);
  set_rows({10, 11, 12, 13}, 200.0f);  // evicts 0..3: their write-back is in flight now
  store->Prefetch(std::vector<int64_t>{3, 2, 1, 0, 20});
  set_rows({20, 21, 22, 23}, 300.0f);  // its EndStep drops the buffer holding 0..3
  const TieredRowStoreMetrics before = store->metrics();
  std::vector<int64_t> ids = {3, 2, 1, 0};
  ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
  const TieredRowStoreMetrics after = store->metrics();
  EXPECT_EQ(after.sync_reads - before.sync_reads, 0);
  EXPECT_EQ(after.prefetch_used - before.prefetch_used, 4);
  for (int i = 0; i < 4; ++i) {
    const int64_t orig = ids[i];  // written at position `orig` of the first batch
    for (int64_t k = 0; k < kDim; ++k) {
      EXPECT_EQ(store->weights()[slots[i] * kDim + k], 100.0f + orig + k);
    }
    EXPECT_EQ(store->state()[slots[i]], 100.0f - orig);
  }
  ASSERT_TRUE(store->EndStep().ok());
  // Without prefetch the same rows are synchronous reads, counted as such.
  ASSERT_TRUE(store->Resolve(std::vector<int64_t>{10, 11, 12, 13}, absl::MakeSpan(slots)).ok());
  EXPECT_EQ(store->metrics().sync_reads - after.sync_reads, 4);
  ASSERT_TRUE(store->EndStep().ok());
}

// DropRows: a dropped row reads as never written wherever its last value was (cached, in the
// write-back buffer of the step, in the write in flight, staged by a prefetch, in RocksDB),
// also before its delete has landed, and a row dropped then written again keeps the new value.
TEST(TieredRowStoreTest, DroppedRowsReadAsNeverWritten) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(TierOptions(tmp.Sub("db"), 4, CachePolicy::kLru));
  auto fresh_or = TieredRowStore::Open(TierOptions(tmp.Sub("fresh"), 64, CachePolicy::kLru));
  ASSERT_TRUE(store_or.ok() && fresh_or.ok());
  auto& store = *store_or;
  std::vector<int64_t> slots(4);
  auto set_rows = [&](std::vector<int64_t> ids, float base, bool end = true) {
    ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < kDim; ++k) store->weights()[slots[i] * kDim + k] = base + i + k;
      store->state()[slots[i]] = base - i;
    }
    if (end) ASSERT_TRUE(store->EndStep().ok());
  };
  // The value of `row` in `s` (weights, then state), through ReadRows.
  auto value = [](TieredRowStore& s, int64_t row) {
    std::vector<float> w(kDim + 1);
    EXPECT_TRUE(s.ReadRows(row, 1, w.data(), w.data() + kDim).ok());
    return w;
  };
  set_rows({0, 1, 2, 3}, 100.0f);
  set_rows({10, 11, 12, 13}, 200.0f);  // evicts 0..3: their write is in flight
  ASSERT_TRUE(store->DropRows(std::vector<int64_t>{0, 10}).ok());  // in flight; cached
  store->Prefetch(std::vector<int64_t>{0, 1, 10, 40});             // 40: never written
  ASSERT_TRUE(store->DropRows(std::vector<int64_t>{40}).ok());     // staged
  set_rows({20, 21, 22, 23}, 300.0f, /*end=*/false);               // evicts 11..13 into pending
  ASSERT_TRUE(store->DropRows(std::vector<int64_t>{12}).ok());     // in the step's write-back
  EXPECT_EQ(store->DropRows(std::vector<int64_t>{21}).code(),
            absl::StatusCode::kFailedPrecondition);  // pinned by the step
  ASSERT_TRUE(store->EndStep().ok());
  // Deletes not landed yet (they go with the next write-back): read as never written.
  std::vector<int64_t> ids = {0, 10, 12, 1};
  ASSERT_TRUE(store->Resolve(ids, absl::MakeSpan(slots)).ok());
  std::vector<int64_t> fslots(4);
  ASSERT_TRUE((*fresh_or)->Resolve(ids, absl::MakeSpan(fslots)).ok());
  for (int i = 0; i < 3; ++i) {
    for (int64_t k = 0; k < kDim; ++k) {
      EXPECT_EQ(store->weights()[slots[i] * kDim + k], (*fresh_or)->weights()[fslots[i] * kDim + k])
          << "row " << ids[i];
    }
    EXPECT_EQ(store->state()[slots[i]], 0.25f);
  }
  EXPECT_EQ(store->weights()[slots[3] * kDim], 101.0f);  // row 1 kept its value
  // Row 0 written again after its drop: the new value survives the delete.
  store->weights()[slots[0] * kDim] = 7.0f;
  ASSERT_TRUE(store->EndStep().ok());
  ASSERT_TRUE((*fresh_or)->EndReadOnlyStep().ok());
  set_rows({30, 31, 32, 33}, 400.0f);  // evicts 0, 10, 12, 1 (dirty)
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(value(*store, 0)[0], 7.0f);
  EXPECT_EQ(value(*store, 40), value(**fresh_or, 40));
  EXPECT_EQ(value(*store, 13)[0], 203.0f);
  EXPECT_EQ(store->metrics().rows_deleted, 4);
  // Dropped after the flush (in RocksDB only): gone once the delete lands.
  ASSERT_TRUE(store->DropRows(std::vector<int64_t>{13}).ok());
  EXPECT_EQ(value(*store, 13), value(**fresh_or, 13));
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(value(*store, 13), value(**fresh_or, 13));
  // Dropped while in RocksDB, resolved before the delete is written: never written too.
  ASSERT_TRUE(store->DropRows(std::vector<int64_t>{0}).ok());
  ASSERT_TRUE(store->Resolve(std::vector<int64_t>{0}, absl::MakeSpan(slots).subspan(0, 1)).ok());
  EXPECT_EQ(store->weights()[slots[0] * kDim], value(**fresh_or, 0)[0]);
  EXPECT_EQ(store->state()[slots[0]], 0.25f);
  ASSERT_TRUE(store->EndStep().ok());
  EXPECT_EQ(store->DropRows(std::vector<int64_t>{kRows}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TieredRowStoreTest, ReadOnlyStepsWriteNothingBack) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(TierOptions(tmp.Sub("db"), 4, CachePolicy::kLru));
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  auto& store = *store_or;
  std::vector<int64_t> slots(4);
  // Step 1 trains rows 0..3 (dirty).
  std::vector<int64_t> trained = {0, 1, 2, 3};
  ASSERT_TRUE(store->Resolve(trained, absl::MakeSpan(slots)).ok());
  for (int i = 0; i < 4; ++i) store->weights()[slots[i] * kDim] = 50.0f + i;
  ASSERT_TRUE(store->EndStep().ok());
  // Step 2 only reads rows 0 and 1 (evaluation): they must stay dirty (their update is not on
  // disk yet), so evicting them still writes them back.
  std::vector<int64_t> read_again = {0, 1};
  std::vector<int64_t> slots2(2);
  ASSERT_TRUE(store->Resolve(read_again, absl::MakeSpan(slots2)).ok());
  ASSERT_TRUE(store->EndReadOnlyStep().ok());
  // Step 3 reads 4 rows never trained: evicts 0..3, all dirty.
  std::vector<int64_t> eval_rows = {10, 11, 12, 13};
  ASSERT_TRUE(store->Resolve(eval_rows, absl::MakeSpan(slots)).ok());
  ASSERT_TRUE(store->EndReadOnlyStep().ok());
  EXPECT_EQ(store->metrics().rows_written, 4);
  // Step 4 reads 4 other rows: evicts 10..13, which were only read: nothing written.
  std::vector<int64_t> more = {20, 21, 22, 23};
  ASSERT_TRUE(store->Resolve(more, absl::MakeSpan(slots)).ok());
  ASSERT_TRUE(store->EndReadOnlyStep().ok());
  EXPECT_EQ(store->metrics().evictions, 8);
  EXPECT_EQ(store->metrics().rows_written, 4);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->metrics().rows_written, 4);  // 20..23 are clean: Flush writes nothing
  // The trained values survived; the read-only rows still read as their lazy init.
  std::vector<float> w(4 * kDim);
  ASSERT_TRUE(store->ReadRows(0, 4, w.data(), nullptr).ok());
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(w[r * kDim], 50.0f + r);
  std::vector<float> expect(kDim);
  const TieredRowStoreOptions& o = store->options();
  InitRow(o.init, o.seed, o.table_id, o.num_rows, 12, kDim, expect.data());
  ASSERT_TRUE(store->ReadRows(12, 1, w.data(), nullptr).ok());
  for (int64_t k = 0; k < kDim; ++k) EXPECT_EQ(w[k], expect[k]);
}

TEST(TieredRowStoreTest, PinnedRowsAreNeverEvicted) {
  TempDir tmp;
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kLfu}) {
    auto store_or = TieredRowStore::Open(
        TierOptions(tmp.Sub(CachePolicyName(policy)), 8, policy));
    ASSERT_TRUE(store_or.ok()) << store_or.status();
    auto& store = *store_or;
    // Fill the cache with 8 unpinned rows first so that later installs must evict.
    std::vector<int64_t> warm = {100, 101, 102, 103, 104, 105, 106, 107}, wslots(8);
    ASSERT_TRUE(store->Resolve(warm, absl::MakeSpan(wslots)).ok());
    ASSERT_TRUE(store->EndStep().ok());

    std::vector<int64_t> a = {1, 2, 3, 4, 5}, aslots(5);
    ASSERT_TRUE(store->Resolve(a, absl::MakeSpan(aslots)).ok());
    for (int i = 0; i < 5; ++i) store->weights()[aslots[i] * kDim] = 1000.0f + i;
    std::vector<int64_t> b = {6, 7, 8, 1}, bslots(4);
    ASSERT_TRUE(store->Resolve(b, absl::MakeSpan(bslots)).ok());
    EXPECT_EQ(bslots[3], aslots[0]);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) EXPECT_NE(bslots[i], aslots[j]);
    }
    for (int i = 0; i < 5; ++i) EXPECT_EQ(store->weights()[aslots[i] * kDim], 1000.0f + i);
    // 8 rows pinned: one more distinct row cannot fit.
    std::vector<int64_t> c = {9}, cslots(1);
    absl::Status s = store->Resolve(c, absl::MakeSpan(cslots));
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("9 distinct rows"), std::string::npos) << s;
    EXPECT_NE(s.message().find("holds 8 rows"), std::string::npos) << s;
    EXPECT_NE(s.message().find("table 7"), std::string::npos) << s;
    ASSERT_TRUE(store->EndStep().ok());
    // After the step the rows are evictable again and keep their values.
    ASSERT_TRUE(store->Resolve(c, absl::MakeSpan(cslots)).ok());
    ASSERT_TRUE(store->EndStep().ok());
    std::vector<float> w(5 * kDim);
    ASSERT_TRUE(store->ReadRows(1, 5, w.data(), nullptr).ok());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w[i * kDim], 1000.0f + i);
  }
}

TEST(TieredRowStoreTest, BadIdsAndRanges) {
  TempDir tmp;
  auto store_or = TieredRowStore::Open(TierOptions(tmp.Sub("db"), 16, CachePolicy::kLru));
  ASSERT_TRUE(store_or.ok());
  auto& store = *store_or;
  std::vector<int64_t> ids = {1, kRows}, slots(2);
  absl::Status s = store->Resolve(ids, absl::MakeSpan(slots));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 3000 at position 1"), std::string::npos) << s;
  std::vector<float> w(kDim);
  EXPECT_EQ(store->ReadRows(kRows, 1, w.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteRows(-1, 1, w.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->EndStep().ok());
  EXPECT_EQ(ParseCachePolicy("lfu").value(), CachePolicy::kLfu);
  EXPECT_EQ(ParseCachePolicy("arc").status().code(), absl::StatusCode::kInvalidArgument);
  auto o = TierOptions(tmp.Sub("x"), 0, CachePolicy::kLru);
  o.cache_bytes = 10;
  EXPECT_EQ(TieredRowStore::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

long MaxRssKib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A 2^31-row logical table (128 GiB at dim 16) where a few thousand rows are touched: memory is
// the cache, disk is the touched rows, and every row still has its value.
TEST(TieredRowStoreTest, HugeLogicalTableCostsOnlyTouchedRows) {
  TempDir tmp;
  TieredRowStoreOptions o;
  o.path = tmp.Sub("db");
  o.num_rows = int64_t{1} << 31;
  o.dim = 16;
  o.state_dim = 1;
  o.seed = 5;
  o.table_id = 1;
  o.cache_rows = 512;
  o.policy = CachePolicy::kLfu;
  long rss_before = MaxRssKib();
  auto store_or = TieredRowStore::Open(o);
  ASSERT_TRUE(store_or.ok()) << store_or.status();
  auto& store = *store_or;

  // Reference: the touched rows only, in a map, updated with the same formula.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> any(0, o.num_rows - 1);
  std::vector<int64_t> hot(200);
  for (auto& h : hot) h = any(rng);
  absl::flat_hash_map<int64_t, std::vector<float>> ref;
  RowOptimizerOptions opt;
  for (int t = 0; t < 40; ++t) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 100; ++i) ids.push_back(i % 2 ? hot[rng() % hot.size()] : any(rng));
    ASSERT_TRUE(TrainStep(store.get(), t, {ids}, nullptr).ok());
    absl::flat_hash_map<int64_t, std::vector<float>> grad;
    std::vector<int64_t> order;
    for (int64_t id : ids) {
      auto [it, inserted] = grad.try_emplace(id, std::vector<float>(16, 0.0f));
      if (inserted) order.push_back(id);
      for (int k = 0; k < 16; ++k) it->second[k] += testing::TestGrad(t, id, k);
    }
    for (int64_t id : order) {
      auto [it, inserted] = ref.try_emplace(id, std::vector<float>(17, 0.0f));
      if (inserted) InitRow(o.init, o.seed, o.table_id, o.num_rows, id, 16, it->second.data());
      ApplyRowUpdate(opt, 0.05f, t + 1, 16, grad[id].data(), it->second.data(),
                     it->second.data() + 16);
    }
  }
  ASSERT_GT(ref.size(), 2000u);
  for (const auto& [row, value] : ref) {
    std::vector<float> w(16), s(1);
    ASSERT_TRUE(store->ReadRows(row, 1, w.data(), s.data()).ok());
    ASSERT_EQ(std::memcmp(w.data(), value.data(), 16 * sizeof(float)), 0) << row;
    ASSERT_EQ(s[0], value[16]) << row;
  }
  // The last rows of the table work like any other.
  std::vector<float> w(2 * 16), expect(16);
  ASSERT_TRUE(store->ReadRows(o.num_rows - 2, 2, w.data(), nullptr).ok());
  InitRow(o.init, o.seed, o.table_id, o.num_rows, o.num_rows - 1, 16, expect.data());
  EXPECT_EQ(std::memcmp(w.data() + 16, expect.data(), 16 * sizeof(float)), 0);

  ASSERT_TRUE(store->Flush().ok());
  TieredRowStoreMetrics m = store->metrics();
  // ~ref.size() rows of 68 bytes + keys: well under 4 MiB on disk; memory far below the table.
  EXPECT_GT(m.sst_bytes, static_cast<int64_t>(ref.size()) * 68);
  EXPECT_LT(m.sst_bytes, 4 << 20);
  EXPECT_LT(MaxRssKib() - rss_before, 512 * 1024) << "RSS grew by more than 512 MiB";
}

}  // namespace
}  // namespace tessera
