// ShardedEmbeddingCollection under 4 ranks with storage.device_cache_rows: every shard of a
// cached table is a DeviceRowCache (embedding/device_row_cache.h) over its rows in host memory
// or in the RocksDB tier. On the CPU the cache's slots are host memory (its CPU twin; on a GPU
// they are HBM), so this checks the sharded orchestration through caches: the pooled outputs of
// every step and the final rows and optimizer state equal the same model without caches, bit for
// bit, for table-wise, row-wise and column-wise plans, exact mode on 2x2 and 1x4 grids and
// average mode on 2x2, with caches smaller than the shards (evictions and write-backs every step).
#include <string>
#include <vector>

#include "embedding/device_row_cache.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr int64_t kRows = 2000;  // table 0 ("users", two features): larger than its caches
constexpr int kSteps = 12;

class SharedTempDir : public testing::SharedTempDir {
 public:
  SharedTempDir() : testing::SharedTempDir("tessera_sharded_dcache_") {}
};

enum class Storage { kPlain, kCached, kTierCached };

// Table 0 grown to kRows; kCached: table 0 (and table 1, whole) behind device caches over host
// memory; kTierCached: table 0 in RocksDB at `dir` (host cache of 300 rows per smallest shard)
// behind a device cache. The device cache of table 0 gets about 130 rows on its smallest shard
// (exact mode): one step touches at most 15 samples x 2 features x 4 ids = 120 rows of it.
ShardedEmbeddingOptions Options(ShardingType type, ReplicaSync sync, int n, Storage storage,
                                const std::string& dir) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(RowOptimizerType::kRowWiseAdagrad);
  so.collection.tables[0].num_rows = kRows;
  so.plan = tt::PlanOfType(type, so.collection.tables, n);
  so.replica_sync = sync;
  so.sync_every = 2;
  if (storage == Storage::kPlain) return so;
  int64_t min_rows = kRows;
  for (const Shard& sh : so.plan.tables[0].shards) min_rows = std::min(min_rows, sh.num_rows());
  auto scaled = [&](int64_t per_shard) { return (per_shard * kRows + min_rows - 1) / min_rows; };
  TableStorage& st = so.collection.tables[0].storage;
  // Average mode's sync also needs every row touched since the last sync (k = 2 steps, all
  // replicas) resident at once: about 180 rows here.
  st.device_cache_rows = scaled(sync == ReplicaSync::kExact ? 130 : 260);
  st.policy = CachePolicy::kLru;
  so.collection.tables[1].storage.device_cache_rows = so.collection.tables[1].num_rows;
  so.collection.tables[1].storage.policy = CachePolicy::kLfu;
  if (storage == Storage::kTierCached) {
    st.tier = StorageTier::kRocksDb;
    st.path = dir;
    st.cache_rows = scaled(300);
  }
  return so;
}

struct Trained {
  std::vector<std::vector<float>> outputs, weights, state;
  int64_t caches = 0, evictions = 0;  // over the world: cached shards, and their evictions
  bool ok = false;
};

Trained Train(const ProcessGrid& grid, const ShardedEmbeddingOptions& so) {
  tt::ShardedRun r =
      tt::TrainSharded(grid, so, DeviceContext::Cpu(), kSteps, World()->rank(), World()->size());
  Trained run;
  if (!r.ok) return run;
  run.outputs = std::move(r.outputs);
  run.weights = std::move(r.weights);
  run.state = std::move(r.state);
  int64_t c[2] = {0, 0};
  for (const auto& sh : r.model->local_shards()) {
    if (auto* cache = dynamic_cast<DeviceRowCache*>(sh.store)) {
      ++c[0];
      c[1] += cache->metrics().evictions;
    }
  }
  EXPECT_TRUE(World()->AllReduce(c, 2, ReduceOp::kSum).ok());
  run.caches = c[0];
  run.evictions = c[1];
  run.ok = true;
  return run;
}

void ExpectSame(const Trained& got, const Trained& want, const char* what) {
  ASSERT_TRUE(got.ok && want.ok) << what;
  for (size_t s = 0; s < want.outputs.size(); ++s) {
    EXPECT_EQ(got.outputs[s], want.outputs[s]) << what << ": pooled output of step " << s + 1;
  }
  for (size_t t = 0; t < want.weights.size(); ++t) {
    EXPECT_EQ(got.weights[t], want.weights[t]) << what << ": weights of table " << t;
    EXPECT_EQ(got.state[t], want.state[t]) << what << ": state of table " << t;
  }
}

TEST(ShardedDeviceCacheTest, CachedShardsTrainLikeUncachedBitForBit) {
  SharedTempDir tmp;
  struct Case {
    int n;
    ReplicaSync sync;
  };
  for (const Case& k : {Case{2, ReplicaSync::kExact}, Case{4, ReplicaSync::kExact},
                        Case{2, ReplicaSync::kAverage}}) {
    auto grid = ProcessGrid::Create(World(), {.group_size = k.n});
    ASSERT_TRUE(grid.ok()) << grid.status();
    for (ShardingType type :
         {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kColumnWise}) {
      SCOPED_TRACE(std::string(ShardingTypeName(type)) + " group " + std::to_string(k.n) +
                   (k.sync == ReplicaSync::kExact ? " exact" : " average"));
      const Trained plain = Train(*grid, Options(type, k.sync, k.n, Storage::kPlain, ""));
      const Trained cached = Train(*grid, Options(type, k.sync, k.n, Storage::kCached, ""));
      ExpectSame(cached, plain, "device caches over memory");
      // Every shard of tables 0 and 1 on every rank (M copies) is a cache, and table 0's evict.
      const int64_t shards = static_cast<int64_t>(Options(type, k.sync, k.n, Storage::kPlain, "")
                                                      .plan.tables[0]
                                                      .shards.size() +
                                                  Options(type, k.sync, k.n, Storage::kPlain, "")
                                                      .plan.tables[1]
                                                      .shards.size());
      EXPECT_EQ(cached.caches, shards * (4 / k.n));
      EXPECT_GT(cached.evictions, 0);
      EXPECT_EQ(plain.caches, 0);
      const Trained tiered =
          Train(*grid, Options(type, k.sync, k.n, Storage::kTierCached, tmp.path()));
      ExpectSame(tiered, plain, "device caches over the RocksDB tier");
    }
  }
}

}  // namespace
}  // namespace tessera
