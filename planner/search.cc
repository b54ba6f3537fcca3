// Greedy placement + re-insertion (search.h).
#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::planner {

namespace {

// Max over a fixed array, point updates in O(log n).
class MaxTree {
 public:
  explicit MaxTree(int n) : size_(1) {
    while (size_ < n) size_ *= 2;
    t_.assign(2 * size_, -1e300);
    for (int i = 0; i < n; ++i) t_[size_ + i] = 0;
    for (int i = size_ - 1; i >= 1; --i) t_[i] = std::max(t_[2 * i], t_[2 * i + 1]);
  }
  void Set(int i, double v) {
    int p = size_ + i;
    t_[p] = v;
    for (p /= 2; p >= 1; p /= 2) t_[p] = std::max(t_[2 * p], t_[2 * p + 1]);
  }
  double Max() const { return t_[1]; }

 private:
  int size_;
  std::vector<double> t_;
};

double Score(const MetricVec& d) {
  return d[kLookupS] + d[kUpdateS] + d[kTierS] + d[kTierWriteS] + d[kSyncS] +
         std::max(d[kInSend], d[kInRecv]) + 2 * std::max(d[kOutSend], d[kOutRecv]);
}

class SearchState {
 public:
  explicit SearchState(const Estimator& est)
      : est_(est), n_(est.group_size()), d_(n_, MetricVec{}), score_(n_, 0) {
    u_ = est.FixedPerRank();
    for (int k = 0; k < kNumMetrics; ++k) trees_.emplace_back(n_);
    for (int r = 0; r < n_; ++r) {
      by_score_.insert({0.0, r});
      by_mem_.insert({0.0, r});
    }
    for (int k = 0; k < kNumMemKinds; ++k) limit_[k] = MemoryLimit(est.inputs(), MemKind(k));
    mem_metric_ = kMemDevice + static_cast<int>(est.table_kind());
  }

  void Apply(const Contribution& c, double sign) {
    for (int k = 0; k < kNumMetrics; ++k) u_[k] += sign * c.uniform[k];
    world_bytes_ += sign * c.world_allreduce_bytes;
    if (static_cast<int>(c.per_rank.size()) == n_ && n_ > 64 && Permutation(c)) {
      // One shard per rank: nearly equal deltas everywhere; folded into the uniform part.
      for (const auto& pr : c.per_rank) {
        for (int k = 0; k < kNumMetrics; ++k) u_[k] += sign * pr.second[k] / n_;
      }
      return;
    }
    for (const auto& [r, d] : c.per_rank) {
      by_score_.erase({score_[r], r});
      by_mem_.erase({d_[r][mem_metric_], r});
      for (int k = 0; k < kNumMetrics; ++k) {
        if (d[k] == 0) continue;
        d_[r][k] += sign * d[k];
        trees_[k].Set(r, d_[r][k]);
      }
      score_[r] = Score(d_[r]);
      by_score_.insert({score_[r], r});
      by_mem_.insert({d_[r][mem_metric_], r});
    }
  }

  MetricVec Maxima() const {
    MetricVec mx;
    for (int k = 0; k < kNumMetrics; ++k) mx[k] = u_[k] + trees_[k].Max();
    return mx;
  }
  double Objective() const { return est_.StepFromMaxima(Maxima(), world_bytes_).total(); }
  // Worst relative memory overflow over the kinds, and its text; 0 when everything fits.
  double Shortfall(std::string* what) const {
    MetricVec mx = Maxima();
    double worst = 0;
    for (int k = 0; k < kNumMemKinds; ++k) {
      const double used = mx[kMemDevice + k];
      if (used <= limit_[k] + 0.5) continue;
      const double over = used - limit_[k];
      if (over > worst) {
        worst = over;
        if (what != nullptr) {
          *what = absl::StrCat(MemKindName(MemKind(k)), " memory needs ", FormatBytes(used),
                               " per rank, ", FormatBytes(limit_[k]), " available (short by ",
                               FormatBytes(over), ")");
        }
      }
    }
    return worst;
  }

  std::vector<int> LeastLoaded(int count, bool by_memory) const {
    std::vector<int> out;
    const auto& set = by_memory ? by_mem_ : by_score_;
    for (auto it = set.begin(); it != set.end() && static_cast<int>(out.size()) < count; ++it) {
      out.push_back(it->second);
    }
    return out;
  }
  std::vector<int> LeastLoadedNode() const {
    int best_node = -1;
    double best = 1e300;
    std::vector<double> node_score;
    for (int r = 0; r < n_; ++r) {
      int nd = est_.node_of(r);
      if (nd >= static_cast<int>(node_score.size())) node_score.resize(nd + 1, 0);
      node_score[nd] += score_[r];
    }
    for (size_t nd = 0; nd < node_score.size(); ++nd) {
      if (node_score[nd] < best) {
        best = node_score[nd];
        best_node = static_cast<int>(nd);
      }
    }
    std::vector<int> out;
    for (int r = 0; r < n_; ++r) {
      if (est_.node_of(r) == best_node) out.push_back(r);
    }
    return out;
  }

 private:
  bool Permutation(const Contribution& c) const {
    std::vector<char> seen(n_, 0);
    for (const auto& pr : c.per_rank) {
      if (seen[pr.first]) return false;
      seen[pr.first] = 1;
    }
    return true;
  }

  const Estimator& est_;
  int n_;
  MetricVec u_{};
  std::vector<MetricVec> d_;
  std::vector<MaxTree> trees_;
  std::vector<double> score_;
  std::set<std::pair<double, int>> by_score_, by_mem_;
  double world_bytes_ = 0;
  double limit_[kNumMemKinds] = {};
  int mem_metric_ = kMemHost;
};

struct Choice {
  bool feasible = false;
  double objective = 1e300;
  double shortfall = 1e300;
  std::string shortfall_text;
  TablePlacement placement;
  Contribution contribution;
};

// Best placement of table t given the state (the table not applied).
TableDecision Choose(const Estimator& est, SearchState& state, int t,
                     const std::vector<TableOption>& options, Contribution* chosen,
                     bool* feasible) {
  const int n = est.group_size();
  Choice best, second, least_short;
  for (const TableOption& o : options) {
    std::vector<std::vector<int>> rank_sets;
    const int s = o.shards();
    if (o.type == ShardingType::kDataParallel) {
      rank_sets.push_back({});
    } else if (o.type == ShardingType::kTableRowWise) {
      std::vector<int> node = est.node_ranks() >= s ? state.LeastLoadedNode() : std::vector<int>{};
      if (static_cast<int>(node.size()) < s) continue;
      node.resize(s);
      rank_sets.push_back(node);
    } else if (s == n) {
      std::vector<int> all(n);
      std::iota(all.begin(), all.end(), 0);
      rank_sets.push_back(all);
    } else {
      rank_sets.push_back(state.LeastLoaded(s, false));
      std::vector<int> by_mem = state.LeastLoaded(s, true);
      if (by_mem != rank_sets.front()) rank_sets.push_back(by_mem);
    }
    for (const std::vector<int>& ranks : rank_sets) {
      Choice c;
      c.placement = MakePlacement(o, ranks, est.inputs().tables[t].config);
      c.contribution = est.Contribute(t, c.placement);
      state.Apply(c.contribution, +1);
      c.shortfall = state.Shortfall(&c.shortfall_text);
      c.feasible = c.shortfall == 0;
      c.objective = state.Objective();
      state.Apply(c.contribution, -1);
      if (!c.feasible) {
        if (c.shortfall < least_short.shortfall) least_short = std::move(c);
        continue;
      }
      if (c.objective < best.objective) {
        if (best.feasible && OptionName(best.placement.option) != OptionName(o)) {
          second = std::move(best);
        }
        best = std::move(c);
      } else if (c.objective < second.objective && OptionName(best.placement.option) != OptionName(o)) {
        second = std::move(c);
      }
    }
  }
  TableDecision dec;
  int infeasible = 0;
  (void)infeasible;
  if (!best.feasible) {
    *feasible = false;
    dec.placement = least_short.placement;
    dec.first_shortfall = least_short.shortfall_text;
    return dec;
  }
  *feasible = true;
  dec.placement = best.placement;
  dec.step_s = best.objective;
  if (second.feasible) {
    dec.runner_up = OptionName(second.placement.option);
    dec.runner_up_step_s = second.objective;
  }
  if (least_short.shortfall < 1e300) dec.first_shortfall = least_short.shortfall_text;
  *chosen = std::move(best.contribution);
  return dec;
}

}  // namespace

double MemoryLimit(const PlanInputs& in, MemKind kind) {
  switch (kind) {
    case kDevice: return static_cast<double>(in.topology.memory.device);
    case kHost: return static_cast<double>(in.topology.memory.host);
    case kDisk: return static_cast<double>(in.topology.memory.disk);
    default: return 0;
  }
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::abs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", v) : absl::StrFormat("%.2f %s", v, units[u]);
}

absl::StatusOr<GroupPlan> SearchGroup(const Estimator& est, const SearchOptions& options) {
  const PlanInputs& in = est.inputs();
  const int num_tables = static_cast<int>(in.tables.size());
  EnumerateContext ctx;
  ctx.group_size = est.group_size();
  ctx.world_size = in.topology.world_size;
  ctx.node_ranks = est.node_ranks();
  ctx.disk_available = in.topology.memory.disk > 0;
  ctx.tier_allowed = est.table_kind() == kHost;
  std::vector<std::vector<TableOption>> opts(num_tables);
  std::vector<double> cost(num_tables);
  for (int t = 0; t < num_tables; ++t) {
    opts[t] = EnumerateTableOptions(in.tables[t], ctx);
    if (opts[t].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          in.source, ": table '", in.tables[t].config.name, "': no sharding option allows '",
          in.tables[t].fixed_type, "' with storage as configured"));
    }
    Contribution c = est.Contribute(t, MakePlacement(TableOption{}, {0}, in.tables[t].config));
    cost[t] = c.per_rank.empty() ? 0 : Score(c.per_rank.front().second);
  }
  std::vector<int> order(num_tables);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });

  SearchState state(est);
  GroupPlan plan;
  plan.group_size = est.group_size();
  plan.tables.resize(num_tables);
  std::vector<Contribution> applied(num_tables);
  for (int t : order) {
    bool ok = false;
    TableDecision dec = Choose(est, state, t, opts[t], &applied[t], &ok);
    if (!ok) {
      return absl::ResourceExhaustedError(absl::StrCat(
          in.source, ": table '", in.tables[t].config.name, "' (", in.tables[t].config.num_rows,
          " rows x ", in.tables[t].config.dim, ") does not fit on ", in.topology.world_size,
          " ranks in groups of ", est.group_size(), ": best option ",
          OptionName(dec.placement.option), ": ", dec.first_shortfall));
    }
    state.Apply(applied[t], +1);
    plan.tables[t] = std::move(dec);
  }
  for (int pass = 0; pass < options.passes; ++pass) {
    bool changed = false;
    for (int t : order) {
      const double before = state.Objective();
      state.Apply(applied[t], -1);
      bool ok = false;
      Contribution c;
      TableDecision dec = Choose(est, state, t, opts[t], &c, &ok);
      if (ok && dec.step_s < before - 1e-12 * std::max(1.0, before)) {
        state.Apply(c, +1);
        applied[t] = std::move(c);
        plan.tables[t] = std::move(dec);
        changed = true;
      } else {
        state.Apply(applied[t], +1);
      }
    }
    if (!changed) break;
  }
  std::vector<TablePlacement> placement;
  for (const TableDecision& d : plan.tables) placement.push_back(d.placement);
  plan.estimate = est.Evaluate(placement);
  return plan;
}

}  // namespace tessera::planner
