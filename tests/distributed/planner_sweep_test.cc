// Every plan the planner emits for 2 and 4 ranks trains, and trains the model of one rank.
//
// For two small models (skewed table sizes and poolings, dim 8 so that column and grid splits
// exist; the second with one table fixed in the RocksDB tier) and for T = 4 (the whole MPI job)
// and T = 2 (each half of it, independently), the planner (planner/planner.h) plans with the
// shipped cpu_default profile and with planner/profiles/cpu_2core_measured.yaml at every group
// size N it considers (powers of two dividing T), and once with N free; each distinct plan
// trains. Each plan goes through the trainer's own path: written as a plan file,
// named by sharding.plan, the model built by CreateModelForWorld on the T-rank world with
// sharding.group_size = N, trained for kSteps steps of a global batch split over the ranks
// (exact replica sync). The parameters must then equal one process trained on the global batch.
//
// Tolerance: relative 2e-4 (absolute floor 2e-6), as tests/distributed/trainer_equivalence_test:
// the runs differ only in float summation order, compounded over kSteps AdaGrad steps.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "batch_slice.h"
#include "gtest/gtest.h"
#include "io/synthetic.h"
#include "mpi_test_main.h"
#include "planner/planner.h"
#include "shared_temp_dir.h"
#include "trainer/auto_plan.h"
#include "trainer/model.h"
#include "trainer/world.h"

namespace tessera {
namespace {

constexpr int kSteps = 6;
constexpr int64_t kGlobalBatch = 64;
const std::vector<int64_t> kRows = {6000, 900, 120, 40};
const std::vector<int64_t> kPooling = {1, 4, 2, 6};

Config MakeConfig(bool tiered, const std::string& tier_dir) {
  Config c;
  c.seed = 23;
  c.model.interaction = InteractionType::kDot;
  c.model.num_dense = 3;
  c.model.embedding_dim = 8;
  c.model.bottom_mlp = {8, 8};
  c.model.top_mlp = {8, 1};
  for (size_t f = 0; f < kRows.size(); ++f) {
    TableConfig t;
    t.name = "t" + std::to_string(f);
    t.num_rows = kRows[f];
    t.dim = 8;
    t.features = {static_cast<int>(f)};
    if (tiered && f == 0) {
      t.storage.tier = StorageTier::kRocksDb;
      t.storage.cache_rows = 3000;
      t.storage.reader_threads = 1;
      t.storage.path = tier_dir + "/t0";
    }
    c.model.tables.push_back(t);
  }
  c.data.batch_size = kGlobalBatch;
  c.data.synthetic.pooling = kPooling;
  c.optimizer.embedding.type = RowOptimizerType::kRowWiseAdagrad;
  c.optimizer.embedding_lr = 0.05f;
  c.optimizer.dense.type = DenseOptimizerType::kSgd;
  c.optimizer.dense_lr = 0.1f;
  c.optimizer.schedule.base_lr = 1.0f;
  c.output.dir = tier_dir;
  return c;
}

std::vector<Batch> GlobalBatches(const Config& c) {
  SyntheticDataOptions o;
  for (const TableConfig& t : c.model.tables) o.rows_per_feature.push_back(t.num_rows);
  o.pooling = kPooling;
  o.num_dense = c.model.num_dense;
  o.seed = 9;
  SyntheticStreamOptions s;
  s.num_samples = kGlobalBatch * kSteps;
  s.batch_size = kGlobalBatch;
  auto reader = SyntheticReader::Open(o, s);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<Batch> out(kSteps);
  for (Batch& b : out) EXPECT_TRUE(*(*reader)->Next(&b));
  return out;
}

std::vector<std::vector<float>> Parameters(Model& m) {
  std::vector<std::vector<float>> out;
  for (int t = 0; t < m.sparse().num_tables(); ++t) {
    const TableConfig& tc = m.sparse().table(t);
    out.emplace_back(tc.num_rows * tc.dim);
    EXPECT_TRUE(m.sparse().ReadRows(t, 0, tc.num_rows, out.back().data()).ok());
  }
  for (Parameter* p : m.dense_parameters()) {
    const float* v = p->value.data<float>();
    out.emplace_back(v, v + p->value.numel());
  }
  return out;
}

// Trains `config` (its sharding.plan / group_size set) on `world` and compares with one process.
void TrainAndCompare(const Config& config, const std::shared_ptr<Communicator>& comm,
                     const std::string& what) {
  World world;
  world.comm = comm;
  GridLayout layout = GridLayout::kReplicasAdjacent;
  auto grid = ProcessGrid::Create(comm, ProcessGridOptions{config.sharding.group_size, layout});
  ASSERT_TRUE(grid.ok()) << what << ": " << grid.status();
  world.grid = std::move(*grid);
  auto dist = CreateModelForWorld(config, world, DeviceContext::Cpu());
  ASSERT_TRUE(dist.ok()) << what << ": " << dist.status();
  Config single_config = config;
  for (TableConfig& t : single_config.model.tables) t.storage = TableStorage{};
  auto single = Model::Create(single_config, DeviceContext::Cpu());
  ASSERT_TRUE(single.ok()) << single.status();
  const int64_t local = kGlobalBatch / comm->size();
  const int r = comm->rank();
  int step = 0;
  for (const Batch& global : GlobalBatches(config)) {
    auto ld = (*dist)->TrainStep(testing::SliceBatch(global, r * local, (r + 1) * local), step);
    ASSERT_TRUE(ld.ok()) << what << ": " << ld.status();
    auto ls = (*single)->TrainStep(global, step);
    ASSERT_TRUE(ls.ok()) << ls.status();
    ++step;
  }
  std::vector<std::vector<float>> a = Parameters(**dist), b = Parameters(**single);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k) {
      ASSERT_NEAR(a[i][k], b[i][k], 2e-6 + 2e-4 * std::fabs(b[i][k]))
          << what << ": parameter " << i << "[" << k << "] on rank " << r;
    }
  }
}

TEST(PlannerSweepTest, EveryPlanForTwoAndFourRanksTrainsTheModelOfOne) {
  auto world = testing::World();
  ASSERT_EQ(world->size(), 4);
  testing::SharedTempDir dir("tessera_planner_sweep_");
  // The shipped default and the profile measured on the development machine.
  std::vector<planner::MachineProfile> profiles;
  for (const std::string& p :
       {std::string("cpu_default"),
        std::string(TESSERA_SOURCE_DIR) + "/planner/profiles/cpu_2core_measured.yaml"}) {
    auto profile = LoadProfileByNameOrPath(p);
    ASSERT_TRUE(profile.ok()) << p << ": " << profile.status();
    profiles.push_back(std::move(*profile));
  }
  int trained = 0;
  for (int t : {4, 2}) {
    // T = 2: the two halves of the job run the same cases side by side.
    const int half = t == 2 ? world->rank() / 2 : 0;
    std::shared_ptr<Communicator> comm = world;
    if (t == 2) {
      auto sub = world->Split(half, world->rank());
      ASSERT_TRUE(sub.ok()) << sub.status();
      comm = std::move(*sub);
    }
    for (bool tiered : {false, true}) {
      const std::string case_dir = dir.path() + "/T" + std::to_string(t) + "-half" +
                                   std::to_string(half) + (tiered ? "-tiered" : "");
      std::filesystem::create_directories(case_dir);
      Config config = MakeConfig(tiered, case_dir);
      planner::Topology topo;
      topo.world_size = t;
      topo.ranks_per_node = t;
      topo.memory = MachineMemoryPerRank(t, case_dir);
      // Every group size the planner considers, then its own choice (N free).
      std::vector<std::vector<int>> sizes;
      for (int n = 1; n <= t; n *= 2) sizes.push_back({n});
      sizes.push_back({});
      std::set<std::string> seen;
      for (const planner::MachineProfile& profile : profiles) {
        for (const std::vector<int>& gs : sizes) {
          planner::PlanInputs inputs = PlanInputsFromConfig(config, topo);
          planner::PlannerOptions po;
          po.group_sizes = gs;
          auto result = planner::PlanSharding(inputs, profile, po);
          ASSERT_TRUE(result.ok()) << "T " << t << ": " << result.status();
          const std::string yaml = ShardingPlanToYaml(result->plan);
          const int n = result->plan.group_size;
          if (!seen.insert(yaml).second) continue;  // N free chose a plan already trained
          const std::string what = "T " + std::to_string(t) + " N " + std::to_string(n) +
                                   (tiered ? " (tiered t0)" : "") + ", plan:\n" + yaml;
          const std::string path = case_dir + "/plan-" + std::to_string(seen.size()) + "-rank" +
                                   std::to_string(comm->rank()) + ".yaml";
          std::ofstream(path) << yaml;
          Config run = config;
          run.sharding.plan = path;
          run.sharding.group_size = n;
          if (world->rank() == 0) {
            std::string types;
            for (const TablePlan& tp : result->plan.tables) {
              types += std::string(" ") + tp.table + ":" + ShardingTypeName(tp.type);
            }
            std::printf("[ sweep    ] T %d N %d%s:%s\n", t, n, tiered ? " tiered t0" : "",
                        types.c_str());
          }
          TrainAndCompare(run, comm, what);
          if (::testing::Test::HasFatalFailure()) return;
          ++trained;
        }
      }
    }
    ASSERT_TRUE(world->Barrier().ok());
  }
  // T = 4: N 1, 2, 4; T = 2: N 1, 2; each with and without the tiered table.
  EXPECT_GE(trained, 10);
}

}  // namespace
}  // namespace tessera
