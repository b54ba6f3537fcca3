// A dynamic table over the RocksDB tier (DynamicRowStore with tier.path) against the same table
// in memory: the same stream of skewed keys from a space larger than the capacity, with a row
// cache smaller than the rows the stream touches, trains bit for bit the same (every row read at
// Resolve, and after each step every key held with its weights, state, counts and the stats),
// for each eviction policy, min_count admission, prefetch on and off, evaluation and skipped
// steps in between; a resume from SaveState into a fresh tiered store equals the uninterrupted
// run; evicted keys' rows are deleted from RocksDB; a capacity the disk cannot hold is refused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/row_optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr int64_t kDim = 4;
constexpr int64_t kBatch = 64;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) /
                     (std::string("dynamic_tiered_") + name + "_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(p);
  return p.string();
}

struct Case {
  EvictionPolicy policy = EvictionPolicy::kLfu;
  int64_t min_count = 1;
  bool prefetch = true;
  CachePolicy cache_policy = CachePolicy::kLru;
  int64_t cache_rows = 70;  // one step's <= 65 distinct rows (64 ids + the zero row) fit
};

DynamicRowStoreOptions Options(const Case& c, const std::string& tier_path) {
  DynamicRowStoreOptions o;
  o.capacity = 100;
  o.dim = kDim;
  o.state_dim = 1;
  o.state_init = 0.5f;
  o.init.scale = 0.1f;
  o.seed = 77;
  o.table_id = 3;
  o.name = "dyn";
  o.dynamic.enabled = true;
  o.dynamic.policy = c.policy;
  if (c.policy == EvictionPolicy::kTtl) o.dynamic.ttl_steps = 3;
  o.dynamic.min_count = c.min_count;
  if (c.min_count > 1) o.dynamic.counter_slots = 1 << 16;
  if (!tier_path.empty()) {
    o.tier.path = tier_path;
    o.tier.discard_existing = true;
    o.tier.cache_rows = c.cache_rows;
    o.tier.policy = c.cache_policy;
    o.tier.prefetch = c.prefetch;
    o.tier.reader_threads = 2;
    o.tier.write_buffer_bytes = 4 << 20;
    o.tier.block_cache_bytes = 1 << 20;
  }
  return o;
}

// Zipf-like keys over `space` distinct values, scattered over 64 bits.
std::vector<int64_t> Batch(CounterRng& rng, uint64_t space) {
  std::vector<int64_t> ids(kBatch);
  for (auto& id : ids) {
    const double u = rng.NextUniformDouble();
    const uint64_t k = static_cast<uint64_t>(std::pow(static_cast<double>(space), u * u));
    id = static_cast<int64_t>(k * 0x9E3779B97F4A7C15ull);
  }
  return ids;
}

RowOptimizerOptions Adagrad() {
  RowOptimizerOptions o;
  o.type = RowOptimizerType::kRowWiseAdagrad;
  return o;
}

// One step: Resolve; the rows read (weights and state of every id, as a lookup sees them) into
// *seen; then, when `train`, a row-wise AdaGrad update per distinct slot and EndStep, else
// EndReadOnlyStep (an evaluation when the store does not admit, a skipped step otherwise).
void Step(DynamicRowStore& s, const std::vector<int64_t>& ids, bool train,
          std::vector<float>* seen) {
  std::vector<int64_t> slots(ids.size());
  ASSERT_TRUE(s.Resolve(ids, absl::MakeSpan(slots)).ok());
  const float* w = static_cast<const float*>(s.weight_data());
  seen->clear();
  for (int64_t slot : slots) {
    seen->insert(seen->end(), w + slot * kDim, w + (slot + 1) * kDim);
    seen->push_back(s.state()[slot]);
  }
  if (!train) {
    ASSERT_TRUE(s.EndReadOnlyStep().ok());
    return;
  }
  std::map<int64_t, std::vector<float>> grads;  // slot -> summed gradient, in id order
  for (size_t i = 0; i < ids.size(); ++i) {
    auto& g = grads[slots[i]];
    g.resize(kDim);
    const uint64_t key = static_cast<uint64_t>(ids[i]);
    for (int k = 0; k < kDim; ++k) g[k] += 0.01f * static_cast<float>((key % 7) + k) - 0.02f;
  }
  float* wm = static_cast<float*>(s.weight_data());
  for (auto& [slot, g] : grads) {
    ApplyRowUpdate(Adagrad(), 0.1f, s.stats().steps + 1, kDim, g.data(), wm + slot * kDim,
                   s.state() + slot);
  }
  ASSERT_TRUE(s.EndStep().ok());
}

void ExpectSameTable(const DynamicRowStore& a, const DynamicRowStore& b, int step) {
  DynamicTableState x, y;
  ASSERT_TRUE(a.SaveState(true, &x).ok());
  ASSERT_TRUE(b.SaveState(true, &y).ok());
  ASSERT_EQ(x.keys, y.keys) << "step " << step;
  ASSERT_EQ(x.weights, y.weights) << "step " << step;  // bytes: bit for bit
  ASSERT_EQ(std::memcmp(x.state.data(), y.state.data(), x.state.size() * sizeof(float)), 0)
      << "step " << step;
  ASSERT_EQ(x.lookups, y.lookups) << "step " << step;
  ASSERT_EQ(x.last_step, y.last_step) << "step " << step;
  ASSERT_EQ(x.sketch, y.sketch) << "step " << step;
  EXPECT_EQ(x.stats.admissions, y.stats.admissions);
  EXPECT_EQ(x.stats.evictions, y.stats.evictions);
  EXPECT_EQ(x.stats.refused, y.stats.refused);
  EXPECT_EQ(x.stats.unadmitted_lookups, y.stats.unadmitted_lookups);
}

// Steps `from`..`to`-1 of the stream on both stores (the same keys: rng streams by step).
void RunSteps(DynamicRowStore& mem, DynamicRowStore& tier, int from, int to) {
  std::vector<float> seen_mem, seen_tier;
  for (int step = from; step < to; ++step) {
    CounterRng rng(11, static_cast<uint64_t>(step));
    const std::vector<int64_t> ids = Batch(rng, 400);
    CounterRng next_rng(11, static_cast<uint64_t>(step + 1));
    tier.Prefetch(Batch(next_rng, 400));  // the next batch's keys, before this step's Resolve
    const bool eval = step % 7 == 3, skipped = step % 11 == 5;
    mem.set_admitting(!eval);
    tier.set_admitting(!eval);
    Step(mem, ids, !eval && !skipped, &seen_mem);
    Step(tier, ids, !eval && !skipped, &seen_tier);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(seen_mem, seen_tier) << "rows read at step " << step;
    ExpectSameTable(mem, tier, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void RunCase(const Case& c) {
  auto mem = DynamicRowStore::Create(Options(c, ""));
  auto tier = DynamicRowStore::Create(Options(c, TempDir("db")));
  ASSERT_TRUE(mem.ok()) << mem.status();
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_NE((*tier)->tier(), nullptr);
  RunSteps(**mem, **tier, 0, 70);
  const TieredRowStoreMetrics m = (*tier)->tier()->metrics();
  EXPECT_GT((*mem)->stats().admissions, 0);
  if (c.cache_rows < 101) {
    // The cache was smaller than the rows touched: rows went to RocksDB and came back.
    EXPECT_GT(m.evictions, 0);
    EXPECT_GT(m.rows_written, 0);
    EXPECT_GT(m.rows_read, 0);
    if (c.prefetch) EXPECT_GT(m.prefetch_used, 0);
  }
  if (c.policy != EvictionPolicy::kNone) {
    EXPECT_GT((*mem)->stats().evictions, 0);
    // The evicted keys' rows that a step trained were deleted (a key evicted before any step
    // resolved its row has nothing in the tier).
    EXPECT_GT(m.rows_deleted, 0);
    EXPECT_LE(m.rows_deleted, (*tier)->stats().evictions);
  }
}

TEST(DynamicTieredTest, LfuMatchesMemory) { RunCase({EvictionPolicy::kLfu}); }
TEST(DynamicTieredTest, LruMatchesMemoryLfuCache) {
  RunCase({EvictionPolicy::kLru, 1, true, CachePolicy::kLfu});
}
TEST(DynamicTieredTest, TtlMatchesMemory) { RunCase({EvictionPolicy::kTtl}); }
TEST(DynamicTieredTest, NoEvictionMatchesMemory) { RunCase({EvictionPolicy::kNone}); }
TEST(DynamicTieredTest, MinCountMatchesMemory) { RunCase({EvictionPolicy::kLfu, 2}); }
TEST(DynamicTieredTest, WithoutPrefetchMatchesMemory) {
  RunCase({EvictionPolicy::kLru, 1, false});
}
TEST(DynamicTieredTest, LargeCacheMatchesMemory) {
  RunCase({EvictionPolicy::kLfu, 1, true, CachePolicy::kLru, 1000});
}

TEST(DynamicTieredTest, ResumeFromSaveStateMatchesUninterrupted) {
  const Case c{EvictionPolicy::kLfu, 2};
  auto mem = DynamicRowStore::Create(Options(c, ""));
  auto tier = DynamicRowStore::Create(Options(c, TempDir("before")));
  ASSERT_TRUE(mem.ok() && tier.ok());
  RunSteps(**mem, **tier, 0, 35);
  DynamicTableState saved;
  ASSERT_TRUE((*tier)->SaveState(true, &saved).ok());
  tier->reset();  // the process ends
  auto resumed = DynamicRowStore::Create(Options(c, TempDir("after")));
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->LoadState(saved).ok());
  ExpectSameTable(**mem, **resumed, 35);
  RunSteps(**mem, **resumed, 35, 70);
}

TEST(DynamicTieredTest, LoadStateIntoAUsedStoreDropsItsRows) {
  const Case c{EvictionPolicy::kLru};
  auto mem = DynamicRowStore::Create(Options(c, ""));
  auto tier = DynamicRowStore::Create(Options(c, TempDir("db")));
  ASSERT_TRUE(mem.ok() && tier.ok());
  RunSteps(**mem, **tier, 0, 20);
  DynamicTableState early;
  ASSERT_TRUE((*mem)->SaveState(true, &early).ok());
  RunSteps(**mem, **tier, 20, 40);
  // Both go back to step 20 and run the same steps again.
  ASSERT_TRUE((*mem)->LoadState(early).ok());
  ASSERT_TRUE((*tier)->LoadState(early).ok());
  ExpectSameTable(**mem, **tier, 20);
  RunSteps(**mem, **tier, 20, 40);
}

TEST(DynamicTieredTest, EvictedRowsLeaveTheDatabase) {
  // Every key new (a stream of distinct ids): each step evicts what it admitted before.
  Case c{EvictionPolicy::kLru};
  auto tier = DynamicRowStore::Create(Options(c, TempDir("db")));
  ASSERT_TRUE(tier.ok());
  DynamicRowStore& s = **tier;
  std::vector<int64_t> ids(kBatch), slots(kBatch);
  int64_t next = 1;
  for (int step = 0; step < 200; ++step) {
    for (auto& id : ids) id = next++;
    ASSERT_TRUE(s.Resolve(ids, absl::MakeSpan(slots)).ok());
    ASSERT_TRUE(s.EndStep().ok());
  }
  ASSERT_TRUE(s.tier()->Flush().ok());
  const TieredRowStoreMetrics m = s.tier()->metrics();
  // Only the first 100 keys (admitted at their lookup) had rows trained; the later ones were
  // admitted at their step's end, never looked up again and evicted without a trace.
  EXPECT_EQ(m.rows_deleted, 100);
  EXPECT_GT(s.stats().evictions, 10000);
  // What RocksDB holds: at most the capacity's rows plus the zero row (a delete of a row not
  // yet written costs a tombstone until compaction, never a row).
  DynamicTableState st;
  ASSERT_TRUE(s.SaveState(true, &st).ok());
  EXPECT_LE(static_cast<int64_t>(st.keys.size()), 100);
  EXPECT_LT(m.sst_bytes, 200 * 1024);
}

TEST(DynamicTieredTest, CapacityAboveTheDiskIsResourceExhausted) {
  DynamicRowStoreOptions o = Options(Case{}, TempDir("huge"));
  o.capacity = int64_t{1} << 40;
  o.dim = 4096;
  auto made = DynamicRowStore::Create(o);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(made.status().message(), HasSubstr("table 'dyn'"));
  EXPECT_THAT(made.status().message(), HasSubstr("bytes of disk"));
  EXPECT_THAT(made.status().message(), HasSubstr(std::to_string(DynamicRowStore::DiskBytes(o))));
  EXPECT_FALSE(fs::exists(o.tier.path));  // nothing written
}

TEST(DynamicTieredTest, StepLargerThanTheCacheIsResourceExhausted) {
  Case c{EvictionPolicy::kNone};
  c.cache_rows = 10;
  auto tier = DynamicRowStore::Create(Options(c, TempDir("db")));
  ASSERT_TRUE(tier.ok());
  std::vector<int64_t> ids(kBatch), slots(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) ids[i] = i * 1000003;
  const absl::Status s = (*tier)->Resolve(ids, absl::MakeSpan(slots));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("table 'dyn'"));
}

}  // namespace
}  // namespace tessera
