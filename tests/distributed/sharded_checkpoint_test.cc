// Checkpoint and resume of a sharded model on 4 ranks (2x2 grid): a model trained K steps,
// checkpointed, and trained on must end bit-identical (every table's weights and optimizer state
// via ReadTable, dense parameters and dense optimizer state) to a second model restored from the
// checkpoint that trains the same steps. Exact mode with table-wise, row-wise, grid and
// data-parallel plans, a RocksDB-tier table, and average mode checkpointed between two syncs.
// And the refusals: another model (tables, seed, row optimizer), a missing rank file; a rank
// whose dense model diverged fails the write everywhere with LATEST unmoved; ranks that see
// different LATEST files fail together.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/synthetic.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/internal/sharded_checkpoint.h"
#include "trainer/model.h"
#include "trainer/sharded_sparse_arch.h"

namespace tessera {
namespace {

using testing::World;

constexpr int kSteps = 7;       // total
constexpr int kCheckpoint = 3;  // checkpointed after this many (odd: average mode mid-interval)
constexpr int64_t kGlobalBatch = 16;

// The test's scratch directory, shared by all ranks.
class SharedTempDir : public testing::SharedTempDir {
 public:
  SharedTempDir() : testing::SharedTempDir("tessera_sharded_ckpt_") {}
};

Config MakeConfig() {
  Config c;
  c.seed = 23;
  c.model.interaction = InteractionType::kDot;
  c.model.num_dense = 3;
  c.model.embedding_dim = 8;
  c.model.bottom_mlp = {8, 8};
  c.model.top_mlp = {8, 1};
  const int64_t rows[] = {40, 30, 600};
  for (int f = 0; f < 3; ++f) {
    TableConfig t;
    t.name = "t" + std::to_string(f);
    t.num_rows = rows[f];
    t.dim = 8;
    t.features = {f};
    c.model.tables.push_back(t);
  }
  c.optimizer.embedding.type = RowOptimizerType::kRowWiseAdagrad;
  c.optimizer.embedding_lr = 0.05f;
  c.optimizer.dense.type = DenseOptimizerType::kAdam;  // dense optimizer state to restore
  c.optimizer.dense_lr = 0.01f;
  c.optimizer.schedule.base_lr = 1.0f;
  return c;
}

struct RunSetup {
  ShardingType type = ShardingType::kRowWise;
  int group_size = 2;
  ReplicaSync sync = ReplicaSync::kExact;
  std::string tier_dir;  // non-empty: table t2 in the RocksDB tier under it
};

std::unique_ptr<Model> Build(const Config& config, const RunSetup& s) {
  auto grid = ProcessGrid::Create(World(), ProcessGridOptions{s.group_size,
                                                              GridLayout::kReplicasAdjacent});
  EXPECT_TRUE(grid.ok()) << grid.status();
  if (!grid.ok()) return nullptr;
  ShardedEmbeddingOptions so;
  so.collection = EmbeddingOptionsFromConfig(config);
  so.plan = testing::PlanOfType(s.type, so.collection.tables, s.group_size);
  so.replica_sync = s.sync;
  so.sync_every = 2;
  if (!s.tier_dir.empty()) {
    TableStorage& st = so.collection.tables[2].storage;
    st.tier = StorageTier::kRocksDb;
    st.path = s.tier_dir;
    st.cache_rows = 200;  // a third of the table: rows go to RocksDB and back
  }
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  EXPECT_TRUE(sharded.ok()) << sharded.status();
  if (!sharded.ok()) return nullptr;
  auto model = Model::Create(config, DeviceContext::Cpu(),
                             std::make_unique<ShardedSparseArch>(std::move(*sharded)),
                             World().get());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// This rank's local batches, one per step.
std::vector<Batch> LocalBatches(const Config& c) {
  SyntheticDataOptions o;
  for (const TableConfig& t : c.model.tables) o.rows_per_feature.push_back(t.num_rows);
  o.pooling = {1, 3, 2};
  o.num_dense = c.model.num_dense;
  o.seed = 5;
  SyntheticStreamOptions so;
  so.num_samples = kGlobalBatch * World()->size() * kSteps;
  so.batch_size = kGlobalBatch;
  auto reader = SyntheticReader::Open(o, so);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<Batch> out;
  // Rank r takes every size()-th batch: different data per rank.
  for (int i = 0; i < kSteps * World()->size(); ++i) {
    Batch b;
    EXPECT_TRUE(*(*reader)->Next(&b));
    if (i % World()->size() == World()->rank()) out.push_back(std::move(b));
  }
  return out;
}

void Train(Model& m, const std::vector<Batch>& batches, int from, int to) {
  for (int step = from; step < to; ++step) {
    auto loss = m.TrainStep(batches[step], step);
    ASSERT_TRUE(loss.ok()) << loss.status();
  }
}

// Every table's weights and state (ReadTable: collective), dense parameters and dense optimizer
// state, and the optimizer's step count.
std::vector<std::vector<float>> Snapshot(Model& m) {
  std::vector<std::vector<float>> out;
  auto& tables = static_cast<ShardedSparseArch&>(m.sparse()).collection();
  for (int t = 0; t < tables.num_tables(); ++t) {
    const TableConfig& tc = tables.table(t);
    const int64_t sd = RowStateDim(tables.options().collection.optimizer.type, tc.dim);
    out.emplace_back(tc.num_rows * tc.dim);
    out.emplace_back(tc.num_rows * sd);
    EXPECT_TRUE(tables.ReadTable(t, 0, tc.num_rows, out[out.size() - 2].data(),
                                 out.back().data()).ok());
  }
  std::vector<Parameter*> params = m.dense_parameters();
  for (Parameter* p : m.dense_optimizer().state()) params.push_back(p);
  for (Parameter* p : params) {
    const float* v = p->value.data<float>();
    out.emplace_back(v, v + p->value.numel());
  }
  out.push_back({static_cast<float>(m.dense_optimizer().steps_taken())});
  return out;
}

void ExpectBitIdentical(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " tensor " << i;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << what << ": tensor " << i << " differs on rank " << World()->rank();
  }
}

std::string Name(const RunSetup& s) {
  return std::string(ShardingTypeName(s.type)) +
         (s.sync == ReplicaSync::kAverage ? " average" : " exact") +
         (s.tier_dir.empty() ? "" : " rocksdb");
}

// Train kCheckpoint steps, checkpoint, train to kSteps; a fresh model restored from the
// checkpoint (its tiered shards elsewhere) trains the same steps: same bits.
void ResumeEqualsUninterrupted(RunSetup s, const SharedTempDir& tmp) {
  const Config config = MakeConfig();
  const std::vector<Batch> batches = LocalBatches(config);
  const std::string dir = tmp.path() + "/ckpt_" + std::to_string(static_cast<int>(s.type)) +
                          (s.sync == ReplicaSync::kAverage ? "_avg" : "_exact") +
                          (s.tier_dir.empty() ? "" : "_tier");
  if (!s.tier_dir.empty()) s.tier_dir = tmp.path() + "/tier_a";
  auto a = Build(config, s);
  ASSERT_NE(a, nullptr);
  Train(*a, batches, 0, kCheckpoint);
  auto written = WriteCheckpoint(*a, {kCheckpoint, 0, kCheckpoint}, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, dir + "/ckpt-3");
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, *written);
  EXPECT_TRUE(std::filesystem::exists(*written + "/rank" + std::to_string(World()->rank()) +
                                      ".safetensors"));
  const auto at_checkpoint = Snapshot(*a);
  Train(*a, batches, kCheckpoint, kSteps);
  const auto uninterrupted = Snapshot(*a);

  if (!s.tier_dir.empty()) s.tier_dir = tmp.path() + "/tier_b";
  auto b = Build(config, s);
  ASSERT_NE(b, nullptr);
  // Not trivially equal: a fresh model differs from the checkpointed one.
  const auto fresh = Snapshot(*b);
  EXPECT_NE(fresh[0], at_checkpoint[0]) << Name(s);
  auto pos = RestoreCheckpoint(*b, *written);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(pos->step, kCheckpoint);
  EXPECT_EQ(pos->batches_in_epoch, kCheckpoint);
  ExpectBitIdentical(Snapshot(*b), at_checkpoint, Name(s) + " right after restore");
  Train(*b, batches, kCheckpoint, kSteps);
  ExpectBitIdentical(Snapshot(*b), uninterrupted, Name(s) + " after resumed training");
}

TEST(ShardedCheckpointTest, ExactModeResumeIsBitIdentical) {
  SharedTempDir tmp;
  for (ShardingType type : {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kGrid,
                            ShardingType::kDataParallel}) {
    ResumeEqualsUninterrupted({type, 2, ReplicaSync::kExact, ""}, tmp);
  }
}

TEST(ShardedCheckpointTest, RocksDbTierShardsResumeBitIdentical) {
  SharedTempDir tmp;
  ResumeEqualsUninterrupted({ShardingType::kRowWise, 2, ReplicaSync::kExact, "tiered"}, tmp);
  ResumeEqualsUninterrupted({ShardingType::kGrid, 2, ReplicaSync::kAverage, "tiered"}, tmp);
}

// Checkpointed after step 3 with sync_every 2: the replicas differ, the touched rows and the
// delayed state average are pending; all of it must come back.
TEST(ShardedCheckpointTest, AverageModeBetweenSyncsResumesBitIdentical) {
  SharedTempDir tmp;
  for (ShardingType type : {ShardingType::kRowWise, ShardingType::kGrid}) {
    ResumeEqualsUninterrupted({type, 2, ReplicaSync::kAverage, ""}, tmp);
  }
}

// Writes a row-wise 2x2 exact checkpoint after one step; returns its path.
std::string WriteOne(const Config& config, const std::string& dir) {
  auto a = Build(config, {ShardingType::kRowWise, 2, ReplicaSync::kExact, ""});
  EXPECT_NE(a, nullptr);
  if (a == nullptr) return "";
  Train(*a, LocalBatches(config), 0, 1);
  auto written = WriteCheckpoint(*a, {1, 0, 1}, dir);
  EXPECT_TRUE(written.ok()) << written.status();
  return written.ok() ? *written : "";
}

// Another grid, plan or mode reshards (sharded_reshard_test); what no resume can honour is
// refused by name: other tables, another seed, another row optimizer, on several ranks and in
// one process alike.
TEST(ShardedCheckpointTest, AnotherModelIsRefusedByName) {
  SharedTempDir tmp;
  const Config config = MakeConfig();
  const std::string ckpt = WriteOne(config, tmp.path() + "/ckpt");
  ASSERT_FALSE(ckpt.empty());
  struct Bad {
    Config config;
    std::string message;
  };
  std::vector<Bad> cases(3, Bad{config, ""});
  cases[0].config.model.tables[1].name = "other";
  cases[0].message = "written with tables 't0,t1,t2', this run has 't0,other,t2'";
  cases[1].config.seed = 24;
  cases[1].message = "written with seed '23', this run has '24'";
  cases[2].config.optimizer.embedding.type = RowOptimizerType::kAdam;
  cases[2].message = "written with row optimizer (type id)";
  for (const Bad& bad : cases) {
    for (bool single : {false, true}) {
      if (single && World()->rank() != 0) continue;
      std::unique_ptr<Model> b;
      if (single) {
        auto m = Model::Create(bad.config, DeviceContext::Cpu());
        ASSERT_TRUE(m.ok()) << m.status();
        b = std::move(*m);
      } else {
        b = Build(bad.config, {ShardingType::kRowWise, 2, ReplicaSync::kExact, ""});
      }
      ASSERT_NE(b, nullptr);
      auto pos = RestoreCheckpoint(*b, ckpt);
      ASSERT_FALSE(pos.ok()) << bad.message;
      EXPECT_EQ(pos.status().code(), absl::StatusCode::kInvalidArgument) << pos.status();
      EXPECT_NE(pos.status().message().find(ckpt + ": " + bad.message), std::string::npos)
          << pos.status();
    }
  }
}

TEST(ShardedCheckpointTest, MissingRankFileFailsEveryRank) {
  SharedTempDir tmp;
  const Config config = MakeConfig();
  const std::string ckpt = WriteOne(config, tmp.path() + "/ckpt");
  ASSERT_FALSE(ckpt.empty());
  ASSERT_TRUE(World()->Barrier().ok());
  if (World()->rank() == 0) std::filesystem::remove(ckpt + "/rank3.safetensors");
  ASSERT_TRUE(World()->Barrier().ok());
  auto b = Build(config, {ShardingType::kRowWise, 2, ReplicaSync::kExact, ""});
  ASSERT_NE(b, nullptr);
  auto pos = RestoreCheckpoint(*b, ckpt);
  ASSERT_FALSE(pos.ok()) << "rank " << World()->rank() << " resumed from an incomplete checkpoint";
  if (World()->rank() == 3) {
    EXPECT_EQ(pos.status().code(), absl::StatusCode::kDataLoss) << pos.status();
    EXPECT_NE(pos.status().message().find(ckpt + " is incomplete: " + ckpt +
                                          "/rank3.safetensors"),
              std::string::npos)
        << pos.status();
  } else {
    EXPECT_NE(pos.status().message().find("restoring " + ckpt + ": rank(s) 3 failed"),
              std::string::npos)
        << pos.status();
  }
  // The model is still usable for the collectives that follow (no rank left hanging).
  ASSERT_TRUE(World()->Barrier().ok());
}

// A rank whose dense model diverged fails the checkpoint on every rank, and LATEST keeps naming
// the previous checkpoint (no ckpt-2 directory is published).
TEST(ShardedCheckpointTest, DivergedDenseModelFailsEveryRankAndKeepsLatest) {
  SharedTempDir tmp;
  const Config config = MakeConfig();
  const std::string dir = tmp.path() + "/ckpt";
  auto a = Build(config, {ShardingType::kRowWise, 2, ReplicaSync::kExact, ""});
  ASSERT_NE(a, nullptr);
  const std::vector<Batch> batches = LocalBatches(config);
  Train(*a, batches, 0, 1);
  auto first = WriteCheckpoint(*a, {1, 0, 1}, dir);
  ASSERT_TRUE(first.ok()) << first.status();
  Train(*a, batches, 1, 2);
  if (World()->rank() == 2) a->dense_parameters()[0]->value.data<float>()[0] += 1.0f;
  auto second = WriteCheckpoint(*a, {2, 0, 2}, dir);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("dense parameters differ between rank 0 and rank 2"),
            std::string::npos)
      << second.status();
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, *first);
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-2"));
}

// Ranks that see different LATEST files (a checkpoint_dir not shared) are told so, all of them.
TEST(ShardedCheckpointTest, RanksDisagreeingOnLatestFailTogether) {
  const Config config = MakeConfig();
  auto a = Build(config, {ShardingType::kRowWise, 2, ReplicaSync::kExact, ""});
  ASSERT_NE(a, nullptr);
  auto& tables = static_cast<ShardedSparseArch&>(a->sparse()).collection();
  auto same = internal::AgreeOnLatestCheckpoint(tables, "/d", std::string("/d/ckpt-4"));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, "/d/ckpt-4");
  auto differ = internal::AgreeOnLatestCheckpoint(
      tables, "/d", World()->rank() == 1 ? std::string() : std::string("/d/ckpt-4"));
  ASSERT_FALSE(differ.ok());
  EXPECT_NE(differ.status().message().find("rank 0: ckpt-4, rank 1: none"), std::string::npos)
      << differ.status();
  auto failed = internal::AgreeOnLatestCheckpoint(
      tables, "/d",
      World()->rank() == 3 ? absl::StatusOr<std::string>(absl::DataLossError("bad LATEST"))
                           : absl::StatusOr<std::string>(std::string("/d/ckpt-4")));
  ASSERT_FALSE(failed.ok());
  if (World()->rank() != 3) {
    EXPECT_NE(failed.status().message().find("rank(s) 3 failed"), std::string::npos)
        << failed.status();
  }
}

}  // namespace
}  // namespace tessera
