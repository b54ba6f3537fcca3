// The planner's driver (planner.h).
#include "planner/planner.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace tessera::planner {

namespace {

std::vector<int> CandidateGroupSizes(const PlanInputs& in, const PlannerOptions& o) {
  if (!o.group_sizes.empty()) return o.group_sizes;
  const int t = in.topology.world_size;
  if (in.group_size > 0) return {in.group_size};
  std::vector<int> out;
  for (int n = 1; n <= t; n *= 2) {
    if (t % n == 0) out.push_back(n);
  }
  if (out.back() != t) out.push_back(t);
  return out;
}

std::string Ms(double s) { return absl::StrFormat("%.3f ms", 1e3 * s); }

std::string Reason(const PlanInputs& in, const GroupPlan& g, int t) {
  const TableDecision& d = g.tables[t];
  const PlanTable& tab = in.tables[t];
  std::string line = absl::StrCat(tab.config.name, " (", tab.config.num_rows, " x ",
                                  tab.config.dim, ", ", absl::StrFormat("%.3g", IdsPerSample(tab)),
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
  absl::StrAppend(&line, ": predicted step ", Ms(d.step_s), " at its turn");
  if (!d.runner_up.empty()) {
    absl::StrAppend(&line, "; next best ", d.runner_up, " ", Ms(d.runner_up_step_s), " (+",
                    Ms(d.runner_up_step_s - d.step_s), ")");
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
  for (int n : CandidateGroupSizes(in, options)) {
    GroupTried tried;
    tried.group_size = n;
    TESSERA_ASSIGN_OR_RETURN(Estimator est, Estimator::Create(in, profile, n));
    absl::StatusOr<GroupPlan> g = SearchGroup(est, options.search);
    if (!g.ok()) {
      if (!absl::IsResourceExhausted(g.status())) return g.status();
      tried.why_not = std::string(g.status().message());
      last_error = g.status();
      result.tried.push_back(tried);
      continue;
    }
    std::string short_what;
    if (!EstimateFits(in, g->estimate, &short_what)) {
      tried.why_not = short_what;
      last_error = absl::ResourceExhaustedError(absl::StrCat(in.source, ": ", short_what));
      result.tried.push_back(tried);
      continue;
    }
    tried.feasible = true;
    tried.step_s = g->estimate.step.total();
    result.tried.push_back(tried);
    if (!have || tried.step_s < result.group.estimate.step.total()) {
      result.group = std::move(g).value();
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
    if (d.placement.option.tiered != config_rocksdb || (d.placement.option.tiered &&
                                                        d.placement.option.cache_rows_fixed == 0)) {
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
    return absl::InternalError(absl::StrCat("the planner made an invalid plan: ",
                                            valid.status().message()));
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
