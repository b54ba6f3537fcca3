// How far a calibrated profile can be trusted: every measured key of a MachineProfile visited by
// name, the median of several calibrate runs with each key's spread, and the plausibility checks
// that refuse values the machine cannot have produced (docs/PLANNER.md "Calibration that
// survives noise").
//
// `tessera-plan calibrate` (tools/plan_calibrate.cc) measures the machine `runs` times, keeps per
// key the median of the runs (MedianOfRuns), re-measures the parts whose keys spread wider than
// the threshold or fail a check, and records in the profile's `calibration` block the keys that
// stayed wide or implausible, the runs, and the machine's load while it measured
// (CalibrationRecord). The planner itself reads none of this: it is what a user reads to decide
// whether to trust a profile (and what `calibrate --strict` fails on).
//
// Thread-safety: plain functions on values.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "planner/profile.h"

namespace tessera::planner {

// "collectives.<op>.<transport>.<world size>[.cross_node][.groups<G>].": the prefix of a
// collective point's measured keys.
std::string CollectiveKeyPrefix(const CollectivePoint& c);

// One measured value of a profile, by a stable name:
//   cpu.copy_bytes_per_s, cpu.gather[64].hot_rows_per_s, cpu.gemm[2048x256x512].flops_per_s,
//   collectives.all_reduce.mpi.2.latency_s, tier[516].read_disk_s, ...
// `floor`: the spread of a key is its runs' median absolute deviation / max(median, floor), so a
// value near 0 (a quiet machine's wait_per_compute) does not read as wide for microscopic
// differences.
struct MeasuredKey {
  std::string name;
  double* value = nullptr;
  double floor = 0;
  // Which part of calibrate measures it: "device.cpu", "device.cuda", "collectives.W" (world
  // size W) or "tier": what is run again to re-measure the key.
  std::string part;
  // How the runs combine: the median, or (a collective's latency and rates, each already the
  // fastest call of its run: the call no rank lost its core during) the best run, lowest or
  // highest, for the same reason.
  enum class Combine { kMedian, kLowest, kHighest };
  Combine combine = Combine::kMedian;
};
// Every measured key of `p`, in the profile's order (two profiles of the same shape list the same
// names in the same order). Integral fields (memory bytes) are not listed.
std::vector<MeasuredKey> MeasuredKeys(MachineProfile* p);

// The per-key median (or best, MeasuredKey::combine) of `runs` (all of the same shape; the first is
// the template for everything that is not a measured key). `qualities`, when not null, gets every
// key's spread (wide when above `max_spread`). InvalidArgument when the runs differ in shape.
[[nodiscard]] absl::StatusOr<MachineProfile> MedianOfRuns(const std::vector<MachineProfile>& runs,
                                                          double max_spread,
                                                          std::vector<KeyQuality>* qualities);

// Values the machine cannot have produced, by key: a rate of cold (uniformly random) rows above
// the streaming copy bandwidth, a collective on one node faster than 4x the copy bandwidth, a
// wait_per_compute that falls by more than half as ranks are added (from above 0.05), a
// compute_slowdown above the world size, a same-node latency above 1 ms (shared memory answers
// in microseconds), an all-reduce's beyond-cache rate under 1/5 of its in-cache rate, a GEMM
// above the profile's peak. Empty when all is plausible.
std::vector<KeyQuality> ImplausibleKeys(const MachineProfile& p);

// The wait a blocking collective adds per second of compute on a node whose ranks each have a
// core (planner/estimator.cc bounds the profile's wait_per_compute by it there): ranks that own
// their cores wait for each other only by the plan's own imbalance, which the estimator prices
// by taking every phase at its slowest rank; what remains is the scheduler's jitter, at most
// this (a quiet 2-core VM measured 0.006-0.026). A larger measured value is the load of the
// minute calibrate ran in, not the machine's.
inline constexpr double kMaxWaitPerComputeOwnCores = 0.05;

// An all-reduce's rate beyond the cache is at least this share of its in-cache rate (a quiet
// 2-core Zen 4 VM, 2026-12-06, the communicator's scratch reused across calls: 3.5 of 7.8 GB/s;
// 0.09 GB/s came from runs where the other processes held the cores, and 0.55-0.63 GB/s from
// calls that page-faulted a fresh 96 MiB each time). A measured rate under it is refused and
// calibrate records BeyondLlcFallback instead (flagged).
inline constexpr double kMinBeyondLlcShare = 1.0 / 5;
// What calibrate records for a refused beyond-cache rate of collective `c` on a device of copy
// rate `copy_bytes_per_s`: the all-reduce beyond the cache streams every byte of the buffer
// about 8 times at the copy rate over the node (each of 2 ranks: the chunks exchanged, summed
// and gathered back, read and written: ~3.5 passes, the ranks sharing the memory bus), so
// copy / 8 (3.4 GB/s on the Zen 4 VM, where 3.5 was measured), at most the in-cache rate; the
// share bound when the copy rate is unknown.
inline double BeyondLlcFallback(const CollectivePoint& c, double copy_bytes_per_s) {
  const double bound = kMinBeyondLlcShare * c.bytes_per_s;
  if (copy_bytes_per_s <= 0) return bound;
  return std::max(bound, std::min(c.bytes_per_s, copy_bytes_per_s / 8));
}

// The last-level cache a table gets, read from a gather-time curve: `bytes` the table sizes
// (increasing, each twice the one before), `s_per_id` a uniform gather's seconds per id over a
// table of that size that nothing evicts. The cache is where the time per id has risen half way
// from the smallest table's to the largest's (on a log scale of sizes between two points): a
// sharp step puts it at the step, a gradual rise (a VM's share of a large, sliced L3) where a
// table pays half of what leaving the cache costs. A curve whose last point is under
// kMinCacheRise x its first shows no cache edge: `reported` (sysfs). Never above `reported`. A
// 2-core Xeon VM that reports 480 MiB: 6 ns per id at 4 MiB, 15 at 64, 21 at 128, 33 at 512
// (tools/plan_calibrate_device.cc MeasureEffectiveLlc), so about 100 MiB.
inline constexpr double kMinCacheRise = 1.5;
int64_t EffectiveLlcBytes(const std::vector<int64_t>& bytes, const std::vector<double>& s_per_id,
                          int64_t reported);

}  // namespace tessera::planner
