// The profile's rate lookups (profile.h): row rates, GEMM shapes, collectives and tier points,
// interpolated between the measured points.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "planner/profile.h"

namespace tessera::planner {

namespace {

// Piecewise-linear interpolation of y(x) over sorted points, clamped at the ends.
template <typename P, typename X, typename Y>
double Interp(const std::vector<P>& pts, double x, X xf, Y yf) {
  if (pts.empty()) return 0;
  if (x <= xf(pts.front())) return yf(pts.front());
  if (x >= xf(pts.back())) return yf(pts.back());
  for (size_t i = 1; i < pts.size(); ++i) {
    double x1 = xf(pts[i]);
    if (x <= x1) {
      double x0 = xf(pts[i - 1]);
      double w = (x - x0) / (x1 - x0);
      return yf(pts[i - 1]) * (1 - w) + yf(pts[i]) * w;
    }
  }
  return yf(pts.back());
}

// A point's compute slowdowns: 1 where not measured; the GEMMs' is the rows' where absent (a
// profile from before the two were told apart).
double RowSlowdown(const CollectivePoint* p) {
  return p->compute_slowdown > 0 ? p->compute_slowdown : 1.0;
}
double GemmSlowdown(const CollectivePoint* p) {
  return p->gemm_slowdown > 0 ? p->gemm_slowdown : RowSlowdown(p);
}

// Blends hot and cold rates by time per row.
double BlendRate(const std::vector<RowRatePoint>& pts, int64_t row_bytes, double hot) {
  hot = std::clamp(hot, 0.0, 1.0);
  auto x = [](const RowRatePoint& p) { return static_cast<double>(p.row_bytes); };
  double h = Interp(pts, row_bytes, x, [](const RowRatePoint& p) { return p.hot_rows_per_s; });
  double c = Interp(pts, row_bytes, x, [](const RowRatePoint& p) { return p.cold_rows_per_s; });
  if (h <= 0 || c <= 0) return 0;
  return 1.0 / (hot / h + (1 - hot) / c);
}

absl::StatusOr<CollectiveCost> CollectiveFrom(const std::vector<const CollectivePoint*>& pts,
                                              int world_size) {
  CollectiveCost out;
  if (world_size <= 1) return out;  // no peers: free
  // Points of one size and both scopes: keep the cross-node one (the slower) per size.
  std::vector<const CollectivePoint*> by_size;
  for (const CollectivePoint* p : pts) {
    if (!by_size.empty() && by_size.back()->world_size == p->world_size) {
      if (!p->same_node) by_size.back() = p;
      continue;
    }
    by_size.push_back(p);
  }
  auto lx = [](const CollectivePoint* p) { return std::log2(static_cast<double>(p->world_size)); };
  double x = std::log2(static_cast<double>(world_size));
  const CollectivePoint* last = by_size.back();
  if (world_size > last->world_size && by_size.size() >= 2) {
    // Latency extrapolated linearly in log2(size) from the last two points; bandwidth held.
    const CollectivePoint* prev = by_size[by_size.size() - 2];
    double slope = (last->latency_s - prev->latency_s) / (lx(last) - lx(prev));
    out.latency_s = last->latency_s + std::max(0.0, slope) * (x - lx(last));
    out.bytes_per_s = last->bytes_per_s;
    out.wait_per_compute = last->wait_per_compute;
    out.wait_cap_s = last->wait_cap_s;
    out.beyond_llc_bytes_per_s = last->beyond_llc_bytes_per_s;
    out.compute_slowdown = RowSlowdown(last);
    out.gemm_slowdown = GemmSlowdown(last);
    out.groups = last->groups;
    out.node_cores = last->node_cores;
    return out;
  }
  // The groups of the points read: the one at world_size, or the lesser of the two around it
  // (the ends held, as Interp holds them).
  {
    auto hi = std::find_if(by_size.begin(), by_size.end(),
                           [&](const CollectivePoint* p) { return p->world_size >= world_size; });
    if (hi == by_size.end()) --hi;
    out.groups = (*hi)->groups;
    out.node_cores = (*hi)->node_cores;
    if (hi != by_size.begin() && (*hi)->world_size > world_size) {
      out.groups = std::min(out.groups, (*(hi - 1))->groups);
      out.node_cores = std::min(out.node_cores, (*(hi - 1))->node_cores);
    }
  }
  out.compute_slowdown = Interp(by_size, x, lx, RowSlowdown);
  out.gemm_slowdown = Interp(by_size, x, lx, GemmSlowdown);
  out.latency_s = Interp(by_size, x, lx, [](const CollectivePoint* p) { return p->latency_s; });
  out.wait_per_compute =
      Interp(by_size, x, lx, [](const CollectivePoint* p) { return p->wait_per_compute; });
  // A bound where every size has one (a 0 anywhere: none).
  bool capped = true;
  for (const CollectivePoint* p : by_size) capped = capped && p->wait_cap_s > 0;
  if (capped) {
    out.wait_cap_s =
        Interp(by_size, x, lx, [](const CollectivePoint* p) { return p->wait_cap_s; });
  }
  // Given at every size or at none (a 0 anywhere: bytes_per_s throughout).
  bool beyond = true;
  for (const CollectivePoint* p : by_size) beyond = beyond && p->beyond_llc_bytes_per_s > 0;
  if (beyond) {
    out.beyond_llc_bytes_per_s = 1.0 / Interp(by_size, x, lx, [](const CollectivePoint* p) {
                                   return 1.0 / p->beyond_llc_bytes_per_s;
                                 });
  }
  // Interpolate time per byte, not bytes per second.
  out.bytes_per_s =
      1.0 / Interp(by_size, x, lx, [](const CollectivePoint* p) { return 1.0 / p->bytes_per_s; });
  return out;
}

}  // namespace

double GatherRowsPerSec(const DeviceProfile& d, int64_t row_bytes, double hot_fraction) {
  return BlendRate(d.gather, row_bytes, hot_fraction);
}

double ScatterUpdateRowsPerSec(const DeviceProfile& d, int64_t row_bytes, double hot_fraction) {
  return BlendRate(d.scatter_update, row_bytes, hot_fraction);
}

double GatherBagSeconds(const DeviceProfile& d, int64_t row_bytes) {
  return Interp(
      d.gather, static_cast<double>(row_bytes),
      [](const RowRatePoint& p) { return static_cast<double>(p.row_bytes); },
      [](const RowRatePoint& p) { return p.bag_s; });
}

double ScatterIdSeconds(const DeviceProfile& d, int64_t row_bytes) {
  return Interp(
      d.scatter_update, static_cast<double>(row_bytes),
      [](const RowRatePoint& p) { return static_cast<double>(p.row_bytes); },
      [](const RowRatePoint& p) { return p.id_s; });
}

double PackIdSeconds(const DeviceProfile& d, double distinct, int64_t row_bytes) {
  if (d.pack_id_s <= 0) return ScatterIdSeconds(d, row_bytes);
  if (d.pack_hot_id_s <= 0 || distinct <= d.pack_distinct) return d.pack_id_s;
  if (distinct >= d.pack_hot_distinct) return d.pack_hot_id_s;
  const double x = std::log(distinct / d.pack_distinct) /
                   std::log(d.pack_hot_distinct / d.pack_distinct);
  return d.pack_id_s + x * (d.pack_hot_id_s - d.pack_id_s);
}

double GatherCachedSeconds(const DeviceProfile& d, int64_t row_bytes, double bags, double ids) {
  if (d.gather.empty()) return -1;
  for (const RowRatePoint& p : d.gather) {
    if (p.cached_rows_per_s <= 0) return -1;
  }
  auto x = [](const RowRatePoint& p) { return static_cast<double>(p.row_bytes); };
  const double bag = Interp(d.gather, static_cast<double>(row_bytes), x,
                            [](const RowRatePoint& p) { return p.cached_bag_s; });
  const double per_id = Interp(d.gather, static_cast<double>(row_bytes), x,
                               [](const RowRatePoint& p) { return 1.0 / p.cached_rows_per_s; });
  return bags * bag + ids * per_id;
}

double ScatterUpdateWarmRowsPerSec(const DeviceProfile& d, int64_t row_bytes) {
  if (d.scatter_update.empty()) return 0;
  for (const RowRatePoint& p : d.scatter_update) {
    if (p.warm_rows_per_s <= 0) return 0;
  }
  return 1.0 / Interp(
                   d.scatter_update, static_cast<double>(row_bytes),
                   [](const RowRatePoint& p) { return static_cast<double>(p.row_bytes); },
                   [](const RowRatePoint& p) { return 1.0 / p.warm_rows_per_s; });
}

double GemmFlopsPerSec(const DeviceProfile& d, int64_t m, int64_t n, int64_t k) {
  if (d.gemm.empty()) return d.gemm_peak_flops_per_s;
  auto ln = [](int64_t x) { return std::log(static_cast<double>(std::max<int64_t>(1, x))); };
  const double lm = ln(m), lnn = ln(n), lk = ln(k);
  const GemmPoint* best = &d.gemm.front();
  double best_dist = 1e300;
  for (const GemmPoint& g : d.gemm) {
    const double a = ln(g.m) - lm, b = ln(g.n) - lnn, c = ln(g.k) - lk;
    const double dist = a * a + b * b + c * c;
    if (dist < best_dist) {
      best_dist = dist;
      best = &g;
    }
  }
  return best->flops_per_s;
}

const CrossPoint* NearestCrossPoint(const DeviceProfile& d, int64_t batch, int64_t dim,
                                    int64_t rank) {
  auto ln = [](int64_t x) { return std::log(static_cast<double>(std::max<int64_t>(1, x))); };
  bool same_kind = false;
  for (const CrossPoint& c : d.cross) same_kind |= (c.rank > 0) == (rank > 0);
  const CrossPoint* best = nullptr;
  double best_dist = 1e300;
  for (const CrossPoint& c : d.cross) {
    if (same_kind && (c.rank > 0) != (rank > 0)) continue;
    const double a = ln(c.batch) - ln(batch), b = ln(c.dim) - ln(dim);
    const double r = ln(c.rank > 0 ? c.rank : c.dim) - ln(rank > 0 ? rank : dim);
    const double dist = a * a + b * b + r * r;
    if (dist < best_dist) {
      best_dist = dist;
      best = &c;
    }
  }
  return best;
}

absl::StatusOr<CollectiveCost> CollectiveAt(const MachineProfile& p, CollectiveOp op,
                                            const std::string& transport, int world_size) {
  // The points measured alone (groups 1) when there are any.
  std::vector<const CollectivePoint*> pts, alone;
  for (const CollectivePoint& c : p.collectives) {
    if (c.op != op || c.transport != transport) continue;
    pts.push_back(&c);
    if (c.groups <= 1) alone.push_back(&c);
  }
  if (!alone.empty()) pts = std::move(alone);
  if (pts.empty()) {
    return absl::NotFoundError(absl::StrCat("the profile has no ", CollectiveOpName(op),
                                            " point for transport '", transport, "'"));
  }
  return CollectiveFrom(pts, world_size);
}

absl::StatusOr<CollectiveCost> CollectiveAtScope(const MachineProfile& p, CollectiveOp op,
                                                 const std::string& transport, int world_size,
                                                 bool same_node, int groups) {
  // Per world size (the points come sorted by it, then by groups), the point with the most
  // groups up to `groups`, else the first (the fewest).
  std::vector<const CollectivePoint*> pts;
  for (const CollectivePoint& c : p.collectives) {
    if (c.op != op || c.transport != transport || c.same_node != same_node) continue;
    if (!pts.empty() && pts.back()->world_size == c.world_size) {
      if (c.groups <= groups) pts.back() = &c;
      continue;
    }
    pts.push_back(&c);
  }
  if (pts.empty()) return CollectiveAt(p, op, transport, world_size);
  return CollectiveFrom(pts, world_size);
}

TierPoint TierAt(const MachineProfile& p, int64_t value_bytes) {
  TierPoint out;
  out.value_bytes = value_bytes;
  if (p.tier.empty()) return out;
  auto x = [](const TierPoint& t) { return static_cast<double>(t.value_bytes); };
  out.read_cached_s =
      Interp(p.tier, value_bytes, x, [](const TierPoint& t) { return t.read_cached_s; });
  out.read_disk_s =
      Interp(p.tier, value_bytes, x, [](const TierPoint& t) { return t.read_disk_s; });
  out.write_s = Interp(p.tier, value_bytes, x, [](const TierPoint& t) { return t.write_s; });
  out.hit_s = Interp(p.tier, value_bytes, x, [](const TierPoint& t) { return t.hit_s; });
  bool memtable = true;
  for (const TierPoint& t : p.tier) memtable = memtable && t.read_memtable_s > 0;
  if (memtable) {
    out.read_memtable_s =
        Interp(p.tier, value_bytes, x, [](const TierPoint& t) { return t.read_memtable_s; });
  }
  return out;
}

}  // namespace tessera::planner
