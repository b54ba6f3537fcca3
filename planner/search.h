// Search: the placement of every table in one sharding group of N ranks that minimises the
// estimator's step time (the slowest rank of every phase) under the memory limits.
//
// 1. Greedy, largest first: tables in decreasing order of their table-wise cost (lookup +
//    update + transfer time on one rank; ties: model order). For each table every option of the
//    enumerator is tried on the ranks it would use: the feasible ranks with the least embedding
//    time so far (one per shard; also the rank with the most free memory for one-shard options;
//    all N ranks for N-shard options; the least loaded node for table_row_wise); the option
//    whose placement gives the lowest predicted step time at the slowest ranks plus the step
//    time at the mean load wins (the mean term charges what an option costs the other ranks;
//    ties: the enumerator's order).
// 2. Re-insertion: each table in turn is taken out and placed again by step 1's rule given all
//    the others (kept when the criterion improves), for up to `passes` rounds or until a round
//    changes nothing; then the same by the predicted step time alone.
// 3. Seeds (optional; the planner passes DefaultShardingPlan and the TorchRec-style plan for
//    this N): each that fits is improved by step 2's second half; the lowest predicted step of
//    all starts wins, so the plan is never predicted slower than a seed.
// Deterministic: no randomness, no dependence on timing or threads, so every rank computes the
// same plan from the same inputs. A table no option fits is ResourceExhausted naming the table,
// the memory kind and the shortfall of its least-short option.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/estimator.h"

namespace tessera::planner {

struct SearchOptions {
  int passes = 2;  // re-insertion rounds after the greedy. Default: 2
};

struct TableDecision {
  TablePlacement placement;
  double step_s = 0;      // predicted step with this choice when placed (tables placed so far)
  double guide = 0;       // the greedy's criterion for it (see search.cc Guide)
  std::string runner_up;  // the next-best option, "" if none was feasible
  double runner_up_step_s = 0;
  // True when the choice was made by the balance criterion (search.cc Balanced: the step at the
  // slowest rank + the step at the rms load) rather than the guide (the step at the slowest
  // rank + 4 x the step at the mean load): what explains a runner-up of lower step_s.
  bool by_balance = false;
  int infeasible_options = 0;   // options that did not fit
  std::string first_shortfall;  // e.g. "host short by 3.2 GiB" for the largest infeasible
  std::string started_from;     // a seed's name when the placement came from it unchanged
};

// A complete placement to start re-insertion from (a baseline's plan, priced and improved by
// the estimator); the search keeps whichever start ends lowest.
struct SearchSeed {
  std::string name;
  std::vector<TablePlacement> placement;  // one per table, model order
};

struct GroupPlan {
  int group_size = 1;
  std::vector<TableDecision> tables;  // model order
  StepEstimate estimate;
};

[[nodiscard]] absl::StatusOr<GroupPlan> SearchGroup(const Estimator& est,
                                                    const SearchOptions& options,
                                                    const std::vector<SearchSeed>& seeds = {});

// The memory limit of `kind` per rank from the inputs' topology (a kind absent = 0).
double MemoryLimit(const PlanInputs& in, MemKind kind);
std::string FormatBytes(double bytes);

}  // namespace tessera::planner
