// The planner's driver (planner.h).
#include "planner/planner.h"

#include <atomic>
#include <cmath>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "planner/baselines.h"

namespace tessera::planner {

namespace {

std::vector<int> CandidateGroupSizes(const PlanInputs& in, const PlannerOptions& o) {
  if (!o.group_sizes.empty()) return o.group_sizes;
  const int t = in.topology.world_size;
  if (in.group_size > 0) return {in.group_size};
  std::vector<int> out;
  for (int n = 1; n <= std::min(t, kMaxChosenGroupSize); n *= 2) {
    if (t % n == 0) out.push_back(n);
  }
  if (t <= kMaxChosenGroupSize && out.back() != t) out.push_back(t);
  return out;
}

std::string Ms(double s) { return absl::StrFormat("%.3f ms", 1e3 * s); }

std::string Reason(const PlanInputs& in, const GroupPlan& g, int t) {
  const TableDecision& d = g.tables[t];
  const PlanTable& tab = in.tables[t];
  std::string line = absl::StrCat(tab.config.name, " (", tab.config.num_rows, " x ", tab.config.dim,
                                  ", ", absl::StrFormat("%.3g", IdsPerSample(tab)),
                                  " ids/sample): ", OptionName(d.placement.option));
  if (!d.placement.shards.empty()) {
    std::vector<int> ranks;
    for (const Shard& s : d.placement.shards) ranks.push_back(s.rank);
    if (ranks.size() <= 8) {
      absl::StrAppend(&line, " on rank", ranks.size() > 1 ? "s" : "", " ");
      for (size_t i = 0; i < ranks.size(); ++i) absl::StrAppend(&line, i ? "," : "", ranks[i]);
    } else {
      absl::StrAppend(&line, " on ", ranks.size(), " ranks");
    }
  }
  if (!d.started_from.empty()) {
    absl::StrAppend(&line, ": as the ", d.started_from,
                    " plan has it (the search started there; no single-table change lowers the "
                    "step)");
  } else {
    absl::StrAppend(&line, ": predicted step ", Ms(d.step_s), " when placed");
  }
  if (!d.runner_up.empty()) {
    const double more = d.runner_up_step_s - d.step_s;
    absl::StrAppend(&line, "; next best ", d.runner_up, " ", Ms(d.runner_up_step_s), " (",
                    more >= 0 ? "+" : "-", Ms(std::abs(more)), ")");
    if (more < 0) {
      // The search does not choose by the step alone (search.cc Guide / Balanced).
      absl::StrAppend(&line, d.by_balance
                                 ? ": a lower step, but a less even load over the group's ranks "
                                   "(the choice weighs the step at the slowest rank plus 0.001 x "
                                   "the step at the ranks' rms load)"
                                 : ": a lower step, but more work over the group's ranks (the "
                                   "choice weighs the step at the slowest rank plus 4 x the step "
                                   "at the mean load)");
    }
  } else {
    absl::StrAppend(&line, "; the only option that fits");
  }
  if (!d.first_shortfall.empty()) {
    absl::StrAppend(&line, "; options that do not fit, e.g. ", d.first_shortfall);
  }
  return line;
}

}  // namespace

std::vector<TableConfig> TableConfigs(const PlanInputs& in) {
  std::vector<TableConfig> out;
  for (const PlanTable& t : in.tables) out.push_back(t.config);
  return out;
}

bool EstimateFits(const PlanInputs& in, const StepEstimate& e, std::string* what) {
  for (size_t r = 0; r < e.memory.size(); ++r) {
    for (int k = 0; k < kNumMemKinds; ++k) {
      const double limit = MemoryLimit(in, MemKind(k));
      if (e.memory[r][k] > limit + 0.5) {
        if (what != nullptr) {
          *what = absl::StrCat("rank ", r, ": ", MemKindName(MemKind(k)), " needs ",
                               FormatBytes(e.memory[r][k]), ", has ", FormatBytes(limit));
        }
        return false;
      }
    }
  }
  return true;
}

absl::StatusOr<PlanResult> PlanSharding(const PlanInputs& in, const MachineProfile& profile,
                                        const PlannerOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TESSERA_RETURN_IF_ERROR(ValidatePlanInputs(in));
  PlanResult result;
  absl::Status last_error;
  bool have = false;
  // Every candidate N is planned on its own thread (independent; combined in N order, so the
  // result does not depend on the threads).
  const std::vector<int> sizes = CandidateGroupSizes(in, options);
  struct Outcome {
    absl::Status status;
    GroupPlan plan;
    bool ok = false;
  };
  std::vector<Outcome> outcomes(sizes.size());
  auto plan_one = [&](size_t i) {
    const int n = sizes[i];
    absl::StatusOr<Estimator> est = Estimator::Create(in, profile, n);
    if (!est.ok()) {
      outcomes[i].status = est.status();
      return;
    }
    std::vector<SearchSeed> seeds;
    auto add_seed = [&](const std::string& name, absl::StatusOr<ShardingPlan> p) {
      if (!p.ok()) return;
      absl::StatusOr<ShardingPlan> v = ValidateShardingPlan(*p, TableConfigs(in), n, name);
      if (!v.ok()) return;
      SearchSeed seed;
      seed.name = name;
      for (size_t t = 0; t < in.tables.size(); ++t) {
        seed.placement.push_back(PlacementFromPlan(v->tables[t], in.tables[t]));
      }
      seeds.push_back(std::move(seed));
    };
    if (options.seed_with_baselines) {
      add_seed("default", DefaultShardingPlan(TableConfigs(in), n));
      add_seed("torchrec_style", TorchRecStylePlan(in, n));
    }
    absl::StatusOr<GroupPlan> g = SearchGroup(*est, options.search, seeds);
    if (!g.ok()) {
      outcomes[i].status = g.status();
      return;
    }
    outcomes[i].plan = std::move(g).value();
    outcomes[i].ok = true;
  };
  const int threads =
      std::max(1, std::min<int>(static_cast<int>(sizes.size()),
                                static_cast<int>(std::thread::hardware_concurrency())));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < sizes.size(); i = next++) plan_one(i);
    });
  }
  for (std::thread& th : pool) th.join();
  for (size_t i = 0; i < sizes.size(); ++i) {
    GroupTried tried;
    tried.group_size = sizes[i];
    Outcome& o = outcomes[i];
    if (!o.ok) {
      if (!absl::IsResourceExhausted(o.status)) return o.status;
      tried.why_not = std::string(o.status.message());
      last_error = o.status;
      result.tried.push_back(tried);
      continue;
    }
    std::string short_what;
    if (!EstimateFits(in, o.plan.estimate, &short_what)) {
      tried.why_not = short_what;
      last_error = absl::ResourceExhaustedError(absl::StrCat(in.source, ": ", short_what));
      result.tried.push_back(tried);
      continue;
    }
    tried.feasible = true;
    tried.step_s = o.plan.estimate.step.total();
    result.tried.push_back(tried);
    if (!have || tried.step_s < result.group.estimate.step.total()) {
      result.group = std::move(o.plan);
      have = true;
    }
  }
  if (!have) return last_error;

  ShardingPlan plan;
  plan.group_size = result.group.group_size;
  for (size_t t = 0; t < in.tables.size(); ++t) {
    const TableDecision& d = result.group.tables[t];
    TablePlan tp;
    tp.table = in.tables[t].config.name;
    tp.type = d.placement.option.type;
    tp.shards = d.placement.shards;
    const bool config_rocksdb = in.tables[t].config.storage.tier == StorageTier::kRocksDb;
    if (d.placement.option.tiered != config_rocksdb ||
        (d.placement.option.tiered && d.placement.option.cache_rows_fixed == 0)) {
      tp.storage.set = true;
      tp.storage.tier = d.placement.option.tiered ? StorageTier::kRocksDb : StorageTier::kMemory;
      if (d.placement.option.tiered) {
        tp.storage.cache_rows = std::max<int64_t>(
            1, static_cast<int64_t>(d.placement.option.cache_share *
                                    static_cast<double>(in.tables[t].config.num_rows)));
      }
    }
    plan.tables.push_back(std::move(tp));
    result.reasons.push_back(Reason(in, result.group, static_cast<int>(t)));
  }
  absl::StatusOr<ShardingPlan> valid =
      ValidateShardingPlan(std::move(plan), TableConfigs(in), result.group.group_size, "planner");
  if (!valid.ok()) {
    return absl::InternalError(
        absl::StrCat("the planner made an invalid plan: ", valid.status().message()));
  }
  result.plan = std::move(valid).value();
  result.planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

absl::StatusOr<StepEstimate> EstimatePlan(const PlanInputs& in, const MachineProfile& profile,
                                          const ShardingPlan& plan) {
  TESSERA_RETURN_IF_ERROR(ValidatePlanInputs(in));
  const int n = plan.group_size > 0 ? plan.group_size : in.topology.world_size;
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan valid,
                           ValidateShardingPlan(plan, TableConfigs(in), n, "plan"));
  TESSERA_ASSIGN_OR_RETURN(Estimator est, Estimator::Create(in, profile, n));
  std::vector<TablePlacement> placement;
  for (size_t t = 0; t < in.tables.size(); ++t) {
    placement.push_back(PlacementFromPlan(valid.tables[t], in.tables[t]));
  }
  return est.Evaluate(placement);
}

}  // namespace tessera::planner
