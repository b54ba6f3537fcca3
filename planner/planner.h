// The planner: inputs + machine profile -> the sharding plan of least predicted step time.
//
// For each candidate group size N (the config's when it fixes one; else every power of two
// dividing T up to kMaxChosenGroupSize) it builds an Estimator and runs the search (search.h); the
// N of least predicted step time wins (ties: the smaller N). The result is a validated ShardingPlan
// (the file the trainer reads, with `storage` for tables the planner moved to the RocksDB tier),
// the estimate behind it and one line per table saying why. Deterministic: the same inputs and
// profile give the same plan bytes on every rank and every run (planning time is reported but
// not part of the plan).
// Thread-safety: PlanSharding may run on several threads at once.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/estimator.h"
#include "planner/inputs.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "sharding/plan.h"

namespace tessera::planner {

// The largest group size the planner picks by itself (a config may fix any): beyond it the
// all-to-alls' per-peer latency outgrows what a larger group saves in replica sync.
inline constexpr int kMaxChosenGroupSize = 256;

struct PlannerOptions {
  // Group sizes to try; empty = the inputs' fixed group size, else every power of two dividing
  // T up to kMaxChosenGroupSize, and T itself when T <= kMaxChosenGroupSize.
  std::vector<int> group_sizes;
  SearchOptions search;
  // Also start the search from DefaultShardingPlan and the TorchRec-style plan at each N
  // (search.h, seeds). Default: true.
  bool seed_with_baselines = true;
};

struct GroupTried {
  int group_size = 0;
  bool feasible = false;
  double step_s = 0;    // predicted, when feasible
  std::string why_not;  // the search's error, when not
};

struct PlanResult {
  ShardingPlan plan;                 // validated for the chosen group size
  GroupPlan group;                   // per-table decisions and the estimate
  std::vector<std::string> reasons;  // one line per table (model order)
  std::vector<GroupTried> tried;
  double planning_s = 0;  // wall time of PlanSharding (not deterministic)
};

[[nodiscard]] absl::StatusOr<PlanResult> PlanSharding(const PlanInputs& inputs,
                                                      const MachineProfile& profile,
                                                      const PlannerOptions& options);

// The estimate of a given plan (a plan file, DefaultShardingPlan, a baseline) for its group
// size (plan.group_size, or T when 0). InvalidArgument when the plan does not validate.
[[nodiscard]] absl::StatusOr<StepEstimate> EstimatePlan(const PlanInputs& inputs,
                                                        const MachineProfile& profile,
                                                        const ShardingPlan& plan);

// Whether `e` fits the inputs' memory limits on every rank; `what` says which kind is short.
bool EstimateFits(const PlanInputs& inputs, const StepEstimate& e, std::string* what);

// The tables' configs (what ValidateShardingPlan takes).
std::vector<TableConfig> TableConfigs(const PlanInputs& inputs);

}  // namespace tessera::planner
