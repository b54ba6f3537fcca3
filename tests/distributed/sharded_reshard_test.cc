// Resharding on resume (trainer/internal/checkpoint_reshard.h), under mpirun -np 4: a checkpoint
// written by one world (4 ranks, 2 ranks as a sub-world of the first two, or one process)
// restores into another world size, grid or plan, with a table in memory or in the RocksDB tier.
//
// Exact mode, per case: (1) right after the restore the model holds the same bits as the same
// checkpoint gathered into one process (resharding copies rows and optimizer state, it computes
// nothing); (2) training on from there on the new shape ends within rtol 2e-4 (absolute floor
// 2e-6) of training on in that one process. The tolerance is distributed_trainer_equivalence_
// test's for N ranks against one: the runs differ only in float summation order (dense
// gradients summed per rank then across ranks, embedding gradients combined across shards and
// replicas), ~1e-7 relative per step, compounded over the steps of an AdaGrad/Adam update.
// Cases: 4 -> 2 (and row_wise -> table_wise), 2 -> 4 (table_wise -> grid), 4 -> 1, 1 -> 4, and a
// plan chain table_wise -> row_wise -> grid on 4 ranks (each resume checkpointed again).
//
// Average mode: a checkpoint taken at a sync (sync clock a multiple of sync_every) reshards
// (4 -> 2, 2 -> 4, 4 -> 1): weights as written, optimizer state the mean over the old replicas,
// the same bits as one process restoring it; a run on one sharding group (M = 1, where average
// mode's update is the exact one) then trains as one process does. Between two syncs another
// shape is refused with FailedPrecondition naming the checkpoint and why.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "batch_slice.h"
#include "gtest/gtest.h"
#include "io/synthetic.h"
#include "mpi_test_main.h"
#include "shared_temp_dir.h"
#include "sharded_test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/model.h"
#include "trainer/sharded_sparse_arch.h"
#include "trainer/split_sparse_arch.h"
#include "trainer/stores.h"

namespace tessera {
namespace {

using testing::World;

constexpr int kSteps = 8;
constexpr int64_t kGlobalBatch = 32;
using Snap = std::vector<std::vector<float>>;

class SharedTempDir : public testing::SharedTempDir {
 public:
  SharedTempDir() : testing::SharedTempDir("tessera_reshard_") {}
};

// One world shape: `ranks` (4, 2 or 1 = one process), group size, plan type, mode.
struct Shape {
  int ranks = 4;
  int group_size = 2;
  ShardingType type = ShardingType::kRowWise;
  ReplicaSync sync = ReplicaSync::kExact;
};

std::string Name(const Shape& s) {
  if (s.ranks == 1) return "1 process";
  return std::to_string(s.ranks) + " ranks " + std::to_string(s.ranks / s.group_size) + "x" +
         std::to_string(s.group_size) + " " + ShardingTypeName(s.type) +
         (s.sync == ReplicaSync::kAverage ? " average" : " exact");
}

Config MakeConfig(const std::string& tier_path) {
  Config c;
  c.seed = 29;
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
  if (!tier_path.empty()) {
    TableStorage& st = c.model.tables[2].storage;
    st.tier = StorageTier::kRocksDb;
    st.path = tier_path;
    st.cache_rows = 200;  // a third of the table: rows go to RocksDB and back
  }
  c.optimizer.embedding.type = RowOptimizerType::kRowWiseAdagrad;
  c.optimizer.embedding_lr = 0.05f;
  c.optimizer.dense.type = DenseOptimizerType::kAdam;
  c.optimizer.dense_lr = 0.01f;
  c.optimizer.schedule.base_lr = 1.0f;
  return c;
}

// The communicator of the first `ranks` world ranks (collective over the world), or null on
// the ranks outside it.
std::shared_ptr<Communicator> SubWorld(int ranks) {
  if (ranks == World()->size()) return World();
  const bool in = World()->rank() < ranks;
  auto sub = World()->Split(in ? 0 : 1, World()->rank());
  EXPECT_TRUE(sub.ok()) << sub.status();
  if (!sub.ok() || !in) return nullptr;
  return std::shared_ptr<Communicator>(std::move(*sub));
}

// A model of shape `s` on `comm` (null for one process); `tier` its RocksDB directory.
std::unique_ptr<Model> Build(const Shape& s, std::shared_ptr<Communicator> comm,
                             const std::string& tier) {
  const Config config = MakeConfig(tier);
  if (s.ranks == 1) {
    auto m = Model::Create(config, DeviceContext::Cpu());
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  auto grid = ProcessGrid::Create(comm, ProcessGridOptions{s.group_size,
                                                           GridLayout::kReplicasAdjacent});
  EXPECT_TRUE(grid.ok()) << grid.status();
  if (!grid.ok()) return nullptr;
  ShardedEmbeddingOptions so;
  so.collection = EmbeddingOptionsFromConfig(config);
  so.plan = testing::PlanOfType(s.type, so.collection.tables, s.group_size);
  so.replica_sync = s.sync;
  so.sync_every = 2;
  auto sharded = ShardedEmbeddingCollection::Create(so, *grid, DeviceContext::Cpu());
  EXPECT_TRUE(sharded.ok()) << sharded.status();
  if (!sharded.ok()) return nullptr;
  auto m = Model::Create(config, DeviceContext::Cpu(),
                         std::make_unique<ShardedSparseArch>(std::move(*sharded)), comm.get());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// One process with the tables split by tier into two host parts (SplitSparseArch: the RocksDB
// table in one, the others in the other), as a device: cuda model with a RocksDB table holds
// them: a sharded checkpoint gathers into it through the same CheckpointTables::WriteFloatRows
// as into a one-GPU model. Needs a RocksDB table (`tier` not empty).
std::unique_ptr<Model> BuildSplit(const std::string& tier) {
  const Config config = MakeConfig(tier);
  auto rest = [&config](const EmbeddingCollectionOptions& o, const std::vector<int>& global)
      -> absl::StatusOr<std::unique_ptr<SparseArch>> {
    TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(config, global));
    TESSERA_ASSIGN_OR_RETURN(auto coll, EmbeddingCollection::CreateWithStores(
                                            o, std::move(stores), DeviceContext::Cpu()));
    return std::unique_ptr<SparseArch>(std::make_unique<LocalSparseArch>(std::move(coll)));
  };
  auto split = CreateTierSplitSparseArch(config, rest, /*rest_on_host=*/true, HostColumnCopies(),
                                         Device::kCpu);
  EXPECT_TRUE(split.ok()) << split.status();
  if (!split.ok()) return nullptr;
  auto m = Model::Create(config, DeviceContext::Cpu(), std::move(*split));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<Batch> GlobalBatches() {
  const Config c = MakeConfig("");
  SyntheticDataOptions o;
  for (const TableConfig& t : c.model.tables) o.rows_per_feature.push_back(t.num_rows);
  o.pooling = {1, 3, 2};
  o.num_dense = c.model.num_dense;
  o.seed = 5;
  SyntheticStreamOptions so;
  so.num_samples = kGlobalBatch * kSteps;
  so.batch_size = kGlobalBatch;
  auto reader = SyntheticReader::Open(o, so);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<Batch> out(kSteps);
  for (Batch& b : out) EXPECT_TRUE(*(*reader)->Next(&b));
  return out;
}

// Steps [from, to) on `ranks` ranks (this process is world rank `rank` of them).
void Train(Model& m, int ranks, int from, int to) {
  static const std::vector<Batch> global = GlobalBatches();
  const int r = ranks == 1 ? 0 : World()->rank();
  for (int step = from; step < to; ++step) {
    const int64_t local = kGlobalBatch / ranks;
    Batch mine = ranks == 1 ? global[step] : testing::SliceBatch(global[step], r * local,
                                                                  (r + 1) * local);
    auto loss = m.TrainStep(mine, step);
    ASSERT_TRUE(loss.ok()) << loss.status();
  }
}

// Every table's weights and state (gathered: collective on a sharded model), the dense
// parameters and dense optimizer state, and its step count.
Snap Snapshot(Model& m) {
  Snap out;
  for (int t = 0; t < m.sparse().num_tables(); ++t) {
    const TableConfig& tc = m.sparse().table(t);
    out.emplace_back(tc.num_rows * tc.dim);
    out.emplace_back(tc.num_rows);  // row-wise AdaGrad: one state float per row
    absl::Status s;
    if (auto* sharded = dynamic_cast<ShardedSparseArch*>(&m.sparse())) {
      s = sharded->collection().ReadTable(t, 0, tc.num_rows, out[out.size() - 2].data(),
                                          out.back().data());
    } else if (auto* split = dynamic_cast<SplitSparseArch*>(&m.sparse())) {
      for (int q = 0; q < split->num_parts(); ++q) {
        const std::vector<int>& g = split->part(q).tables;
        for (size_t i = 0; i < g.size(); ++i) {
          if (g[i] != t) continue;
          s = static_cast<LocalSparseArch&>(split->part_arch(q)).collection().store(i).ReadRows(
              0, tc.num_rows, out[out.size() - 2].data(), out.back().data());
        }
      }
    } else {
      s = static_cast<LocalSparseArch&>(m.sparse()).collection().store(t).ReadRows(
          0, tc.num_rows, out[out.size() - 2].data(), out.back().data());
    }
    EXPECT_TRUE(s.ok()) << s;
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

void ExpectSame(const Snap& a, const Snap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " tensor " << i;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << what << ": tensor " << i << " differs on rank " << World()->rank();
  }
}

void ExpectNear(const Snap& a, const Snap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " tensor " << i;
    for (size_t k = 0; k < a[i].size(); ++k) {
      ASSERT_NEAR(a[i][k], b[i][k], 2e-6 + 2e-4 * std::fabs(b[i][k]))
          << what << ": tensor " << i << "[" << k << "] on rank " << World()->rank();
    }
  }
}

// The scratch paths of one case.
struct Paths {
  std::string ckpt, tier;  // tier: "" for in memory
  std::string Tier(const std::string& who) const {
    return tier.empty() ? "" : tier + "/" + who + "_rank" + std::to_string(World()->rank());
  }
};

// A checkpoint and, on the ranks that wrote it, the model it holds (gathered).
struct Written {
  std::string path;
  Snap model;    // empty on the ranks outside the writing world
  bool average;  // the state in `model` is this rank's replica's, not the replicas' mean
};

// Trains `a` for `steps` steps and checkpoints it into paths.ckpt (on a's ranks).
Written WriteFrom(const Shape& a, int steps, const Paths& p, const std::string& who) {
  std::shared_ptr<Communicator> comm = SubWorld(a.ranks);
  Written w{p.ckpt + "/" + who + "/ckpt-" + std::to_string(steps), {},
            a.sync == ReplicaSync::kAverage};
  if (a.ranks == 1 ? World()->rank() == 0 : comm != nullptr) {
    auto m = Build(a, comm, p.Tier(who));
    EXPECT_NE(m, nullptr);
    if (m != nullptr) {
      Train(*m, a.ranks, 0, steps);
      auto written = WriteCheckpoint(*m, {steps, 0, steps}, p.ckpt + "/" + who);
      EXPECT_TRUE(written.ok()) << written.status();
      if (written.ok()) EXPECT_EQ(*written, w.path);
      w.model = Snapshot(*m);
    }
  }
  EXPECT_TRUE(World()->Barrier().ok());
  return w;
}

// Restores `ckpt` into shape `b` on b's ranks; trains to `to` and checks against one process
// restoring the same checkpoint and training the same steps (see the file comment);
// `compare_training` false: only the restore is compared (average mode with M > 1).
void ResumeMatchesOneProcess(const Written& from, int at, const Shape& b, int to,
                             const Paths& p, const std::string& who, bool compare_training) {
  const std::string& ckpt = from.path;
  SCOPED_TRACE(who + ": " + ckpt + " -> " + Name(b));
  // The reference: one process restoring the same checkpoint (on every rank, its own copy).
  auto ref = Build(Shape{1}, nullptr, p.Tier(who + "_ref"));
  ASSERT_NE(ref, nullptr);
  auto ref_pos = RestoreCheckpoint(*ref, ckpt);
  ASSERT_TRUE(ref_pos.ok()) << ref_pos.status();
  EXPECT_EQ(ref_pos->step, at);
  const Snap ref_restored = Snapshot(*ref);
  // ... holds the model that was written (average mode: its weights and dense part; the state
  // is the replicas' mean).
  if (!from.model.empty()) {
    Snap written = from.model, restored = ref_restored;
    if (from.average) {
      for (int t = 0; t < 3; ++t) written[2 * t + 1] = restored[2 * t + 1] = {};
    }
    ExpectSame(restored, written, "gathered into one process");
  }
  if (!p.tier.empty()) {
    auto split = BuildSplit(p.Tier(who + "_split"));
    ASSERT_NE(split, nullptr);
    auto split_pos = RestoreCheckpoint(*split, ckpt);
    ASSERT_TRUE(split_pos.ok()) << split_pos.status();
    EXPECT_EQ(split_pos->step, at);
    ExpectSame(Snapshot(*split), ref_restored, "gathered into a tier-split model");
  }
  Train(*ref, 1, at, to);
  const Snap ref_trained = Snapshot(*ref);

  std::shared_ptr<Communicator> comm = SubWorld(b.ranks);
  if (b.ranks == 1 ? World()->rank() == 0 : comm != nullptr) {
    auto m = Build(b, comm, p.Tier(who));
    ASSERT_NE(m, nullptr);
    auto pos = RestoreCheckpoint(*m, ckpt);
    ASSERT_TRUE(pos.ok()) << pos.status();
    EXPECT_EQ(pos->step, at);
    ExpectSame(Snapshot(*m), ref_restored, "right after the restore");
    Train(*m, b.ranks, at, to);
    if (compare_training) ExpectNear(Snapshot(*m), ref_trained, "after training on");
  }
  EXPECT_TRUE(World()->Barrier().ok());
}

class ReshardTest : public ::testing::TestWithParam<bool /*RocksDB table*/> {
 protected:
  Paths MakePaths(const SharedTempDir& tmp, const std::string& name) {
    Paths p;
    p.ckpt = tmp.path() + "/" + name;
    if (GetParam()) p.tier = tmp.path() + "/tier_" + name;
    return p;
  }
};

TEST_P(ReshardTest, ExactModeFourToTwoToFourToOne) {
  SharedTempDir tmp;
  const Paths p = MakePaths(tmp, "exact");
  const Shape four_rw{4, 2, ShardingType::kRowWise}, two_tw{2, 2, ShardingType::kTableWise};
  // 4 -> 2 (row_wise 2x2 -> table_wise 1x2)
  const Written c4 = WriteFrom(four_rw, 3, p, "four");
  ResumeMatchesOneProcess(c4, 3, two_tw, kSteps, p, "four_to_two", true);
  // 2 -> 4 (table_wise 1x2 -> grid 1x4)
  const Written c2 = WriteFrom(two_tw, 3, p, "two");
  ResumeMatchesOneProcess(c2, 3, Shape{4, 4, ShardingType::kGrid}, kSteps, p, "two_to_four",
                          true);
  // 4 -> 1 (the reference itself: checked bit for bit right after the restore)
  ResumeMatchesOneProcess(c4, 3, Shape{1}, kSteps, p, "four_to_one", true);
  // 1 -> 4 (a single-process checkpoint onto a 2x2 grid plan and a 4x1 column_wise one)
  const Written c1 = WriteFrom(Shape{1}, 3, p, "one");
  ResumeMatchesOneProcess(c1, 3, Shape{4, 2, ShardingType::kGrid}, kSteps, p, "one_to_four",
                          true);
  ResumeMatchesOneProcess(c1, 3, Shape{4, 1, ShardingType::kColumnWise}, kSteps, p,
                          "one_to_four_m4", true);
}

// table_wise -> row_wise -> grid on 4 ranks, checkpointed at 2 and again at 5 by the resumed
// run; the last run trains to kSteps and matches one process resumed from ckpt-5.
TEST_P(ReshardTest, ExactModePlanChain) {
  SharedTempDir tmp;
  const Paths p = MakePaths(tmp, "chain");
  const Written c_tw = WriteFrom(Shape{4, 2, ShardingType::kTableWise}, 2, p, "tw");
  Written c_rw{p.ckpt + "/rw/ckpt-5", {}, false};
  {
    auto rw = Build(Shape{4, 2, ShardingType::kRowWise}, World(), p.Tier("rw"));
    ASSERT_NE(rw, nullptr);
    auto pos = RestoreCheckpoint(*rw, c_tw.path);
    ASSERT_TRUE(pos.ok()) << pos.status();
    Train(*rw, 4, 2, 5);
    auto written = WriteCheckpoint(*rw, {5, 0, 5}, p.ckpt + "/rw");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(*written, c_rw.path);
    c_rw.model = Snapshot(*rw);
  }
  ResumeMatchesOneProcess(c_rw, 5, Shape{4, 2, ShardingType::kGrid}, kSteps, p, "grid", true);
}

TEST_P(ReshardTest, AverageModeAtASyncReshards) {
  SharedTempDir tmp;
  const Paths p = MakePaths(tmp, "avg");
  const Shape four_avg{4, 2, ShardingType::kRowWise, ReplicaSync::kAverage};
  // Checkpointed after 4 steps with sync_every 2: at a sync.
  const Written c4 = WriteFrom(four_avg, 4, p, "four");
  // 4 -> 2 ranks, one sharding group: average mode with M = 1 trains as one process.
  ResumeMatchesOneProcess(c4, 4, Shape{2, 2, ShardingType::kGrid, ReplicaSync::kAverage},
                          kSteps, p, "four_to_two", true);
  // 4 -> 1
  ResumeMatchesOneProcess(c4, 4, Shape{1}, kSteps, p, "four_to_one", true);
  // 2 -> 4 (2x2 average: trains, its replicas no longer one process's model)
  const Written c2 =
      WriteFrom(Shape{2, 1, ShardingType::kTableWise, ReplicaSync::kAverage}, 4, p, "two");
  ResumeMatchesOneProcess(c2, 4, Shape{4, 2, ShardingType::kGrid, ReplicaSync::kAverage},
                          kSteps, p, "two_to_four", false);
}

TEST_P(ReshardTest, AverageModeBetweenSyncsIsRefusedOnAnotherShape) {
  SharedTempDir tmp;
  const Paths p = MakePaths(tmp, "avg_mid");
  const std::string c4 =
      WriteFrom(Shape{4, 2, ShardingType::kRowWise, ReplicaSync::kAverage}, 3, p, "four").path;
  int i = 0;
  for (const Shape& b : {Shape{4, 2, ShardingType::kGrid, ReplicaSync::kAverage},
                         Shape{4, 4, ShardingType::kRowWise, ReplicaSync::kAverage},
                         Shape{4, 2, ShardingType::kRowWise, ReplicaSync::kExact}, Shape{1}}) {
    if (b.ranks == 1 && World()->rank() != 0) continue;
    auto m = Build(b, World(), p.Tier("refused" + std::to_string(i++)));
    ASSERT_NE(m, nullptr);
    auto pos = RestoreCheckpoint(*m, c4);
    ASSERT_FALSE(pos.ok()) << Name(b);
    EXPECT_EQ(pos.status().code(), absl::StatusCode::kFailedPrecondition) << pos.status();
    EXPECT_NE(pos.status().message().find(c4 + ": written in average mode 1 step(s) after a "
                                          "replica sync"),
              std::string::npos)
        << pos.status();
  }
  // The same shape still resumes (bit for bit: sharded_checkpoint_test).
  auto same = Build(Shape{4, 2, ShardingType::kRowWise, ReplicaSync::kAverage}, World(),
                    p.Tier("same"));
  ASSERT_NE(same, nullptr);
  auto pos = RestoreCheckpoint(*same, c4);
  EXPECT_TRUE(pos.ok()) << pos.status();
}

INSTANTIATE_TEST_SUITE_P(Storage, ReshardTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("rocksdb") : std::string("memory");
                         });

}  // namespace
}  // namespace tessera
