// `sharding.plan: auto` and `sharding.profile` (trainer/auto_plan.h): the profile key is read,
// resolved and emitted; AutoPlan plans with the profile it names (a shipped name or a file) and
// refuses an unknown name or a missing file naming sharding.profile.
#include "trainer/auto_plan.h"

#include <filesystem>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/planner.h"
#include "trainer/config.h"
#include "trainer/machine_fingerprint.h"
#include "trainer/profile_cache.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

const char kConfig[] = R"(
model:
  type: dlrm
  num_dense: 4
  embedding_dim: 16
  bottom_mlp: [16]
  top_mlp: [16, 1]
  tables:
    - {name: a, rows: 1000}
    - {name: b, rows: 5000}
data:
  format: synthetic
  batch_size: 256
  synthetic: {pooling: [1, 4]}
output: {dir: /tmp/tessera_auto_plan_test}
)";

TEST(AutoPlanTest, ProfileKeyDefaultsToAutoAndRoundTrips) {
  absl::StatusOr<Config> c = ParseConfig(kConfig, "/tmp/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sharding.profile, "auto");
  absl::StatusOr<Config> h = ParseConfig(kConfig, "/tmp/c.yaml", {"sharding.profile=h200_cluster"});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->sharding.profile, "h200_cluster");
  absl::StatusOr<Config> back = ParseConfig(ConfigToYaml(*h), "/tmp/c.yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sharding.profile, "h200_cluster");
}

TEST(AutoPlanTest, MissingProfileFileNamesTheKey) {
  absl::StatusOr<Config> c =
      ParseConfig(kConfig, "/tmp/c.yaml", {"sharding.profile=no/such/profile.yaml"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("sharding.profile"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("file not found"));
}

TEST(AutoPlanTest, UnknownProfileNameListsTheShippedOnes) {
  absl::StatusOr<Config> c = ParseConfig(kConfig, "/tmp/c.yaml", {"sharding.profile=tpu_pod"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<ShardingPlan> p = AutoPlan(*c, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("sharding.profile"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("cpu_default"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("tpu_pod"));
}

TEST(AutoPlanTest, PlansWithTheNamedProfile) {
  // The profile file's bytes and the shipped name give the same plan; AutoPlan's plan is the
  // one PlanSharding makes with that profile.
  const std::string dir = (std::filesystem::temp_directory_path() / "tessera_auto_plan").string();
  std::filesystem::create_directories(dir);
  absl::StatusOr<planner::MachineProfile> prof = LoadProfileByNameOrPath("cpu_2core_measured");
  ASSERT_TRUE(prof.ok()) << prof.status();
  const std::string path = dir + "/mine.yaml";
  ASSERT_TRUE(planner::SaveMachineProfile(*prof, path).ok());
  absl::StatusOr<Config> by_name =
      ParseConfig(kConfig, "/tmp/c.yaml", {"sharding.profile=cpu_2core_measured"});
  absl::StatusOr<Config> by_file =
      ParseConfig(kConfig, "/tmp/c.yaml", {"sharding.profile=" + path});
  ASSERT_TRUE(by_name.ok() && by_file.ok());
  absl::StatusOr<ShardingPlan> a = AutoPlan(*by_name, 2);
  absl::StatusOr<ShardingPlan> b = AutoPlan(*by_file, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ShardingPlanToYaml(*a), ShardingPlanToYaml(*b));
  std::filesystem::remove_all(dir);
}

// `auto` with this machine's profile in the cache ($XDG_CACHE_HOME/tessera, keyed by the
// fingerprint) uses it without calibrating, and plans with it; a profile of another machine
// says which fingerprint fields differ; a shipped profile has no fingerprint.
TEST(AutoPlanTest, AutoUsesTheCachedProfileOfThisMachine) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera_auto_cache_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_EQ(setenv("XDG_CACHE_HOME", dir.c_str(), 1), 0);
  // No calibration may run in a unit test: a missing cache entry would fail, not calibrate.
  ASSERT_EQ(setenv("TESSERA_AUTO_CALIBRATE_FLAGS", "--no_such_flag", 1), 0);
  EXPECT_EQ(ProfileCacheDir(), (dir / "tessera").string());
  absl::StatusOr<planner::MachineProfile> base = LoadProfileByNameOrPath("cpu_2core_measured");
  ASSERT_TRUE(base.ok()) << base.status();
  planner::MachineProfile mine = *base;
  mine.machine = "cached for the test";
  mine.fingerprint = ThisMachineFingerprint();
  std::filesystem::create_directories(ProfileCacheDir());
  ASSERT_TRUE(planner::SaveMachineProfile(mine, ThisMachineProfileCachePath()).ok());
  absl::StatusOr<ResolvedProfile> r = ResolveProfile("auto");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile.machine, "cached for the test");
  EXPECT_THAT(r->origin, HasSubstr("cached"));
  EXPECT_TRUE(r->fingerprinted);
  EXPECT_TRUE(r->differences.empty());
  EXPECT_THAT(ProfileProvenance(*r), HasSubstr("this machine's"));
  absl::StatusOr<Config> c = ParseConfig(kConfig, "/tmp/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->sharding.profile, "auto");
  absl::StatusOr<ShardingPlan> plan = AutoPlan(*c, 2);
  EXPECT_TRUE(plan.ok()) << plan.status();
  // Another machine's profile: planned with, its differing fields named.
  planner::MachineProfile other = mine;
  other.fingerprint.cpu_model = "Some Other CPU";
  other.fingerprint.cores = mine.fingerprint.cores + 6;
  const std::string other_path = (dir / "other.yaml").string();
  ASSERT_TRUE(planner::SaveMachineProfile(other, other_path).ok());
  absl::StatusOr<ResolvedProfile> o = ResolveProfile(other_path);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->differences.size(), 2u);
  EXPECT_THAT(ProfileProvenance(*o), HasSubstr("another machine"));
  EXPECT_THAT(ProfileProvenance(*o), HasSubstr("'Some Other CPU' in the profile"));
  // A shipped profile: no fingerprint.
  absl::StatusOr<ResolvedProfile> shipped = ResolveProfile("cpu_2core_measured");
  ASSERT_TRUE(shipped.ok());
  EXPECT_FALSE(shipped->fingerprinted);
  EXPECT_THAT(ProfileProvenance(*shipped), HasSubstr("no machine fingerprint"));
  // A cache entry that is not this machine's is not used: auto calibrates, which here fails on
  // the bad flag (the error names the command), rather than plan with it.
  ASSERT_TRUE(planner::SaveMachineProfile(other, ThisMachineProfileCachePath()).ok());
  absl::StatusOr<ResolvedProfile> stale = ResolveProfile("auto");
  EXPECT_FALSE(stale.ok());
  unsetenv("TESSERA_AUTO_CALIBRATE_FLAGS");
  unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

// data.batch_size is per rank (docs/CONFIG.md): at T = 4 every rank trains 256 samples, and
// PlanInputsFromConfig, hence tessera-plan and `sharding.plan: auto`, price 256 per rank: a
// rank's activations at T = 4 under the auto plan are those of the one rank at T = 1, and twice
// the config's batch doubles them.
TEST(AutoPlanTest, PricesTheBatchEachRankTrains) {
  absl::StatusOr<planner::MachineProfile> prof = LoadProfileByNameOrPath("cpu_default");
  ASSERT_TRUE(prof.ok()) << prof.status();
  auto activations = [&](int world, const std::vector<std::string>& set) -> double {
    absl::StatusOr<Config> c = ParseConfig(kConfig, "/tmp/c.yaml", set);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return -1;
    planner::Topology topo;
    topo.world_size = world;
    topo.ranks_per_node = world;
    topo.memory = MachineMemoryPerRank(world, c->output.dir);
    planner::PlanInputs in = PlanInputsFromConfig(*c, topo);
    EXPECT_EQ(in.step.batch_per_rank, c->data.batch_size) << "T = " << world;
    absl::StatusOr<ShardingPlan> plan = AutoPlan(*c, world);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return -1;
    in.group_size = plan->group_size > 0 ? plan->group_size : world;
    absl::StatusOr<planner::StepEstimate> e = planner::EstimatePlan(in, *prof, *plan);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return -1;
    double most = 0;
    for (const planner::MemoryBreakdown& m : e->memory_detail) most = std::max(most, m.activations);
    return most;
  };
  const std::vector<std::string> fixed = {"sharding.profile=cpu_default"};
  const double one = activations(1, fixed);
  const double four = activations(4, fixed);
  ASSERT_GT(one, 0);
  EXPECT_DOUBLE_EQ(four, one);
  std::vector<std::string> twice = fixed;
  twice.push_back("data.batch_size=512");
  EXPECT_NEAR(activations(4, twice), 2 * one, 1e-6 * one);
}

}  // namespace
}  // namespace tessera
