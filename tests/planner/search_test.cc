// Search against brute force on small cases, determinism, infeasible inputs.
#include "planner/search.h"

#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/planner.h"
#include "test_inputs.h"

namespace tessera::planner {
namespace {

using ::testing::HasSubstr;

// Every combination of every option of every table on every assignment of its shards to
// distinct ranks; the least step time that fits.
double BruteForce(const Estimator& est, std::vector<TablePlacement>* best_out) {
  const PlanInputs& in = est.inputs();
  const int n = est.group_size();
  EnumerateContext ctx;
  ctx.group_size = n;
  ctx.world_size = in.topology.world_size;
  ctx.node_ranks = est.node_ranks();
  ctx.disk_available = in.topology.memory.disk > 0;
  std::vector<std::vector<TablePlacement>> per_table;
  for (const PlanTable& t : in.tables) {
    std::vector<TablePlacement> all;
    for (const TableOption& o : EnumerateTableOptions(t, ctx)) {
      const int s = o.type == ShardingType::kDataParallel ? 0 : o.shards();
      std::vector<int> ranks(s);
      std::function<void(int, unsigned)> rec = [&](int i, unsigned used) {
        if (i == s) {
          all.push_back(MakePlacement(o, ranks, t.config));
          return;
        }
        for (int r = 0; r < n; ++r) {
          if (used & (1u << r)) continue;
          ranks[i] = r;
          rec(i + 1, used | (1u << r));
        }
      };
      rec(0, 0);
    }
    per_table.push_back(all);
  }
  double best = 1e300;
  std::vector<TablePlacement> cur(in.tables.size());
  std::function<void(size_t)> go = [&](size_t t) {
    if (t == in.tables.size()) {
      StepEstimate e = est.Evaluate(cur);
      if (!EstimateFits(in, e, nullptr)) return;
      if (e.step.total() < best) {
        best = e.step.total();
        if (best_out != nullptr) *best_out = cur;
      }
      return;
    }
    for (const TablePlacement& p : per_table[t]) {
      cur[t] = p;
      go(t + 1);
    }
  };
  go(0);
  return best;
}

struct Case {
  std::vector<int64_t> rows;
  int64_t dim;
  int n;
  double ids;
  int64_t host;
};

// The greedy + local search is a heuristic: on these cases it is within 20% of the optimum
// (measured: 3 of 5 optimal, the worst 15% above) (single-table moves cannot always undo two early
// choices together).
TEST(SearchTest, CloseToBruteForce) {
  MachineProfile prof = FlatProfile(2e-6);
  std::vector<Case> cases = {
      {{5000, 800, 50}, 16, 2, 1, int64_t{1} << 30},
      {{20000, 20000, 100}, 8, 2, 4, int64_t{1} << 30},
      {{100000, 1000, 1000}, 8, 3, 2, int64_t{1} << 30},
      {{3000, 3000, 3000}, 8, 3, 1, int64_t{1} << 30},
      // Memory-bound: the big table cannot sit on one rank.
      {{200000, 5000}, 16, 2, 1, 12 << 20},
  };
  for (const Case& c : cases) {
    PlanInputs in = SmallInputs(c.rows, c.dim, c.n, 64, c.ids);
    in.topology.memory.host = c.host;
    absl::StatusOr<Estimator> est = Estimator::Create(in, prof, c.n);
    ASSERT_TRUE(est.ok()) << est.status();
    absl::StatusOr<GroupPlan> g = SearchGroup(*est, SearchOptions{});
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<TablePlacement> best;
    const double brute = BruteForce(*est, &best);
    const double got = g->estimate.step.total();
    std::string mine, theirs;
    for (size_t t = 0; t < best.size(); ++t) {
      theirs += OptionName(best[t].option) + "@";
      for (const Shard& sh : best[t].shards) theirs += std::to_string(sh.rank);
      theirs += "; ";
      mine += OptionName(g->tables[t].placement.option) + "@";
      for (const Shard& sh : g->tables[t].placement.shards) mine += std::to_string(sh.rank);
      mine += "; ";
    }
    EXPECT_TRUE(EstimateFits(in, g->estimate, nullptr));
    EXPECT_GE(got, brute * (1 - 1e-9));
    EXPECT_LE(got, brute * 1.20) << "rows " << c.rows[0] << " n " << c.n << "\n search: " << mine
                                 << "\n brute:  " << theirs;
  }
}

TEST(SearchTest, Deterministic) {
  MachineProfile prof = FlatProfile(2e-6);
  PlanInputs in = SmallInputs({50000, 7000, 7000, 300, 20000, 9}, 16, 4, 256, 3);
  absl::StatusOr<PlanResult> a = PlanSharding(in, prof, PlannerOptions{});
  absl::StatusOr<PlanResult> b = PlanSharding(in, prof, PlannerOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ShardingPlanToYaml(a->plan), ShardingPlanToYaml(b->plan));
  EXPECT_EQ(a->reasons, b->reasons);
}

TEST(SearchTest, InfeasibleNamesTableKindAndShortfall) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({10000000, 10}, 64, 2, 64);
  in.topology.memory.host = int64_t{1} << 30;  // the table needs 2.4 GiB over 2 ranks
  absl::StatusOr<PlanResult> r = PlanSharding(in, prof, PlannerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 't0'"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("host memory"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("short by"));
}

TEST(SearchTest, TierWhenMemoryIsShort) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({10000000, 10}, 64, 2, 64);
  in.topology.memory.host = int64_t{1} << 30;
  in.topology.memory.disk = int64_t{100} << 30;
  absl::StatusOr<PlanResult> r = PlanSharding(in, prof, PlannerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->plan.tables[0].storage.set);
  EXPECT_EQ(r->plan.tables[0].storage.tier, StorageTier::kRocksDb);
  EXPECT_GT(r->plan.tables[0].storage.cache_rows, 0);
  EXPECT_FALSE(r->plan.tables[1].storage.set);  // the small table stays in memory
  // The plan file round-trips, storage included.
  absl::StatusOr<ShardingPlan> back =
      ParseShardingPlan(ShardingPlanToYaml(r->plan), "rt", TableConfigs(in), r->plan.group_size);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ShardingPlanToYaml(*back), ShardingPlanToYaml(r->plan));
}

// A profile without tier points (calibrate --tier_dims ""): no table goes to the tier, so the
// same inputs do not fit; a config that fixes a table there is refused naming it.
TEST(SearchTest, NoTierPointsNoTier) {
  MachineProfile prof = FlatProfile();
  prof.tier.clear();
  PlanInputs in = SmallInputs({10000000, 10}, 64, 2, 64);
  in.topology.memory.host = int64_t{1} << 30;
  in.topology.memory.disk = int64_t{100} << 30;
  absl::StatusOr<PlanResult> r = PlanSharding(in, prof, PlannerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  in.topology.memory.host = int64_t{64} << 30;
  in.tables[0].storage_fixed = true;
  in.tables[0].config.storage.tier = StorageTier::kRocksDb;
  r = PlanSharding(in, prof, PlannerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 't0' is on the RocksDB tier"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no tier points"));
}

TEST(SearchTest, BadInputsNameTheTable) {
  MachineProfile prof = FlatProfile();
  PlanInputs in = SmallInputs({100, 0}, 8, 2);
  absl::StatusOr<PlanResult> r = PlanSharding(in, prof, PlannerOptions{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 't1' has 0 rows"));
  in = SmallInputs({100, 10}, 8, 4);
  in.group_size = 3;
  r = PlanSharding(in, prof, PlannerOptions{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("does not divide the world size 4"));
  in = SmallInputs({100, 10}, 8, 2);
  in.step.device = "cuda";  // the flat profile has no cuda device
  r = PlanSharding(in, prof, PlannerOptions{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no 'cuda' device"));
}

TEST(SearchTest, BeatsTheDefaultPlan) {
  MachineProfile prof = FlatProfile(2e-6);
  PlanInputs in = SmallInputs({200000, 50000, 1000, 1000, 20, 300000, 7}, 16, 4, 256, 2);
  absl::StatusOr<PlanResult> r = PlanSharding(in, prof, PlannerOptions{{4}, {}});
  ASSERT_TRUE(r.ok()) << r.status();
  ShardingPlan def = DefaultShardingPlan(TableConfigs(in), 4);
  def.group_size = 4;
  absl::StatusOr<StepEstimate> d = EstimatePlan(in, prof, def);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_LE(r->group.estimate.step.total(), d->step.total());
}

}  // namespace
}  // namespace tessera::planner
