// ShardedEmbeddingCollection under 4 ranks: average replica sync (k = 1 with SGD equals exact;
// k > 1 keeps replicas apart between syncs, equal after, and sends fewer replica-sync bytes),
// and the all-to-all of a batch touching only the ranks of one sharding group (2x2 vs 1x4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

struct TrainedRun {
  std::unique_ptr<ShardedEmbeddingCollection> model;
  std::vector<std::vector<float>> tables;  // full weights after training
};

// Trains `steps` steps of the shared fixture and reads every table back.
TrainedRun Train(const ProcessGrid& grid, ShardingType type, RowOptimizerType opt, ReplicaSync sync,
          int64_t k, int steps) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(opt);
  so.plan = tt::PlanOfType(type, so.collection.tables, grid.group_size());
  so.replica_sync = sync;
  so.sync_every = k;
  TrainedRun run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, DeviceContext::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  run.model = std::move(*m);
  const int me = World()->rank();
  const int64_t od = run.model->output_dim();
  for (int step = 1; step <= steps; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, World()->size(), step, false);
    std::vector<float> out(gb.per_rank[me].batch_size * od);
    EXPECT_TRUE(run.model->Forward(gb.per_rank[me], out.data()).ok());
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    EXPECT_TRUE(
        run.model->BackwardUpdate(grad.data() + tt::RowsBefore(gb, me) * od, 0.5f, step).ok());
  }
  for (int t = 0; t < 3; ++t) {
    const TableConfig& c = so.collection.tables[t];
    run.tables.emplace_back(c.num_rows * c.dim);
    EXPECT_TRUE(run.model->ReadTable(t, 0, c.num_rows, run.tables.back().data()).ok());
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

TEST(AverageSyncTest, EveryStepWithSgdEqualsExact) {
  for (int n : {1, 2}) {
    for (ShardingType type : {ShardingType::kTableWise, ShardingType::kRowWise,
                              ShardingType::kGrid}) {
      SCOPED_TRACE(std::to_string(4 / n) + "x" + std::to_string(n) + " " + ShardingTypeName(type));
      auto grid = ProcessGrid::Create(World(), {.group_size = n});
      ASSERT_TRUE(grid.ok());
      TrainedRun exact = Train(*grid, type, RowOptimizerType::kSgd, ReplicaSync::kExact, 1, 4);
      TrainedRun avg = Train(*grid, type, RowOptimizerType::kSgd, ReplicaSync::kAverage, 1, 4);
      ASSERT_EQ(exact.tables.size(), 3u);
      ASSERT_EQ(avg.tables.size(), 3u);
      for (int t = 0; t < 3; ++t) {
        // Average of M local steps with M-scaled gradients vs one step with the summed gradient:
        // equal up to float rounding.
        tt::ExpectClose(avg.tables[t].data(), exact.tables[t].data(), exact.tables[t].size(),
                        2e-5, 1e-6, "table " + std::to_string(t));
      }
    }
  }
}

TEST(AverageSyncTest, SyncEveryKStepsWithAdagrad) {
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  Communicator& rep = grid->replica_group();
  // After 3 steps with k = 2 the replicas have diverged (step 3 was local) ...
  TrainedRun odd = Train(*grid, ShardingType::kRowWise, RowOptimizerType::kRowWiseAdagrad,
                  ReplicaSync::kAverage, 2, 3);
  ASSERT_EQ(odd.tables.size(), 3u);
  bool all_same = true;
  for (const auto& t : odd.tables) all_same &= SameOnAll(rep, t);
  EXPECT_FALSE(all_same) << "replicas should differ between syncs";
  // ... and after 4 steps (a sync) they agree bit for bit.
  rep.ResetStats();
  TrainedRun even = Train(*grid, ShardingType::kRowWise, RowOptimizerType::kRowWiseAdagrad,
                   ReplicaSync::kAverage, 2, 4);
  const int64_t bytes_k2 = rep.stats().total_bytes();
  ASSERT_EQ(even.tables.size(), 3u);
  for (const auto& t : even.tables) EXPECT_TRUE(SameOnAll(rep, t));
  rep.ResetStats();
  TrainedRun every = Train(*grid, ShardingType::kRowWise, RowOptimizerType::kRowWiseAdagrad,
                    ReplicaSync::kAverage, 1, 4);
  const int64_t bytes_k1 = rep.stats().total_bytes();
  // Syncing half as often sends fewer bytes over the replica group (rows touched in two steps
  // overlap, so about, not exactly, half). Both counts cover training and ReadTable only.
  EXPECT_LT(bytes_k2, bytes_k1);
  // Trained, not diverged: all weights finite and not equal to the initial weights.
  for (const auto& t : every.tables) {
    for (float x : t) ASSERT_TRUE(std::isfinite(x));
  }
  if (World()->rank() == 0) {
    std::printf("replica-sync bytes over 4 steps, rank 0: k=1 %lld, k=2 %lld\n",
                static_cast<long long>(bytes_k1), static_cast<long long>(bytes_k2));
  }
}

// The batch all-to-all stays inside the sharding group: its members are the grid's group, the
// world and replica communicators carry no all-to-all, and each rank's peers are group members.
TEST(ByteCountersTest, AllToAllStaysInsideTheShardingGroup) {
  int64_t a2a_bytes[2] = {0, 0};
  int max_peers[2] = {0, 0};
  int idx = 0;
  for (int n : {2, 4}) {
    for (GridLayout layout : {GridLayout::kReplicasAdjacent, GridLayout::kGroupsContiguous}) {
      auto grid = ProcessGrid::Create(World(), {.group_size = n, .layout = layout});
      ASSERT_TRUE(grid.ok());
      grid->world().ResetStats();
      grid->sharding_group().ResetStats();
      grid->replica_group().ResetStats();
      TrainedRun run = Train(*grid, ShardingType::kTableWise, RowOptimizerType::kSgd,
                      ReplicaSync::kExact, 1, 2);
      const CollectiveStats& g = grid->sharding_group().stats();
      EXPECT_EQ(grid->world().stats().calls_of(CollectiveKind::kAllToAll), 0);
      EXPECT_EQ(grid->replica_group().stats().calls_of(CollectiveKind::kAllToAll), 0);
      EXPECT_GT(g.calls_of(CollectiveKind::kAllToAll), 0);
      const std::vector<int> members = grid->shape().ShardingGroupRanks(grid->group());
      EXPECT_EQ(grid->sharding_group().world_ranks(), members);
      int peers = 0;
      for (int r = 0; r < n; ++r) peers += g.peer_bytes[r] > 0 ? 1 : 0;
      EXPECT_LE(peers, n - 1);
      if (layout == GridLayout::kReplicasAdjacent) {
        // Sum over ranks of all-to-all bytes for the same global batch, and the widest fan-out.
        int64_t b = g.bytes_of(CollectiveKind::kAllToAll);
        ASSERT_TRUE(World()->AllReduce(&b, 1, ReduceOp::kSum).ok());
        int64_t p = peers;
        std::vector<int64_t> all(4);
        ASSERT_TRUE(World()->AllGatherCounts(p, absl::MakeSpan(all)).ok());
        a2a_bytes[idx] = b;
        max_peers[idx] = static_cast<int>(*std::max_element(all.begin(), all.end()));
        ++idx;
      }
    }
  }
  // 2x2: each rank talks to 1 peer; 1x4: up to 3. Fewer ids leave a rank in 2x2.
  EXPECT_EQ(max_peers[0], 1);
  EXPECT_EQ(max_peers[1], 3);
  EXPECT_LT(a2a_bytes[0], a2a_bytes[1]);
  if (World()->rank() == 0) {
    std::printf("all-to-all bytes, 2 steps, all ranks: 2x2 %lld, 1x4 %lld\n",
                static_cast<long long>(a2a_bytes[0]), static_cast<long long>(a2a_bytes[1]));
  }
}

}  // namespace
}  // namespace tessera
