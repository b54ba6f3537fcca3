// Sharded dynamic tables over the RocksDB tier, under mpirun -np 4: each rank's dynamic shard is
// a DynamicRowStore whose slot rows live in its own working database
// (<storage.path>/rank<r>-shard<k>) with its share of a cache smaller than the keys it holds.
// Trained with the next batch prefetched (the input dist's hint reads ahead by key), on 1x4 for
// row_wise, table_wise and table_row_wise plans: every step's pooled outputs, and at the end
// every shard's keys, weights, optimizer state, lookup counts, last steps and stats, are the
// same bits as the same sharded model in memory, while rows left the caches, were written to
// RocksDB, read back and read ahead. Replicas and a column split under row-wise AdaGrad are
// refused over the tier (their paths map slots to keys in memory only), as is a device cache.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dynamic_test_util.h"
#include "embedding/tiered_row_store.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"
#include "shared_temp_dir.h"

namespace tessera {
namespace {

using testing::World;

constexpr int kSteps = 24;

struct Trained {
  std::vector<std::vector<float>> outputs;  // per step, this rank's
  std::vector<DynamicTableState> tables;    // per dynamic table, gathered by key
  std::vector<DynamicTableStats> stats;
  std::vector<DynamicTableState> local;  // this rank's dynamic shards, in local order
  TieredRowStoreMetrics tier;            // summed over this rank's tiered dynamic shards
  bool ok = false;
};

// `dir` empty: in memory; else both dynamic tables over the tier at `dir` with a cache of
// `cache_rows` rows for the whole table (each shard its share).
ShardedEmbeddingOptions Options(ShardingType type, int group_size, ReplicaSync sync,
                                const std::string& dir, int64_t cache_rows) {
  ShardedEmbeddingOptions so;
  so.collection = testing::DynamicModel(RowOptimizerType::kRowWiseAdagrad);
  so.plan = testing::PlanOfType(type, so.collection.tables, group_size);
  so.replica_sync = sync;
  so.sync_every = 2;
  if (!dir.empty()) {
    for (int t = 0; t < 2; ++t) {
      TableStorage& st = so.collection.tables[t].storage;
      st.tier = StorageTier::kRocksDb;
      st.path = absl::StrCat(dir, "/", so.collection.tables[t].name);
      st.cache_rows = cache_rows;
      st.reader_threads = 2;
    }
  }
  return so;
}

Trained Train(const ProcessGrid& grid, const ShardedEmbeddingOptions& so) {
  Trained run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, DeviceContext::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  ShardedEmbeddingCollection& model = **m;
  const int me = World()->rank(), world = World()->size();
  const int64_t od = model.output_dim();
  for (int step = 1; step <= kSteps; ++step) {
    testing::GlobalBatch gb = testing::KeyedBatch(so.collection, world, step);
    if (step < kSteps) {
      model.Prefetch(testing::KeyedBatch(so.collection, world, step + 1).per_rank[me]);
    }
    run.outputs.emplace_back(gb.per_rank[me].batch_size * od);
    absl::Status fs = model.Forward(gb.per_rank[me], run.outputs.back().data());
    EXPECT_TRUE(fs.ok()) << "step " << step << ": " << fs;
    std::vector<float> g = testing::GlobalGrad(gb.global.batch_size, od, step);
    absl::Status bs = model.BackwardUpdate(g.data() + testing::RowsBefore(gb, me) * od, 0.5f, step);
    EXPECT_TRUE(bs.ok()) << "step " << step << ": " << bs;
    if (!fs.ok() || !bs.ok()) return run;
  }
  for (int t = 0; t < 2; ++t) {
    auto got = model.GatherDynamicTable(t, /*with_state=*/true);
    EXPECT_TRUE(got.ok()) << got.status();
    auto stats = model.DynamicStats(t);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!got.ok() || !stats.ok()) return run;
    run.tables.push_back(std::move(*got));
    run.stats.push_back(*stats);
  }
  for (const auto& ls : model.local_shards()) {
    if (ls.table > 1) continue;
    auto* d = static_cast<DynamicRowStore*>(ls.store);
    run.local.emplace_back();
    EXPECT_TRUE(d->SaveState(true, &run.local.back()).ok());
    if (d->tier() != nullptr) {
      const TieredRowStoreMetrics m = d->tier()->metrics();
      run.tier.evictions += m.evictions;
      run.tier.rows_read += m.rows_read;
      run.tier.prefetched_rows += m.prefetched_rows;
      run.tier.rows_written += m.rows_written;
    }
  }
  run.ok = true;
  return run;
}

void ExpectSameTable(const DynamicTableState& got, const DynamicTableState& want,
                     const std::string& what) {
  EXPECT_EQ(got.keys, want.keys) << what;
  EXPECT_EQ(got.weights, want.weights) << what;
  EXPECT_EQ(got.state, want.state) << what;
  EXPECT_EQ(got.lookups, want.lookups) << what;
  EXPECT_EQ(got.last_step, want.last_step) << what;
  testing::ExpectSameStats(got.stats, want.stats, what);
}

void ExpectSameRun(const Trained& tier, const Trained& mem) {
  ASSERT_TRUE(tier.ok && mem.ok);
  ASSERT_EQ(tier.outputs.size(), mem.outputs.size());
  for (size_t s = 0; s < mem.outputs.size(); ++s) {
    EXPECT_EQ(tier.outputs[s], mem.outputs[s]) << "step " << s + 1 << " outputs";
  }
  for (int t = 0; t < 2; ++t) {
    ASSERT_GT(mem.tables[t].keys.size(), 20u) << "table " << t << ": too few keys to test";
    ExpectSameTable(tier.tables[t], mem.tables[t], absl::StrCat("gathered table ", t));
    EXPECT_EQ(tier.stats[t].occupancy, mem.stats[t].occupancy) << "table " << t;
  }
  ASSERT_EQ(tier.local.size(), mem.local.size());
  for (size_t q = 0; q < mem.local.size(); ++q) {
    ExpectSameTable(tier.local[q], mem.local[q], absl::StrCat("local dynamic shard ", q));
  }
}

struct Shape {
  int group_size;
  ShardingType type;
  ReplicaSync sync;
  int64_t cache_rows;  // for the whole table; each shard its share
};

class ShardedDynamicTieredTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ShardedDynamicTieredTest, TrainsAsInMemoryBitForBit) {
  const Shape c = GetParam();
  testing::SharedTempDir tmp("tessera_sharded_dyntier_");
  auto grid =
      ProcessGrid::Create(World(), ProcessGridOptions{c.group_size, GridLayout::kReplicasAdjacent});
  ASSERT_TRUE(grid.ok()) << grid.status();
  const Trained mem = Train(*grid, Options(c.type, c.group_size, c.sync, "", 0));
  // Caches smaller than the keys a shard holds (asserted below) but holding one step's distinct
  // keys of a shard.
  const Trained tier =
      Train(*grid, Options(c.type, c.group_size, c.sync, tmp.path(), c.cache_rows));
  ExpectSameRun(tier, mem);
  // The caches were too small for the keys held: rows went to RocksDB and were read back,
  // and the next batch's rows were read ahead.
  int64_t counts[4] = {tier.tier.evictions, tier.tier.rows_written, tier.tier.rows_read,
                       tier.tier.prefetched_rows};
  ASSERT_TRUE(World()->AllReduce(counts, 4, ReduceOp::kSum).ok());
  std::printf("cache %lld: evictions %lld, written %lld, read %lld, prefetched %lld\n",
              static_cast<long long>(c.cache_rows), static_cast<long long>(counts[0]),
              static_cast<long long>(counts[1]), static_cast<long long>(counts[2]),
              static_cast<long long>(counts[3]));
  EXPECT_GT(counts[0], 0) << "no row left a cache";
  EXPECT_GT(counts[1], 0) << "no row was written to RocksDB";
  EXPECT_GT(counts[2], 0) << "no row was read back from RocksDB";
  EXPECT_GT(counts[3], 0) << "nothing was read ahead";
  // Each rank's shard databases, named by world rank and shard.
  bool any = false;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path() + "/users")) {
    any |= e.path().filename().string().rfind("rank", 0) == 0;
  }
  EXPECT_TRUE(any) << "no shard database under " << tmp.path() << "/users";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ShardedDynamicTieredTest,
    ::testing::Values(Shape{4, ShardingType::kRowWise, ReplicaSync::kExact, 80},
                      Shape{4, ShardingType::kTableWise, ReplicaSync::kExact, 40},
                      Shape{4, ShardingType::kTableRowWise, ReplicaSync::kExact, 80}),
    [](const auto& info) {
      const Shape& s = info.param;
      return absl::StrCat(4 / s.group_size, "x", s.group_size, "_", ShardingTypeName(s.type));
    });

// What a sharded dynamic table over the tier cannot do yet is refused, naming the table and why:
// a device cache, replicas (M > 1), a column split under row-wise AdaGrad.
TEST(ShardedDynamicTieredErrors, UnsupportedShapesAreRefused) {
  testing::SharedTempDir tmp("tessera_sharded_dyntier_err_");
  struct Bad {
    int group_size;
    ShardingType type;
    bool device_cache;
    const char* says;
  };
  for (const Bad& b : {Bad{4, ShardingType::kRowWise, true, "device_cache"},
                       Bad{2, ShardingType::kRowWise, false, "replicas"},
                       Bad{4, ShardingType::kColumnWise, false, "columns"}}) {
    SCOPED_TRACE(b.says);
    auto grid = ProcessGrid::Create(
        World(), ProcessGridOptions{b.group_size, GridLayout::kReplicasAdjacent});
    ASSERT_TRUE(grid.ok());
    ShardedEmbeddingOptions so =
        Options(b.type, b.group_size, ReplicaSync::kExact, b.device_cache ? "" : tmp.path(), 80);
    if (b.device_cache) so.collection.tables[0].storage.device_cache_rows = 64;
    auto m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("'users'"), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(b.says), std::string::npos) << m.status();
  }
}

}  // namespace
}  // namespace tessera
