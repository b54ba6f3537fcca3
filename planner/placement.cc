// The estimator's names and placements (estimator.h): phase and memory-kind names, and the
// shards of a table option or of a plan file's table.
#include <algorithm>

#include "planner/estimator.h"

namespace tessera::planner {

const char* PhaseName(Phase p) {
  static const char* kNames[kNumPhases] = {
      "input_dist",    "lookup",           "output_dist",     "dense_forward", "dense_backward",
      "backward_dist", "embedding_update", "dense_allreduce", "replica_sync",  "tier_misses"};
  return kNames[p];
}

const char* MemKindName(MemKind k) {
  static const char* kNames[kNumMemKinds] = {"device", "host", "disk"};
  return kNames[k];
}

double PhaseTimes::total() const {
  double t = 0;
  for (double v : s) t += v;
  return t;
}

TablePlacement MakePlacement(const TableOption& option, const std::vector<int>& ranks,
                             const TableConfig& table) {
  TablePlacement p;
  p.option = option;
  if (option.type == ShardingType::kDataParallel) return p;
  for (int i = 0; i < option.row_pieces; ++i) {
    for (int j = 0; j < option.col_pieces; ++j) {
      Shard s;
      PieceRange(table.num_rows, option.row_pieces, i, &s.row_begin, &s.row_end);
      PieceRange(table.dim, option.col_pieces, j, &s.col_begin, &s.col_end);
      s.rank = ranks[i * option.col_pieces + j];
      p.shards.push_back(s);
    }
  }
  return p;
}

TablePlacement PlacementFromPlan(const TablePlan& plan, const PlanTable& table) {
  TablePlacement p;
  p.option.type = plan.type;
  p.shards = plan.shards;
  const TableStorage& st = table.config.storage;
  if (plan.storage.set) {
    p.option.tiered = plan.storage.tier == StorageTier::kRocksDb;
    p.option.cache_rows_fixed = p.option.tiered ? plan.storage.cache_rows : 0;
  } else if (st.tier == StorageTier::kRocksDb) {
    p.option.tiered = true;
    p.option.cache_rows_fixed =
        st.cache_rows > 0 ? st.cache_rows
                          : std::max<int64_t>(1, st.cache_bytes / (table.config.dim * 4 + 48));
  }
  return p;
}

}  // namespace tessera::planner
