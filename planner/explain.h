// Explain: what tessera-plan prints about a plan.
//   text  the chosen group size and every size tried; the predicted step (critical path) by
//         phase; a per-rank table (memory by kind, predicted ms per phase, the slowest rank
//         marked) with the imbalance max/mean; the comparison with the baselines; one line per
//         table saying why it went where it went
//   json  the same as one object (docs/PLANNER.md "JSON output")
//   svg   per-rank bars of predicted embedding time (lookup, update, transfers) and of memory
//         against the limit
#pragma once

#include <string>
#include <vector>

#include "planner/planner.h"

namespace tessera::planner {

// A plan priced by the same estimator, for comparison (DefaultShardingPlan, TorchRec-style).
struct Baseline {
  std::string name;
  bool ok = false;
  std::string error;  // why it has no estimate (e.g. it does not fit)
  int group_size = 0;
  StepEstimate estimate;
  bool fits = true;
  std::string fits_what;  // which rank and kind is short, when it does not fit
};

std::string ExplainText(const PlanInputs& in, const PlanResult& r,
                        const std::vector<Baseline>& baselines);
std::string ExplainJson(const PlanInputs& in, const PlanResult& r,
                        const std::vector<Baseline>& baselines);
std::string ExplainSvg(const PlanInputs& in, const PlanResult& r);

}  // namespace tessera::planner
