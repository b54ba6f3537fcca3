// ShardedEmbeddingCollection under 4 ranks (2 sharding groups x 2) with one table in the RocksDB
// tier: each rank keeps a TieredRowStore per local shard at <path>/rank<r>-shard<k>, lazily
// initialised to the full table's slice. Exact mode trains to the same bits as the same model
// all in memory (table-wise, row-wise and grid plans, SGD and row-wise AdaGrad); average mode's
// touched-row sync works through the tiered stores (same bits as in memory, replicas agree right
// after a sync); a shard store that cannot be opened fails Create on every rank.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::World;
namespace tt = ::tessera::testing;

constexpr int kTiered = 0;      // the table in RocksDB ("users", two features)
constexpr int64_t kRows = 2000;  // its rows (larger than the caches below)

// The test's scratch directory, shared by all ranks.
class SharedTempDir : public testing::SharedTempDir {
 public:
  SharedTempDir() : testing::SharedTempDir("tessera_sharded_tier_") {}
};

struct Trained {
  std::vector<std::vector<float>> weights, state;  // per table, full, after training
  bool ok = false;
};

// The shared fixture with table 0 grown to kRows rows; tiered: in RocksDB at `dir` with a cache
// of `per_shard_cache` rows for the smallest shard of `plan` (the table's cache_rows scaled up
// so that shard gets at least that many), smaller than the shards.
ShardedEmbeddingOptions Options(ShardingType type, RowOptimizerType opt, ReplicaSync sync,
                                int group_size, const std::string& dir, int64_t per_shard_cache) {
  ShardedEmbeddingOptions so;
  so.collection = tt::SmallModel(opt);
  so.collection.tables[kTiered].num_rows = kRows;
  so.plan = tt::PlanOfType(type, so.collection.tables, group_size);
  so.replica_sync = sync;
  so.sync_every = 2;
  so.sync_rows = SyncRows::kTouched;
  if (!dir.empty()) {
    int64_t min_rows = kRows;
    for (const Shard& sh : so.plan.tables[kTiered].shards) {
      min_rows = std::min(min_rows, sh.num_rows());
    }
    TableStorage& st = so.collection.tables[kTiered].storage;
    st.tier = StorageTier::kRocksDb;
    st.path = dir;
    st.cache_rows = (per_shard_cache * kRows + min_rows - 1) / min_rows;
    st.reader_threads = 2;
  }
  return so;
}

Trained Train(const ProcessGrid& grid, const ShardedEmbeddingOptions& so, int steps) {
  Trained run;
  auto m = ShardedEmbeddingCollection::Create(so, grid, DeviceContext::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  ShardedEmbeddingCollection& model = **m;
  const int me = World()->rank();
  const int64_t od = model.output_dim();
  for (int step = 1; step <= steps; ++step) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch(so.collection, World()->size(), step, step % 2 == 0);
    std::vector<float> out(gb.per_rank[me].batch_size * od);
    absl::Status fs = model.Forward(gb.per_rank[me], out.data());
    EXPECT_TRUE(fs.ok()) << fs;
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, step);
    absl::Status bs =
        model.BackwardUpdate(grad.data() + tt::RowsBefore(gb, me) * od, 0.5f, step);
    EXPECT_TRUE(bs.ok()) << bs;
    if (!fs.ok() || !bs.ok()) return run;
  }
  const int64_t sd = so.collection.optimizer.type == RowOptimizerType::kRowWiseAdagrad ? 1 : 0;
  for (int t = 0; t < model.num_tables(); ++t) {
    const TableConfig& c = model.table(t);
    run.weights.emplace_back(c.num_rows * c.dim);
    run.state.emplace_back(c.num_rows * sd);
    absl::Status rs = model.ReadTable(t, 0, c.num_rows, run.weights.back().data(),
                                      sd > 0 ? run.state.back().data() : nullptr);
    EXPECT_TRUE(rs.ok()) << rs;
  }
  run.ok = true;
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

TEST(ShardedTieredTest, ExactModeMatchesInMemoryBitForBit) {
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  for (ShardingType type :
       {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kGrid}) {
    for (RowOptimizerType opt : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
      SCOPED_TRACE(std::string(ShardingTypeName(type)) +
                   (opt == RowOptimizerType::kSgd ? " sgd" : " rowwise_adagrad"));
      // One step touches at most 15 samples x 2 features x 4 ids = 120 rows of the table.
      Trained mem = Train(*grid, Options(type, opt, ReplicaSync::kExact, 2, "", 0), 6);
      Trained tier =
          Train(*grid, Options(type, opt, ReplicaSync::kExact, 2, tmp.path(), 130), 6);
      ASSERT_TRUE(mem.ok && tier.ok);
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(tier.weights[t], mem.weights[t]) << "table " << t;
        EXPECT_EQ(tier.state[t], mem.state[t]) << "table " << t;
      }
      // The training moved the tiered table away from its initial values.
      Trained init = Train(*grid, Options(type, opt, ReplicaSync::kExact, 2, "", 0), 0);
      ASSERT_TRUE(init.ok);
      EXPECT_NE(tier.weights[kTiered], init.weights[kTiered]);
    }
  }
  // Databases are named rank<world rank>-shard<k>: the row-wise plan put shard k of the tiered
  // table on shard rank k, so this rank holds rank<me>-shard<its shard rank>.
  const std::string mine = tmp.path() + "/rank" + std::to_string(World()->rank()) + "-shard" +
                           std::to_string(grid->shard_rank());
  EXPECT_TRUE(std::filesystem::is_directory(mine)) << mine;
}

// Evaluation (Forward without BackwardUpdate) over more distinct rows than a shard's cache: each
// forward-only step must be ended (its rows unpinned) by the next Forward, or the cache fills
// with pinned rows. Outputs equal the in-memory model's, and training goes on afterwards.
TEST(ShardedTieredTest, EvaluationForwardsDoNotAccumulatePinnedRows) {
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  const auto type = ShardingType::kRowWise;
  const auto opt = RowOptimizerType::kRowWiseAdagrad;
  auto mem = ShardedEmbeddingCollection::Create(
      Options(type, opt, ReplicaSync::kExact, 2, "", 0), *grid, DeviceContext::Cpu());
  auto tier = ShardedEmbeddingCollection::Create(
      Options(type, opt, ReplicaSync::kExact, 2, tmp.path(), 130), *grid, DeviceContext::Cpu());
  ASSERT_TRUE(mem.ok() && tier.ok());
  const int me = World()->rank();
  const int64_t od = (*mem)->output_dim();
  auto step = [&](int n, bool train) {
    tt::GlobalBatch gb = tt::MakeGlobalBatch((*mem)->options().collection, World()->size(), n,
                                             n % 2 == 0);
    std::vector<float> out_mem(gb.per_rank[me].batch_size * od), out_tier(out_mem.size());
    absl::Status a = (*mem)->Forward(gb.per_rank[me], out_mem.data());
    absl::Status b = (*tier)->Forward(gb.per_rank[me], out_tier.data());
    ASSERT_TRUE(a.ok()) << a;
    ASSERT_TRUE(b.ok()) << "forward " << n << ": " << b;
    EXPECT_EQ(out_mem, out_tier) << "forward " << n;
    if (!train) return;
    std::vector<float> grad = tt::GlobalGrad(gb.global.batch_size, od, n);
    const float* g = grad.data() + tt::RowsBefore(gb, me) * od;
    ASSERT_TRUE((*mem)->BackwardUpdate(g, 0.5f, n).ok());
    absl::Status u = (*tier)->BackwardUpdate(g, 0.5f, n);
    ASSERT_TRUE(u.ok()) << u;
  };
  for (int n = 1; n <= 2; ++n) step(n, /*train=*/true);
  // ~60 rows of each shard per forward, 130 cached: a few forwards pin more than the cache.
  for (int n = 100; n < 112; ++n) step(n, /*train=*/false);
  for (int n = 3; n <= 4; ++n) step(n, /*train=*/true);
}

TEST(ShardedTieredTest, AverageTouchedSyncAgreesAfterSyncAndMatchesInMemory) {
  SharedTempDir tmp;
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  Communicator& rep = grid->replica_group();
  for (RowOptimizerType opt : {RowOptimizerType::kSgd, RowOptimizerType::kRowWiseAdagrad}) {
    SCOPED_TRACE(opt == RowOptimizerType::kSgd ? "sgd" : "rowwise_adagrad");
    // sync_every 2: a sync resolves the rows touched over two steps (and the pending state).
    for (int steps : {3, 4}) {
      Trained mem = Train(*grid, Options(ShardingType::kRowWise, opt, ReplicaSync::kAverage, 2,
                                         "", 0), steps);
      Trained tier = Train(*grid, Options(ShardingType::kRowWise, opt, ReplicaSync::kAverage, 2,
                                          tmp.path(), 500), steps);
      ASSERT_TRUE(mem.ok && tier.ok);
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(tier.weights[t], mem.weights[t]) << "steps " << steps << " table " << t;
        EXPECT_EQ(tier.state[t], mem.state[t]) << "steps " << steps << " table " << t;
      }
      bool all_same = true;
      for (int t = 0; t < 3; ++t) all_same &= SameOnAll(rep, tier.weights[t]);
      if (steps == 4) {
        EXPECT_TRUE(all_same) << "replicas must agree right after a sync";
      } else {
        EXPECT_FALSE(all_same) << "replicas should differ between syncs";
      }
    }
  }
}

TEST(ShardedTieredTest, UnopenableShardStoreFailsCreateOnEveryRank) {
  SharedTempDir tmp;
  // A regular file where the database directory's parent should be.
  const std::string file = tmp.path() + "/not_a_dir";
  if (World()->rank() == 0) std::ofstream(file) << "x";
  ASSERT_TRUE(World()->Barrier().ok());
  auto grid = ProcessGrid::Create(World(), {.group_size = 2});
  ASSERT_TRUE(grid.ok());
  // Table-wise: only one rank per sharding group owns the tiered table and fails to open it;
  // the others must fail too instead of waiting in the first collective.
  ShardedEmbeddingOptions so = Options(ShardingType::kTableWise, RowOptimizerType::kSgd,
                                       ReplicaSync::kExact, 2, file + "/db", 130);
  auto m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(m.ok());
  const bool owner = so.plan.tables[kTiered].shards[0].rank == grid->shard_rank();
  if (owner) {
    EXPECT_NE(m.status().message().find(file), std::string::npos) << m.status();
  } else {
    EXPECT_NE(m.status().message().find("could not open their shard stores"), std::string::npos)
        << m.status();
  }
  // Missing path on the sharded path is named.
  so.collection.tables[kTiered].storage.path = "";
  m = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(m.ok());
  if (owner) {
    EXPECT_NE(m.status().message().find("table 'users': storage.tier rocksdb needs storage.path"),
              std::string::npos)
        << m.status();
  }
  // A data-parallel table cannot be tiered (same error on every rank).
  ShardedEmbeddingOptions dp = Options(ShardingType::kDataParallel, RowOptimizerType::kSgd,
                                       ReplicaSync::kExact, 2, tmp.path(), 130);
  m = ShardedEmbeddingCollection::Create(dp, *grid, DeviceContext::Cpu());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("table 'users': storage.tier rocksdb is not supported for "
                                      "a data_parallel table"),
            std::string::npos)
      << m.status();
}

}  // namespace
}  // namespace tessera
