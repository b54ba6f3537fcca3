// PlanInputs validation and the id-statistics formulas.
#include "planner/inputs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::planner {

namespace {

constexpr int64_t kExactRanks = 4096;
constexpr double kGroupRatio = 1.005;

// Ranks [lo, hi) of a table of `rows` rows, grouped: one group per rank up to kExactRanks, then
// geometric groups; `fn(lo, hi)` per group in ascending order.
template <typename Fn>
void ForEachGroup(int64_t rows, Fn fn) {
  const int64_t exact = std::min(rows, kExactRanks);
  for (int64_t r = 1; r <= exact; ++r) fn(r, r + 1);
  int64_t lo = exact + 1;
  while (lo <= rows) {
    int64_t hi = std::min(rows + 1, std::max(lo + 1, static_cast<int64_t>(lo * kGroupRatio)));
    fn(lo, hi);
    lo = hi;
  }
}

// p(rank) ~ rank^-s evaluated at the group's geometric mid.
inline double GroupWeight(int64_t lo, int64_t hi, double s) {
  return std::pow(std::sqrt(static_cast<double>(lo) * static_cast<double>(hi - 1)), -s);
}

double Norm(int64_t rows, double s) {
  static std::mutex mu;
  static std::map<std::pair<int64_t, double>, double>* cache =
      new std::map<std::pair<int64_t, double>, double>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find({rows, s});
    if (it != cache->end()) return it->second;
  }
  double total = 0;
  ForEachGroup(rows, [&](int64_t lo, int64_t hi) { total += (hi - lo) * GroupWeight(lo, hi, s); });
  std::lock_guard<std::mutex> lock(mu);
  (*cache)[{rows, s}] = total;
  return total;
}

// The Zipf exponent whose expected distinct rows among n draws over `rows` rows is `distinct`
// (bisection; monotone: a larger exponent concentrates the draws on fewer rows).
double FitExponent(double n, int64_t rows, double distinct) {
  double lo = 0.0, hi = 4.0;
  for (int i = 0; i < 40; ++i) {
    double mid = 0.5 * (lo + hi);
    if (ExpectedDistinct(n, rows, mid) > distinct) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

double Exponent(const PlanTable& t) {
  if (t.measured.empty()) return t.zipf_exponent;
  const MeasuredIdStats& m = t.measured.front();
  return FitExponent(m.ids_per_sample * m.sample_batch, t.config.num_rows, m.distinct_per_batch);
}

}  // namespace

absl::Status ValidatePlanInputs(const PlanInputs& in) {
  auto bad = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(in.source, ": ", msg));
  };
  const Topology& topo = in.topology;
  if (topo.world_size < 1)
    return bad(absl::StrCat("world size ", topo.world_size, " must be >= 1"));
  if (topo.ranks_per_node < 1) {
    return bad(absl::StrCat("ranks per node ", topo.ranks_per_node, " must be >= 1"));
  }
  if (in.group_size < 0 || (in.group_size > 0 && topo.world_size % in.group_size != 0)) {
    return bad(absl::StrCat("sharding.group_size: ", in.group_size,
                            " does not divide the world size ", topo.world_size));
  }
  if (in.tables.empty()) return bad("model.tables: the model has no tables");
  for (const PlanTable& t : in.tables) {
    const TableConfig& c = t.config;
    if (c.num_rows <= 0) {
      return bad(absl::StrCat("model.tables: table '", c.name, "' has ", c.num_rows,
                              " rows (must be > 0)"));
    }
    if (c.dim <= 0) {
      return bad(
          absl::StrCat("model.tables: table '", c.name, "' has dim ", c.dim, " (must be > 0)"));
    }
    if (!(t.ids_per_bag > 0) || t.num_features < 1) {
      return bad(absl::StrCat("table '", c.name, "': pooling ", t.ids_per_bag, " and features ",
                              t.num_features, " must be positive"));
    }
    if (t.measured.empty() && !(t.zipf_exponent > 0)) {
      return bad(absl::StrCat("table '", c.name, "': zipf exponent must be > 0"));
    }
  }
  if (in.step.batch_per_rank < 1) {
    return bad(absl::StrCat("data.batch_size: ", in.step.batch_per_rank, " must be >= 1"));
  }
  if (in.step.payload_bytes != 2 && in.step.payload_bytes != 4) {
    return bad(absl::StrCat("sharding.comm_dtype: payload of ", in.step.payload_bytes,
                            " bytes (expected 2 or 4)"));
  }
  if (in.step.sync_every < 1) return bad("sharding.sync_every must be >= 1");
  if (topo.memory.host <= 0 && topo.memory.device <= 0) {
    return bad("topology: no memory given (host or device must be > 0)");
  }
  return absl::OkStatus();
}

double ExpectedDistinct(double n, int64_t rows, double s, int64_t from_rank) {
  if (n <= 0 || rows <= 0) return 0;
  // Memoised: the search asks the same few questions many times (every group size, every shard
  // of one shape).
  using Key = std::tuple<double, int64_t, double, int64_t>;
  static std::mutex mu;
  static std::map<Key, double>* memo = new std::map<Key, double>();
  const Key key{n, rows, s, from_rank};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memo->find(key);
    if (it != memo->end()) return it->second;
  }
  const double norm = Norm(rows, s);
  double total = 0;
  ForEachGroup(rows, [&](int64_t lo, int64_t hi) {
    if (hi - 1 < from_rank) return;
    int64_t l = std::max(lo, from_rank);
    double p = GroupWeight(lo, hi, s) / norm;
    total += (hi - l) * -std::expm1(n * std::log1p(-std::min(p, 1.0 - 1e-16)));
  });
  std::lock_guard<std::mutex> lock(mu);
  if (memo->size() > (1 << 20)) memo->clear();
  (*memo)[key] = total;
  return total;
}

double ZipfCoverage(int64_t hot, int64_t rows, double s) {
  if (hot <= 0) return 0;
  if (hot >= rows) return 1;
  const double norm = Norm(rows, s);
  double total = 0;
  ForEachGroup(rows, [&](int64_t lo, int64_t hi) {
    if (lo > hot) return;
    int64_t h = std::min(hi, hot + 1);
    total += (h - lo) * GroupWeight(lo, hi, s);
  });
  return std::min(1.0, total / norm);
}

double IdModel::Distinct(const PlanTable& t, double samples, int64_t shard_rows) const {
  const double frac = static_cast<double>(shard_rows) / static_cast<double>(t.config.num_rows);
  return frac * ExpectedDistinct(samples * IdsPerSample(t), t.config.num_rows, Exponent(t));
}

double IdModel::Coverage(const PlanTable& t, int64_t cached, int64_t shard_rows) const {
  // A shard of a scrambled table holds a uniform share of every rank: its k hottest rows are the
  // table's k x rows / shard_rows hottest, thinned.
  const double scale = static_cast<double>(t.config.num_rows) / static_cast<double>(shard_rows);
  const int64_t table_hot = static_cast<int64_t>(std::min<double>(
      static_cast<double>(t.config.num_rows), static_cast<double>(cached) * scale));
  if (!t.measured.empty() && !t.measured.front().hot_rows.empty()) {
    // Interpolate the measured coverage curve (fraction of rows -> fraction of accesses).
    const MeasuredIdStats& m = t.measured.front();
    double x = static_cast<double>(table_hot);
    double prev_x = 0, prev_y = 0;
    for (size_t i = 0; i < m.hot_rows.size(); ++i) {
      double xi = static_cast<double>(m.hot_rows[i]), yi = m.hot_coverage[i];
      if (x <= xi) return prev_y + (yi - prev_y) * (x - prev_x) / std::max(1.0, xi - prev_x);
      prev_x = xi;
      prev_y = yi;
    }
    double rows = static_cast<double>(t.config.num_rows);
    return prev_y + (1 - prev_y) * (x - prev_x) / std::max(1.0, rows - prev_x);
  }
  return ZipfCoverage(table_hot, t.config.num_rows, Exponent(t));
}

}  // namespace tessera::planner
