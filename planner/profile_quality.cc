// Measured keys by name, the median of calibrate's runs, plausibility (profile_quality.h).
#include "planner/profile_quality.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::planner {

std::string CollectiveKeyPrefix(const CollectivePoint& c) {
  return absl::StrCat("collectives.", CollectiveOpName(c.op), ".", c.transport, ".", c.world_size,
                      c.same_node ? "" : ".cross_node",
                      c.groups > 1 ? absl::StrCat(".groups", c.groups) : "", ".");
}

std::vector<MeasuredKey> MeasuredKeys(MachineProfile* p) {
  std::vector<MeasuredKey> k;
  using C = MeasuredKey::Combine;
  auto add = [&](std::string name, double* v, const std::string& part, double floor = 0,
                 C combine = C::kMedian) {
    k.push_back({std::move(name), v, floor, part, combine});
  };
  for (DeviceProfile& d : p->devices) {
    const std::string part = "device." + d.kind, pre = d.kind + ".";
    add(pre + "copy_bytes_per_s", &d.copy_bytes_per_s, part);
    add(pre + "pack_bytes_per_s", &d.pack_bytes_per_s, part);
    add(pre + "search_step_s", &d.search_step_s, part);
    add(pre + "pack_id_s", &d.pack_id_s, part);
    add(pre + "pack_hot_id_s", &d.pack_hot_id_s, part);
    for (RowRatePoint& r : d.gather) {
      const std::string g = absl::StrCat(pre, "gather[", r.row_bytes, "].");
      add(g + "hot_rows_per_s", &r.hot_rows_per_s, part);
      add(g + "cold_rows_per_s", &r.cold_rows_per_s, part);
      // The per-bag / per-id splits are differences of two runs: a floor of 10 ns keeps a split
      // near 0 from reading as wide.
      add(g + "bag_s", &r.bag_s, part, 1e-8);
      if (r.cached_rows_per_s > 0) {
        add(g + "cached_bag_s", &r.cached_bag_s, part, 1e-8);
        add(g + "cached_rows_per_s", &r.cached_rows_per_s, part);
      }
    }
    for (RowRatePoint& r : d.scatter_update) {
      const std::string g = absl::StrCat(pre, "scatter_update[", r.row_bytes, "].");
      add(g + "hot_rows_per_s", &r.hot_rows_per_s, part);
      add(g + "cold_rows_per_s", &r.cold_rows_per_s, part);
      add(g + "id_s", &r.id_s, part, 1e-8);
      add(g + "warm_rows_per_s", &r.warm_rows_per_s, part);
    }
    for (GemmPoint& g : d.gemm) {
      add(absl::StrCat(pre, "gemm[", g.m, "x", g.n, "x", g.k, "].flops_per_s"), &g.flops_per_s,
          part);
    }
    for (CrossPoint& c : d.cross) {
      const std::string g = absl::StrCat(pre, "cross[", c.batch, "x", c.dim, "r", c.rank, "].");
      add(g + "forward_flops_per_s", &c.forward_flops_per_s, part);
      add(g + "backward_flops_per_s", &c.backward_flops_per_s, part);
    }
    for (DenseArchPoint& a : d.dense_arch) {
      const std::string g = absl::StrCat(pre, "dense_arch[", a.shape, " b", a.batch, "].");
      add(g + "forward_scale", &a.forward_scale, part);
      add(g + "backward_scale", &a.backward_scale, part);
      if (a.forward_s > 0) add(g + "forward_s", &a.forward_s, part);
      if (a.backward_s > 0) add(g + "backward_s", &a.backward_s, part);
    }
    add(pre + "gemm_peak_flops_per_s", &d.gemm_peak_flops_per_s, part);
    add(pre + "launch_overhead_s", &d.launch_overhead_s, part, 1e-6);
  }
  for (CollectivePoint& c : p->collectives) {
    const std::string part = absl::StrCat("collectives.", c.world_size);
    const std::string pre = CollectiveKeyPrefix(c);
    // Latencies of a few microseconds: a floor of 2 us.
    add(pre + "latency_s", &c.latency_s, part, 2e-6, C::kLowest);
    add(pre + "bytes_per_s", &c.bytes_per_s, part, 0, C::kHighest);
    // A quiet machine's wait is ~0.01 of compute: differences below 0.02 do not matter.
    add(pre + "wait_per_compute", &c.wait_per_compute, part, 0.02);
    add(pre + "wait_cap_s", &c.wait_cap_s, part, 1e-4);
    add(pre + "beyond_llc_bytes_per_s", &c.beyond_llc_bytes_per_s, part, 0, C::kHighest);
    add(pre + "compute_slowdown", &c.compute_slowdown, part);
    add(pre + "gemm_slowdown", &c.gemm_slowdown, part);
  }
  for (TierPoint& t : p->tier) {
    const std::string pre = absl::StrCat("tier[", t.value_bytes, "].");
    add(pre + "read_cached_s", &t.read_cached_s, "tier");
    add(pre + "read_disk_s", &t.read_disk_s, "tier");
    add(pre + "write_s", &t.write_s, "tier");
    add(pre + "hit_s", &t.hit_s, "tier", 1e-8);
    add(pre + "read_memtable_s", &t.read_memtable_s, "tier");
  }
  return k;
}

absl::StatusOr<MachineProfile> MedianOfRuns(const std::vector<MachineProfile>& runs,
                                            double max_spread, std::vector<KeyQuality>* qualities) {
  if (runs.empty()) return absl::InvalidArgumentError("MedianOfRuns: no runs");
  MachineProfile out = runs.front();
  std::vector<MeasuredKey> keys = MeasuredKeys(&out);
  std::vector<std::vector<double>> values(keys.size());
  for (const MachineProfile& run : runs) {
    MachineProfile copy = run;
    std::vector<MeasuredKey> k = MeasuredKeys(&copy);
    if (k.size() != keys.size()) {
      return absl::InvalidArgumentError(absl::StrCat("MedianOfRuns: a run has ", k.size(),
                                                     " measured keys, the first ", keys.size()));
    }
    for (size_t i = 0; i < k.size(); ++i) {
      if (k[i].name != keys[i].name) {
        return absl::InvalidArgumentError(absl::StrCat("MedianOfRuns: key ", k[i].name,
                                                       " where the first run has ", keys[i].name));
      }
      values[i].push_back(*k[i].value);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<double>& v = values[i];
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    switch (keys[i].combine) {
      case MeasuredKey::Combine::kMedian:
        *keys[i].value = med;
        break;
      case MeasuredKey::Combine::kLowest:
        *keys[i].value = v.front();
        break;
      case MeasuredKey::Combine::kHighest:
        *keys[i].value = v.back();
        break;
    }
    if (qualities != nullptr) {
      KeyQuality q;
      q.key = keys[i].name;
      q.runs = static_cast<int>(n);
      // The median absolute deviation: one run a burst of load hit does not make a key wide,
      // two of three do.
      std::vector<double> dev;
      for (double x : v) dev.push_back(std::abs(x - med));
      std::sort(dev.begin(), dev.end());
      const double mad = n % 2 ? dev[n / 2] : 0.5 * (dev[n / 2 - 1] + dev[n / 2]);
      const double denom = std::max(std::abs(med), keys[i].floor);
      q.spread = denom > 0 ? mad / denom : 0;
      q.wide = n > 1 && q.spread > max_spread;
      qualities->push_back(std::move(q));
    }
  }
  return out;
}

std::vector<KeyQuality> ImplausibleKeys(const MachineProfile& p) {
  std::vector<KeyQuality> out;
  auto flag = [&](std::string key, std::string why) {
    KeyQuality q;
    q.key = std::move(key);
    q.implausible = std::move(why);
    out.push_back(std::move(q));
  };
  double copy = 0;
  for (const DeviceProfile& d : p.devices) {
    if (d.kind == "cpu") copy = d.copy_bytes_per_s;
    for (const auto* list : {&d.gather, &d.scatter_update}) {
      const char* what = list == &d.gather ? "gather" : "scatter_update";
      for (const RowRatePoint& r : *list) {
        // Uniformly random rows of a table far above the LLC come from memory: no faster than
        // streaming (the copy rate counts the bytes read and written).
        const double bps = r.cold_rows_per_s * static_cast<double>(r.row_bytes);
        if (d.copy_bytes_per_s > 0 && bps > d.copy_bytes_per_s) {
          flag(absl::StrCat(d.kind, ".", what, "[", r.row_bytes, "].cold_rows_per_s"),
               absl::StrFormat("%.1f GB/s of random rows, above the copy bandwidth %.1f GB/s",
                               bps / 1e9, d.copy_bytes_per_s / 1e9));
        }
      }
    }
    for (const GemmPoint& g : d.gemm) {
      if (d.gemm_peak_flops_per_s > 0 && g.flops_per_s > 1.001 * d.gemm_peak_flops_per_s) {
        flag(absl::StrCat(d.kind, ".gemm[", g.m, "x", g.n, "x", g.k, "].flops_per_s"),
             "above gemm_peak_flops_per_s");
      }
    }
    // The arch timed whole runs its parts' kernels, in the same rounds: far from 1, a round was
    // disturbed (a neighbour's burst), not the shape's real cost.
    for (const DenseArchPoint& a : d.dense_arch) {
      for (const auto& [name, v] : {std::pair<const char*, double>{"forward_scale",
                                                                    a.forward_scale},
                                    {"backward_scale", a.backward_scale}}) {
        if (v < 0.5 || v > 2.5) {
          flag(absl::StrCat(d.kind, ".dense_arch[", a.shape, " b", a.batch, "].", name),
               absl::StrFormat("%.2f: the arch timed whole outside 0.5-2.5x its layers", v));
        }
      }
    }
  }
  // Per (op, transport, same_node, groups): the points by world size.
  std::map<std::tuple<int, std::string, bool, int>, std::vector<const CollectivePoint*>> series;
  for (const CollectivePoint& c : p.collectives) {
    const std::string pre = CollectiveKeyPrefix(c);
    if (c.same_node && copy > 0 && c.bytes_per_s > 4 * copy) {
      flag(pre + "bytes_per_s",
           absl::StrFormat("%.1f GB/s on one node, above 4x the copy bandwidth (%.1f GB/s)",
                           c.bytes_per_s / 1e9, copy / 1e9));
    }
    if (c.same_node && c.latency_s > 1e-3) {
      flag(pre + "latency_s",
           absl::StrFormat("%.3f ms for one small call on one node", 1e3 * c.latency_s));
    }
    if (c.beyond_llc_bytes_per_s > 0 &&
        c.beyond_llc_bytes_per_s < kMinBeyondLlcShare * c.bytes_per_s) {
      flag(pre + "beyond_llc_bytes_per_s",
           absl::StrFormat("%.2f GB/s beyond the cache, under 1/5 of %.2f GB/s in it",
                           c.beyond_llc_bytes_per_s / 1e9, c.bytes_per_s / 1e9));
    }
    for (const auto& [name, v] : {std::pair<const char*, double>{"compute_slowdown",
                                                                  c.compute_slowdown},
                                  {"gemm_slowdown", c.gemm_slowdown}}) {
      if (v > c.world_size * c.groups) {
        flag(pre + name, absl::StrFormat("%.2f: more than the %d ranks running one after the other",
                                         v, c.world_size * c.groups));
      }
    }
    series[{static_cast<int>(c.op), c.transport, c.same_node, c.groups}].push_back(&c);
  }
  for (const auto& [key, pts] : series) {
    for (size_t i = 1; i < pts.size(); ++i) {
      const CollectivePoint& a = *pts[i - 1];
      const CollectivePoint& b = *pts[i];
      // More ranks can only add ranks to wait for.
      if (a.wait_per_compute > 0.05 && b.wait_per_compute < 0.5 * a.wait_per_compute) {
        flag(CollectiveKeyPrefix(a) + "wait_per_compute",
             absl::StrFormat("%.3f at %d ranks but %.3f at %d: a wait that falls as ranks are "
                             "added is the load of the moment",
                             a.wait_per_compute, a.world_size, b.wait_per_compute, b.world_size));
      }
    }
  }
  return out;
}

int64_t EffectiveLlcBytes(const std::vector<int64_t>& bytes, const std::vector<double>& s_per_id,
                          int64_t reported) {
  // The measured points (a time of 0 or less: none).
  std::vector<std::pair<double, double>> pts;
  for (size_t i = 0; i < bytes.size() && i < s_per_id.size(); ++i) {
    if (s_per_id[i] > 0 && bytes[i] > 0) pts.emplace_back(static_cast<double>(bytes[i]), s_per_id[i]);
  }
  int64_t llc = reported;
  if (pts.size() >= 2 && pts.back().second >= kMinCacheRise * pts.front().second) {
    const double half = 0.5 * (pts.front().second + pts.back().second);
    for (size_t i = 0; i + 1 < pts.size(); ++i) {
      const auto [b0, t0] = pts[i];
      const auto [b1, t1] = pts[i + 1];
      if (t1 < half) continue;
      // Rises past the half way between points i and i + 1 (t0 < half <= t1).
      const double f = t1 > t0 ? std::clamp((half - t0) / (t1 - t0), 0.0, 1.0) : 0.0;
      llc = static_cast<int64_t>(std::exp(std::log(b0) + f * (std::log(b1) - std::log(b0))));
      break;
    }
  }
  return reported > 0 ? std::min(llc, reported) : llc;
}

}  // namespace tessera::planner
