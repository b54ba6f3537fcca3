// ShardedEmbeddingCollection under 4 ranks, average replica sync with sync_rows = all (the whole
// local shard averaged every k steps): k = 1 with SGD equals exact; k = 2 keeps replicas apart
// between syncs and bit-identical right after one; the replica-group all-reduce bytes per step
// are exactly shard bytes / k. Also the config key sharding.sync_rows (parse, emit, bad value).
#include <cmath>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"
#include "trainer/config.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::tessera::testing::World;
namespace tt = ::tessera::testing;

struct TrainedRun {
  std::vector<std::vector<float>> tables;  // full weights after training
  int64_t replica_allreduce_bytes = 0;     // replica-group all-reduce bytes during the steps
  int64_t replica_other_bytes = 0;         // replica-group bytes of every other collective
};

// Trains `steps` steps of the shared fixture and reads every table back.
TrainedRun Train(const ProcessGrid& grid, ShardingType type, RowOptimizerType opt, ReplicaSync sync,
                 SyncRows rows, int64_t k, int steps) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(opt);
  so.plan = tt::PlanOfType(type, so.collection.tables, grid.group_size());
  so.replica_sync = sync;
  so.sync_every = k;
  so.sync_rows = rows;
  TrainedRun run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, DeviceContext::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  ShardedEmbeddingCollection& model = **m;
  const int me = World()->rank();
  const int64_t od = model.output_dim();
  Communicator& rep = grid.replica_group();
  rep.ResetStats();
  for (int step = 1; step <= steps; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, World()->size(), step, false);
    std::vector<float> out(gb.per_rank[me].batch_size * od);
    EXPECT_TRUE(model.Forward(gb.per_rank[me], out.data()).ok());
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    EXPECT_TRUE(model.BackwardUpdate(grad.data() + tt::RowsBefore(gb, me) * od, 0.5f, step).ok());
  }
  run.replica_allreduce_bytes = rep.stats().bytes_of(CollectiveKind::kAllReduce);
  run.replica_other_bytes = rep.stats().total_bytes() - run.replica_allreduce_bytes;
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = so.collection.tables[t];
    run.tables.emplace_back(c.num_rows * c.dim);
    EXPECT_TRUE(model.ReadTable(t, 0, c.num_rows, run.tables.back().data()).ok());
  }
  return run;
}

// Every member of `comm` holds the same floats.
bool SameOnAll(Communicator& comm, const std::vector<float>& v) {
  std::vector<float> sum = v;
  EXPECT_TRUE(comm.AllReduce(sum.data(), sum.size(), ReduceOp::kAvg).ok());
  int64_t same = sum == v ? 1 : 0;
  EXPECT_TRUE(comm.AllReduce(&same, 1, ReduceOp::kSum).ok());
  return same == comm.size();
}

TEST(SyncRowsAllTest, EveryStepWithSgdEqualsExact) {
  for (int n : {1, 2}) {
    for (ShardingType type : {ShardingType::kTableWise, ShardingType::kRowWise,
                              ShardingType::kGrid}) {
      SCOPED_TRACE(std::to_string(4 / n) + "x" + std::to_string(n) + " " + ShardingTypeName(type));
      auto grid = ProcessGrid::Create(World(), {.group_size = n});
      ASSERT_TRUE(grid.ok());
      TrainedRun exact = Train(*grid, type, RowOptimizerType::kSgd, ReplicaSync::kExact,
                               SyncRows::kTouched, 1, 4);
      TrainedRun avg = Train(*grid, type, RowOptimizerType::kSgd, ReplicaSync::kAverage,
                             SyncRows::kAll, 1, 4);
      ASSERT_EQ(exact.tables.size(), 3u);
      ASSERT_EQ(avg.tables.size(), 3u);
      for (int t = 0; t < 3; ++t) {
        // Untouched rows average M equal copies (exact); touched rows as in the touched mode.
        tt::ExpectClose(avg.tables[t].data(), exact.tables[t].data(), exact.tables[t].size(),
                        2e-5, 1e-6, "table " + std::to_string(t));
      }
    }
  }
}

TEST(SyncRowsAllTest, ReplicasDifferBetweenSyncsAndAgreeAfter) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  Communicator& rep = grid->replica_group();
  for (RowOptimizerType opt : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
    SCOPED_TRACE(opt == RowOptimizerType::kSgd ? "sgd" : "rowwise_adagrad");
    TrainedRun odd = Train(*grid, ShardingType::kRowWise, opt, ReplicaSync::kAverage,
                           SyncRows::kAll, 2, 3);
    ASSERT_EQ(odd.tables.size(), 3u);
    bool all_same = true;
    for (const auto& t : odd.tables) all_same &= SameOnAll(rep, t);
    EXPECT_FALSE(all_same) << "replicas should differ between syncs";
    TrainedRun even = Train(*grid, ShardingType::kRowWise, opt, ReplicaSync::kAverage,
                            SyncRows::kAll, 2, 4);
    ASSERT_EQ(even.tables.size(), 3u);
    for (const auto& t : even.tables) {
      EXPECT_TRUE(SameOnAll(rep, t));
      for (float x : t) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

TEST(SyncRowsAllTest, ReplicaBytesPerStepAreShardBytesOverK) {
  for (RowOptimizerType opt : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
    SCOPED_TRACE(opt == RowOptimizerType::kSgd ? "sgd" : "rowwise_adagrad");
    auto grid = ProcessGrid::Create(World(), {.group_size = 2});
    ASSERT_TRUE(grid.ok());
    // This rank's shards in the plan: rows x (columns + optimizer state floats per row).
    const EmbeddingCollectionOptions co = tt::SmallModel(opt);
    const ShardingPlan plan = tt::PlanOfType(ShardingType::kGrid, co.tables, 2);
    const int64_t state = opt == RowOptimizerType::kSgd ? 0 : 1;
    int64_t shard_floats = 0;
    for (const TablePlan& tp : plan.tables) {
      for (const Shard& s : tp.shards) {
        if (s.rank == grid->shard_rank()) shard_floats += s.num_rows() * (s.num_cols() + state);
      }
    }
    ASSERT_GT(shard_floats, 0);
    const int m = grid->num_groups();
    // Ring all-reduce wire bytes as the communicator counts them: 2 (M - 1) / M of the payload.
    const int64_t per_sync = 2 * (m - 1) * shard_floats * 4 / m;
    const int steps = 8;
    int64_t per_step[3];
    int i = 0;
    for (int64_t k : {1, 2, 4}) {
      TrainedRun run = Train(*grid, ShardingType::kGrid, opt, ReplicaSync::kAverage,
                             SyncRows::kAll, k, steps);
      EXPECT_EQ(run.replica_allreduce_bytes, per_sync * (steps / k)) << "k=" << k;
      EXPECT_EQ(run.replica_other_bytes, 0) << "k=" << k << ": no id exchange with sync_rows all";
      ASSERT_EQ(run.replica_allreduce_bytes % steps, 0);
      per_step[i++] = run.replica_allreduce_bytes / steps;
    }
    EXPECT_EQ(per_step[0], 2 * per_step[1]);
    EXPECT_EQ(per_step[0], 4 * per_step[2]);
    if (World()->rank() == 0) {
      std::printf("replica all-reduce bytes/step, rank 0, sync_rows all: k=1 %lld k=2 %lld "
                  "k=4 %lld\n",
                  static_cast<long long>(per_step[0]), static_cast<long long>(per_step[1]),
                  static_cast<long long>(per_step[2]));
    }
  }
}

TEST(SyncRowsConfigTest, ParsesEmitsAndRejects) {
  EXPECT_EQ(*ParseSyncRows("touched"), SyncRows::kTouched);
  EXPECT_EQ(*ParseSyncRows("all"), SyncRows::kAll);
  EXPECT_THAT(ParseSyncRows("every").status().message(),
              HasSubstr("sharding.sync_rows: unknown value 'every' (expected touched or all)"));
  const std::string base =
      "model: {type: dlrm, num_dense: 2, embedding_dim: 4, bottom_mlp: [4], top_mlp: [1],\n"
      "        table_rows: [10, 10]}\n"
      "data: {format: synthetic, batch_size: 8}\n"
      "sharding:\n"
      "  replica_sync: average\n";
  auto def = ParseConfig(base, "t.yaml");
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->sharding.sync_rows, SyncRows::kTouched);
  auto all = ParseConfig(base + "  sync_rows: all\n", "t.yaml");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->sharding.sync_rows, SyncRows::kAll);
  auto again = ParseConfig(ConfigToYaml(*all), "t.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->sharding.sync_rows, SyncRows::kAll);
  auto bad = ParseConfig(base + "  sync_rows: some\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("t.yaml:6: sharding.sync_rows: expected one of touched, all"));
  auto over = ParseConfig(base, "t.yaml", {"sharding.sync_rows=none"});
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("sharding.sync_rows"));
  EXPECT_THAT(over.status().message(), HasSubstr("none"));
}

}  // namespace
}  // namespace tessera
