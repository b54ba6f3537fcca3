// Dynamic tables sharded by key hash (sharding/key_routing.h), under mpirun -np 4: a
// ShardedEmbeddingCollection with two dynamic tables (admission by min_count with a sketch large
// enough to see no collisions, and by a probability coin; eviction none and ttl) and one static
// table trains the same model as one EmbeddingCollection on the global batch, on 2 ranks (1x2, a
// sub-world of the first two ranks) and 4 ranks (1x4, and replicas: 2x2 and 4x1 in exact mode,
// 2x2 in average mode with k = 1 and SGD), for table_wise, row_wise, column_wise,
// table_row_wise and grid plans, SGD, row-wise AdaGrad and Adam:
//   - the same keys hold rows, with the same lookup counts and last steps, and the same
//     admissions, evictions, refusals, lookups and unadmitted lookups (exactly: these are
//     decisions, not sums);
//   - in exact mode (1x2, 1x4, and with replicas 2x2 and 4x1) the dynamic tables' pooled
//     outputs, weights and optimizer state are the one process's bit for bit (memcmp): row-split
//     tables pool the returned rows in bag order, shards sum row gradients in the global batch's
//     order, mean tables scale each id as one process does, column-split AdaGrad rebuilds whole
//     rows, replicas sum each other's received gradients in world rank order
//     (sharding/internal/output_dist.h, shard_update.h, replica_sync_dynamic.cc); the static
//     table's columns stay within rtol 2e-5 (its row-wise partial sums are added in shard
//     order, and its replicas' sums all-reduced);
//   - average mode with k = 1 (2x2, SGD) within rtol 2e-5 (the replicas' weights averaged).
// A rank with an empty local batch at one step (1x4, 2x2 exact) changes none of this, nor do
// 16-bit dynamic tables (bf16 and fp16 storage, exact mode).
// Average mode with k = 2: every replica holds the same keys, and after a sync the same rows.
// Bad plans: a dynamic table data_parallel is refused naming the table.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rng.h"
#include "dynamic_test_util.h"
#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using testing::World;

constexpr int kSteps = 6;

struct Reference {
  std::vector<std::vector<float>> outputs;  // per step, the global batch's
  std::vector<DynamicTableState> tables;    // per dynamic table
  std::vector<DynamicTableStats> stats;
};

Reference TrainOne(const EmbeddingCollectionOptions& o, int world, int empty_rank) {
  Reference ref;
  auto c = EmbeddingCollection::Create(o, DeviceContext::Cpu());
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return ref;
  const int64_t od = (*c)->output_dim();
  for (int step = 1; step <= kSteps; ++step) {
    testing::GlobalBatch gb = testing::KeyedBatch(o, world, step, empty_rank);
    ref.outputs.emplace_back(gb.global.batch_size * od);
    EXPECT_TRUE((*c)->Forward(gb.global, ref.outputs.back().data()).ok());
    std::vector<float> g = testing::GlobalGrad(gb.global.batch_size, od, step);
    EXPECT_TRUE((*c)->BackwardUpdate(g.data(), 0.5f, step).ok());
  }
  for (int t = 0; t < 2; ++t) {
    auto* d = dynamic_cast<DynamicRowStore*>(&(*c)->store(t));
    ref.tables.emplace_back();
    EXPECT_TRUE(d->SaveState(true, &ref.tables.back()).ok());
    ref.stats.push_back(d->stats());
  }
  return ref;
}

struct Case {
  int ranks;
  int group_size;
  ShardingType type;
  ReplicaSync sync;
  RowOptimizerType opt;
  int empty_rank = -1;  // KeyedBatch's
  bool half = false;    // DynamicModel's
};

std::string Name(const Case& c) {
  return absl::StrCat(c.ranks, " ranks ", c.ranks / c.group_size, "x", c.group_size, " ",
                      ShardingTypeName(c.type), " ", ReplicaSyncName(c.sync), " ",
                      RowOptimizerTypeName(c.opt), c.half ? " 16-bit" : "");
}

std::shared_ptr<Communicator> SubWorld(int ranks) {
  if (ranks == World()->size()) return World();
  const bool in = World()->rank() < ranks;
  auto sub = World()->Split(in ? 0 : 1, World()->rank());
  EXPECT_TRUE(sub.ok()) << sub.status();
  if (!sub.ok() || !in) return nullptr;
  return std::shared_ptr<Communicator>(std::move(*sub));
}

// got[i] == want[i] as bits for i < n (stride 1), else ADD_FAILURE naming the first few.
void ExpectSameBits(const float* got, const float* want, int64_t n, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (std::memcmp(got + i, want + i, sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (not bit-identical)";
      ++bad;
    }
  }
}

void RunCase(const Case& c) {
  SCOPED_TRACE(Name(c));
  const EmbeddingCollectionOptions o = testing::DynamicModel(c.opt, c.half);
  const Reference ref = TrainOne(o, c.ranks, c.empty_rank);
  std::shared_ptr<Communicator> comm = SubWorld(c.ranks);
  if (comm == nullptr) return;
  auto grid =
      ProcessGrid::Create(comm, ProcessGridOptions{c.group_size, GridLayout::kReplicasAdjacent});
  ASSERT_TRUE(grid.ok()) << grid.status();
  ShardedEmbeddingOptions so;
  so.collection = o;
  so.plan = testing::PlanOfType(c.type, o.tables, c.group_size);
  so.replica_sync = c.sync;
  so.sync_every = 1;
  auto m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  ShardedEmbeddingCollection& model = **m;
  const int me = comm->rank();
  const int64_t od = model.output_dim();
  // Bit for bit: one sharding group, or replicas in exact mode (average mode's replicas average
  // their weights).
  const bool bitwise = c.group_size == c.ranks || c.sync == ReplicaSync::kExact;
  std::vector<int> table_of(o.num_features);
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    for (int f : o.tables[t].features) table_of[f] = t;
  }
  for (int step = 1; step <= kSteps; ++step) {
    testing::GlobalBatch gb = testing::KeyedBatch(o, c.ranks, step, c.empty_rank);
    if (step < kSteps) {
      model.Prefetch(testing::KeyedBatch(o, c.ranks, step + 1, c.empty_rank).per_rank[me]);
    }
    const int64_t b = gb.per_rank[me].batch_size, before = testing::RowsBefore(gb, me);
    std::vector<float> out(b * od);
    ASSERT_TRUE(model.Forward(gb.per_rank[me], out.data()).ok());
    const float* want = ref.outputs[step - 1].data() + before * od;
    for (int f = 0; f < o.num_features; ++f) {
      // One sharding group: the dynamic tables' columns bit for bit (output_dist.h).
      const bool exact = bitwise && table_of[f] < 2;
      const int64_t c0 = model.feature_column(f), w = o.tables[table_of[f]].dim;
      for (int64_t i = 0; i < b; ++i) {
        const std::string what = absl::StrCat("step ", step, " feature ", f, " sample ", i);
        if (exact) {
          ExpectSameBits(out.data() + i * od + c0, want + i * od + c0, w, what);
        } else {
          testing::ExpectClose(out.data() + i * od + c0, want + i * od + c0, w, 2e-5, 1e-6, what);
        }
      }
    }
    std::vector<float> g = testing::GlobalGrad(gb.global.batch_size, od, step);
    ASSERT_TRUE(model.BackwardUpdate(g.data() + before * od, 0.5f, step).ok());
  }
  for (int t = 0; t < 2; ++t) {
    const std::string what = absl::StrCat("table ", o.tables[t].name);
    auto got = model.GatherDynamicTable(t, /*with_state=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    const DynamicTableState& want = ref.tables[t];
    ASSERT_GT(want.keys.size(), 4u) << what;
    ASSERT_EQ(got->keys, want.keys) << what << ": the keys holding rows differ";
    EXPECT_EQ(got->lookups, want.lookups) << what;
    EXPECT_EQ(got->last_step, want.last_step) << what;
    auto stats = model.DynamicStats(t);
    ASSERT_TRUE(stats.ok()) << stats.status();
    testing::ExpectSameStats(*stats, ref.stats[t], what);
    ASSERT_EQ(got->weights.size(), want.weights.size());
    const auto* gw = reinterpret_cast<const float*>(got->weights.data());
    const auto* rw = reinterpret_cast<const float*>(want.weights.data());
    const int64_t nw = static_cast<int64_t>(got->weights.size() / 4);
    ASSERT_EQ(got->state.size(), want.state.size());
    const int64_t ns = static_cast<int64_t>(got->state.size());
    if (bitwise) {
      ExpectSameBits(gw, rw, nw, what + " weights");
      ExpectSameBits(got->state.data(), want.state.data(), ns, what + " state");
    } else {
      testing::ExpectClose(gw, rw, nw, 2e-5, 1e-6, what + " weights");
      testing::ExpectClose(got->state.data(), want.state.data(), ns, 2e-5, 1e-6, what + " state");
    }
  }
}

class ShardedDynamicTest : public ::testing::TestWithParam<ShardingType> {};

TEST_P(ShardedDynamicTest, TwoRanksTrainAsOne) {
  for (RowOptimizerType opt : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
    RunCase({2, 2, GetParam(), ReplicaSync::kExact, opt});
  }
}

TEST_P(ShardedDynamicTest, FourRanksTrainAsOne) {
  RunCase({4, 4, GetParam(), ReplicaSync::kExact, RowOptimizerType::kRowWiseAdagrad});
  RunCase({4, 4, GetParam(), ReplicaSync::kExact, RowOptimizerType::kAdam});
}

TEST_P(ShardedDynamicTest, EmptyLocalBatch) {
  // At step 3 one rank has no samples (1x4: rank 2; 2x2: rank 1): still bit for bit.
  RunCase({4, 4, GetParam(), ReplicaSync::kExact, RowOptimizerType::kRowWiseAdagrad, 2});
  RunCase({4, 2, GetParam(), ReplicaSync::kExact, RowOptimizerType::kAdam, 1});
}

TEST_P(ShardedDynamicTest, SixteenBitTablesTrainAsOne) {
  // bf16 / fp16 storage (stochastic rounding): 1x2 SGD, 1x4 Adam, 2x2 exact row-wise AdaGrad
  // (which a column split does not take with 16-bit rows: column_wise and grid use SGD there).
  const bool col = GetParam() == ShardingType::kColumnWise || GetParam() == ShardingType::kGrid;
  RunCase({2, 2, GetParam(), ReplicaSync::kExact, RowOptimizerType::kSgd, -1, true});
  RunCase({4, 4, GetParam(), ReplicaSync::kExact, RowOptimizerType::kAdam, -1, true});
  RunCase({4, 2, GetParam(), ReplicaSync::kExact,
           col ? RowOptimizerType::kSgd : RowOptimizerType::kRowWiseAdagrad, -1, true});
}

TEST_P(ShardedDynamicTest, ReplicasTrainAsOne) {
  // Exact mode with replicas (2x2, 4x1), and average mode with k = 1 and SGD (= exact).
  RunCase({4, 2, GetParam(), ReplicaSync::kExact, RowOptimizerType::kRowWiseAdagrad});
  RunCase({4, 2, GetParam(), ReplicaSync::kExact, RowOptimizerType::kAdam});
  RunCase({4, 1, GetParam(), ReplicaSync::kExact, RowOptimizerType::kSgd});
  RunCase({4, 2, GetParam(), ReplicaSync::kAverage, RowOptimizerType::kSgd});
}

INSTANTIATE_TEST_SUITE_P(Plans, ShardedDynamicTest,
                         ::testing::Values(ShardingType::kTableWise, ShardingType::kRowWise,
                                           ShardingType::kColumnWise, ShardingType::kTableRowWise,
                                           ShardingType::kGrid),
                         [](const auto& info) {
                           return std::string(ShardingTypeName(info.param));
                         });

// Average mode, k = 2, row-wise AdaGrad on 2x2: the replicas admit and evict on the replica
// group's lookups, so they hold the same keys at every step; after a sync (even steps) the
// weights of every key are the same on both.
TEST(ShardedDynamicAverage, ReplicasHoldTheSameKeys) {
  const EmbeddingCollectionOptions o = testing::DynamicModel(RowOptimizerType::kRowWiseAdagrad);
  auto grid = ProcessGrid::Create(World(), ProcessGridOptions{2, GridLayout::kReplicasAdjacent});
  ASSERT_TRUE(grid.ok()) << grid.status();
  ShardedEmbeddingOptions so;
  so.collection = o;
  so.plan = testing::PlanOfType(ShardingType::kRowWise, o.tables, 2);
  so.replica_sync = ReplicaSync::kAverage;
  so.sync_every = 2;
  auto m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_TRUE(m.ok()) << m.status();
  const int me = World()->rank();
  const int64_t od = (*m)->output_dim();
  Communicator& replicas = grid->replica_group();
  for (int step = 1; step <= kSteps; ++step) {
    testing::GlobalBatch gb = testing::KeyedBatch(o, 4, step);
    const int64_t b = gb.per_rank[me].batch_size, before = testing::RowsBefore(gb, me);
    std::vector<float> out(b * od);
    ASSERT_TRUE((*m)->Forward(gb.per_rank[me], out.data()).ok());
    std::vector<float> g = testing::GlobalGrad(gb.global.batch_size, od, step);
    ASSERT_TRUE((*m)->BackwardUpdate(g.data() + before * od, 0.5f, step).ok());
    for (const auto& ls : (*m)->local_shards()) {
      if (ls.table > 1) continue;
      DynamicTableState st;
      ASSERT_TRUE(static_cast<DynamicRowStore*>(ls.store)->SaveState(true, &st).ok());
      // Every replica's keys (and after a sync its weights) against replica 0's.
      int64_t n = static_cast<int64_t>(st.keys.size());
      ASSERT_TRUE(replicas.Broadcast(&n, 8, 0).ok());
      ASSERT_EQ(n, static_cast<int64_t>(st.keys.size())) << "step " << step;
      std::vector<uint64_t> keys0 = st.keys;
      ASSERT_TRUE(replicas.Broadcast(keys0.data(), n * 8, 0).ok());
      EXPECT_EQ(keys0, st.keys) << "step " << step << " table " << ls.table;
      if (step % 2 == 0) {
        std::vector<uint8_t> w0 = st.weights;
        ASSERT_TRUE(replicas.Broadcast(w0.data(), static_cast<int64_t>(w0.size()), 0).ok());
        EXPECT_EQ(w0, st.weights) << "step " << step << " table " << ls.table;
      }
    }
  }
}

TEST(ShardedDynamicErrors, DataParallelIsRefused) {
  const EmbeddingCollectionOptions o = testing::DynamicModel(RowOptimizerType::kSgd);
  auto grid = ProcessGrid::Create(World(), ProcessGridOptions{4, GridLayout::kReplicasAdjacent});
  ASSERT_TRUE(grid.ok());
  ShardedEmbeddingOptions so;
  so.collection = o;
  so.plan = testing::PlanOfType(ShardingType::kDataParallel, o.tables, 4);
  auto m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("table 'users' is dynamic"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("data_parallel"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace tessera
