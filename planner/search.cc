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

// Weight of the mean-load step in the greedy's criterion (4: measured on the planning table's
// sets, docs/PLANNER.md; 1 and 16 give plans within 2% of it).
constexpr double kMeanWeight = 4;
// Tables below this share of a rank's fair share of the embedding work are not cut.
constexpr double kSmallTableShare = 0.125;
// Weight of the root-mean-square step in the local search's tie-break.
constexpr double kRmsWeight = 1e-3;
// Up to this group size a one-shard option is tried on every rank.
constexpr int kTryEveryRank = 16;

// `sync_s_per_byte`: Estimator::sync_seconds_per_byte (the replica all-reduce's buffer).
double Score(const MetricVec& d, double sync_s_per_byte) {
  return d[kLookupS] + d[kUpdateS] + d[kTierS] + d[kTierWriteS] + d[kTierProbeS] + d[kSyncS] +
         d[kSyncBytes] * sync_s_per_byte + std::max(d[kInSend], d[kInRecv]) +
         2 * std::max(d[kOutSend], d[kOutRecv]);
}

class SearchState {
 public:
  explicit SearchState(const Estimator& est)
      : est_(est), n_(est.group_size()), d_(n_, MetricVec{}), score_(n_, 0) {
    u_ = est.FixedPerRank();
    for (int k = 0; k < kNumMetrics; ++k) trees_.emplace_back(n_);
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
      for (int k = 0; k < kNumMetrics; ++k) {
        if (d[k] == 0) continue;
        const double old = d_[r][k];
        d_[r][k] += sign * d[k];
        sum_[k] += d_[r][k] - old;
        sumsq_[k] += d_[r][k] * d_[r][k] - old * old;
        trees_[k].Set(r, d_[r][k]);
      }
      score_[r] = Score(d_[r], est_.sync_seconds_per_byte());
    }
  }

  MetricVec Maxima() const {
    MetricVec mx;
    for (int k = 0; k < kNumMetrics; ++k) mx[k] = u_[k] + trees_[k].Max();
    return mx;
  }
  // The predicted step: every phase at its slowest rank.
  double Objective() const { return est_.StepFromMaxima(Maxima(), world_bytes_).total(); }
  // What the greedy decides by: the step at the slowest ranks plus the step at the mean load.
  // The max alone is blind to what an option costs the other ranks (a table cut over every rank
  // raises the maximum no more than one on a single rank, yet takes N times the transfer), so a
  // myopic choice by it fills every rank early; the mean term charges that.
  double Guide() const {
    MetricVec mean;
    for (int k = 0; k < kNumMetrics; ++k) mean[k] = u_[k] + sum_[k] / n_;
    return Objective() + kMeanWeight * est_.StepFromMaxima(mean, world_bytes_).total();
  }
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

  // The local search's criterion: the step time, ties broken by the step at the root-mean-square
  // load (lower spread opens moves that lower a maximum several ranks share).
  double Balanced() const {
    MetricVec rms;
    for (int k = 0; k < kNumMetrics; ++k) {
      const double mean_d = sum_[k] / n_, mean_sq = std::max(0.0, sumsq_[k] / n_);
      rms[k] = std::sqrt(std::max(0.0, u_[k] * u_[k] + 2 * u_[k] * mean_d + mean_sq));
    }
    return Objective() + kRmsWeight * est_.StepFromMaxima(rms, world_bytes_).total();
  }

  // The ranks by (score, rank) or by (memory, rank), ascending. Computed once per table
  // decision (Choose), not kept sorted under every Apply: the candidates of one decision are
  // applied and taken back, so the order they see is the one before the table.
  std::vector<int> RanksByLoad(bool by_memory) const {
    std::vector<std::pair<double, int>> keyed(n_);
    for (int r = 0; r < n_; ++r) keyed[r] = {by_memory ? d_[r][mem_metric_] : score_[r], r};
    std::sort(keyed.begin(), keyed.end());
    std::vector<int> out(n_);
    for (int r = 0; r < n_; ++r) out[r] = keyed[r].second;
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
  MetricVec sum_{};    // sum of d_ over the ranks
  MetricVec sumsq_{};  // sum of d_^2 over the ranks
  std::vector<MaxTree> trees_;
  std::vector<double> score_;
  double world_bytes_ = 0;
  double limit_[kNumMemKinds] = {};
  int mem_metric_ = kMemHost;
};

struct Choice {
  bool feasible = false;
  double objective = 1e300;
  double guide = 1e300;
  double shortfall = 1e300;
  std::string shortfall_text;
  TablePlacement placement;
  Contribution contribution;
};

// Best placement of table t given the state (the table not applied).
// `by_guide`: decide by SearchState::Guide (the greedy), else by the step time itself.
TableDecision Choose(const Estimator& est, SearchState& state, int t,
                     const std::vector<TableOption>& options, bool by_guide, Contribution* chosen,
                     bool* feasible) {
  const int n = est.group_size();
  Choice best, second, least_short;
  std::vector<int> by_score, by_mem;  // the least-loaded ranks, computed when first needed
  auto least = [&](int count, bool by_memory) {
    std::vector<int>& order = by_memory ? by_mem : by_score;
    if (order.empty()) order = state.RanksByLoad(by_memory);
    return std::vector<int>(order.begin(), order.begin() + std::min(count, n));
  };
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
    } else if (s == 1 && n <= kTryEveryRank) {
      for (int r = 0; r < n; ++r) rank_sets.push_back({r});
    } else {
      rank_sets.push_back(least(s, false));
      std::vector<int> mem_first = least(s, true);
      if (mem_first != rank_sets.front()) rank_sets.push_back(mem_first);
    }
    for (const std::vector<int>& ranks : rank_sets) {
      Choice c;
      c.placement = MakePlacement(o, ranks, est.inputs().tables[t].config);
      c.contribution = est.Contribute(t, c.placement);
      state.Apply(c.contribution, +1);
      c.shortfall = state.Shortfall(&c.shortfall_text);
      c.feasible = c.shortfall == 0;
      c.objective = state.Objective();
      c.guide = by_guide ? state.Guide() : state.Balanced();
      state.Apply(c.contribution, -1);
      if (!c.feasible) {
        if (c.shortfall < least_short.shortfall) least_short = std::move(c);
        continue;
      }
      if (c.guide < best.guide) {
        if (best.feasible && OptionName(best.placement.option) != OptionName(o)) {
          second = std::move(best);
        }
        best = std::move(c);
      } else if (c.guide < second.guide && OptionName(best.placement.option) != OptionName(o)) {
        second = std::move(c);
      }
    }
  }
  TableDecision dec;
  if (!best.feasible) {
    *feasible = false;
    dec.placement = least_short.placement;
    dec.first_shortfall = least_short.shortfall_text;
    return dec;
  }
  *feasible = true;
  dec.placement = best.placement;
  dec.step_s = best.objective;
  dec.guide = best.guide;
  dec.by_balance = !by_guide;
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
    case kDevice:
      return static_cast<double>(in.topology.memory.device);
    case kHost:
      return static_cast<double>(in.topology.memory.host);
    case kDisk:
      return static_cast<double>(in.topology.memory.disk);
    default:
      return 0;
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

absl::StatusOr<GroupPlan> SearchGroup(const Estimator& est, const SearchOptions& options,
                                      const std::vector<SearchSeed>& seeds) {
  const PlanInputs& in = est.inputs();
  const int num_tables = static_cast<int>(in.tables.size());
  EnumerateContext ctx;
  ctx.group_size = est.group_size();
  ctx.world_size = in.topology.world_size;
  ctx.node_ranks = est.node_ranks();
  ctx.disk_available = in.topology.memory.disk > 0;
  // No tier points (calibrated without the tier): no table goes there (a fixed one is refused
  // by Estimator::Create).
  ctx.tier_allowed = est.table_kind() == kHost && !est.profile().tier.empty();
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
    cost[t] = c.per_rank.empty() ? 0 : Score(c.per_rank.front().second, est.sync_seconds_per_byte());
  }
  std::vector<int> order(num_tables);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  // A table whose one-rank cost is below kSmallTableShare of a rank's fair share is not cut
  // (cutting it cannot lower the slowest rank by more than its own small cost): its options
  // are the uncut ones (data_parallel, table_wise, tiered table_wise) and table_row_wise (cut
  // over one node, whose links are much faster). Bounds the work at 1,000 tables; small groups
  // (N <= kTryEveryRank) try everything.
  double total = 0;
  for (double c : cost) total += c;
  const double fair = total / est.group_size();
  for (int t = 0; t < num_tables; ++t) {
    if (est.group_size() <= kTryEveryRank || cost[t] >= kSmallTableShare * fair ||
        !in.tables[t].fixed_type.empty()) {
      continue;
    }
    std::vector<TableOption> uncut;
    for (const TableOption& o : opts[t]) {
      if (o.shards() == 1 || o.type == ShardingType::kTableRowWise) uncut.push_back(o);
    }
    if (!uncut.empty()) opts[t] = std::move(uncut);
  }

  // Re-insertion rounds: every table taken out and placed again, kept when `better`.
  auto improve = [&](SearchState& state, std::vector<Contribution>& applied,
                     std::vector<TableDecision>& decisions, bool by_guide, int passes) {
    for (int pass = 0; pass < passes; ++pass) {
      bool changed = false;
      for (int t : order) {
        const double before = by_guide ? state.Guide() : state.Balanced();
        const double before_step = state.Objective();
        state.Apply(applied[t], -1);
        bool ok = false;
        Contribution c;
        TableDecision dec = Choose(est, state, t, opts[t], by_guide, &c, &ok);
        if (ok && dec.guide < before - 1e-12 * std::max(1.0, before) &&
            (by_guide || dec.step_s <= before_step)) {
          state.Apply(c, +1);
          applied[t] = std::move(c);
          decisions[t] = std::move(dec);
          changed = true;
        } else {
          state.Apply(applied[t], +1);
          if (ok && decisions[t].runner_up.empty()) {
            decisions[t].runner_up = OptionName(dec.placement.option);
            decisions[t].runner_up_step_s = dec.step_s;
            decisions[t].by_balance = !by_guide;
            // Both priced in the same state (this table re-placed among all the others).
            decisions[t].step_s = before_step;
          }
        }
      }
      if (!changed) break;
    }
  };

  // 1. Greedy by the guide, re-inserted by it, then by the step time itself.
  SearchState state(est);
  std::vector<TableDecision> decisions(num_tables);
  std::vector<Contribution> applied(num_tables);
  for (int t : order) {
    bool ok = false;
    TableDecision dec = Choose(est, state, t, opts[t], /*by_guide=*/true, &applied[t], &ok);
    if (!ok) {
      return absl::ResourceExhaustedError(absl::StrCat(
          in.source, ": table '", in.tables[t].config.name, "' (", in.tables[t].config.num_rows,
          " rows x ", in.tables[t].config.dim, ") does not fit on ", in.topology.world_size,
          " ranks in groups of ", est.group_size(), ": best option ",
          OptionName(dec.placement.option), ": ", dec.first_shortfall));
    }
    state.Apply(applied[t], +1);
    decisions[t] = std::move(dec);
  }
  improve(state, applied, decisions, /*by_guide=*/true, options.passes);
  improve(state, applied, decisions, /*by_guide=*/false, options.passes);
  double best = state.Objective();

  // 1b. The same greedy over the uncut options only (largest first onto the least loaded
  // rank, as LPT scheduling), then improved with every option: a start the first greedy's
  // early cuts can miss (single-table moves cannot undo two tables cut across the same ranks).
  {
    std::vector<std::vector<TableOption>> uncut(num_tables);
    bool all = true;
    for (int t = 0; t < num_tables; ++t) {
      for (const TableOption& o : opts[t]) {
        if (o.shards() == 1) uncut[t].push_back(o);
      }
      all &= !uncut[t].empty();
    }
    SearchState s2(est);
    std::vector<TableDecision> d2(num_tables);
    std::vector<Contribution> a2(num_tables);
    bool ok = all;
    for (int t : order) {
      if (!ok) break;
      d2[t] = Choose(est, s2, t, uncut[t], /*by_guide=*/true, &a2[t], &ok);
      if (ok) s2.Apply(a2[t], +1);
    }
    if (ok) {
      improve(s2, a2, d2, /*by_guide=*/false, options.passes);
      if (s2.Objective() < best - 1e-12 * std::max(1.0, best)) {
        best = s2.Objective();
        decisions = std::move(d2);
      }
    }
  }

  // 2. Each seed that fits, improved by the step time; the best start wins.
  for (const SearchSeed& seed : seeds) {
    if (static_cast<int>(seed.placement.size()) != num_tables) continue;
    SearchState s2(est);
    std::vector<Contribution> a2(num_tables);
    std::vector<TableDecision> d2(num_tables);
    for (int t = 0; t < num_tables; ++t) {
      a2[t] = est.Contribute(t, seed.placement[t]);
      s2.Apply(a2[t], +1);
      d2[t].placement = seed.placement[t];
      d2[t].started_from = seed.name;
    }
    if (s2.Shortfall(nullptr) > 0) continue;
    improve(s2, a2, d2, /*by_guide=*/false, 1);
    const double got = s2.Objective();
    if (got < best - 1e-12 * std::max(1.0, best)) {
      best = got;
      decisions = std::move(d2);
    }
  }
  GroupPlan plan;
  plan.group_size = est.group_size();
  std::vector<TablePlacement> placement;
  for (TableDecision& d : decisions) {
    placement.push_back(d.placement);
    if (d.step_s == 0) d.step_s = best;
  }
  plan.tables = std::move(decisions);
  plan.estimate = est.Evaluate(placement);
  return plan;
}

}  // namespace tessera::planner
