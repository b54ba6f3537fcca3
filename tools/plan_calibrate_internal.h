// The steps of `tessera-plan calibrate` (tools/plan_calibrate.h), one file each:
//   plan_calibrate.cc        the subcommand (arguments, file), orchestration, machine description
//   plan_calibrate_device.cc copy, per-call overhead, gather / scatter-update
//   plan_calibrate_dense.cc  GEMM by layer shape, dot interaction, DCNv2 cross layers
//   plan_calibrate_pack.cc   the input dist's id packing
//   plan_calibrate_comm.cc   collectives (mpirun workers)
//   plan_calibrate_tier.cc   RocksDB tier
// Private to tools/.
#pragma once

#include <time.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/keyed_jagged.h"
#include "core/status.h"
#include "core/timer.h"
#include "dense/dense_arch.h"
#include "planner/profile.h"
#include "tools/plan_calibrate.h"

namespace tessera::calibrate_internal {

// Seconds of the clock Calibrate measures with: this process's CPU seconds (all threads) when
// `cpu` (CalibrateOptions::cpu_clock), else wall seconds. CPU time is what a quiet machine's wall
// time would be for single-threaded compute, and it is steady while other jobs share the cores.
class IntervalTimer {
 public:
  explicit IntervalTimer(bool cpu) : cpu_(cpu) { Reset(); }
  void Reset() { start_ = Now(); }
  double Seconds() const { return Now() - start_; }

 private:
  double Now() const {
    timespec ts;
    clock_gettime(cpu_ ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  bool cpu_;
  double start_ = 0;
};

// Runs `ops` in rounds (each round calls every op once, in order), first untimed for
// `warm_seconds`, then timed: at least 3 rounds and until `min_seconds` passed; returns each op's
// median seconds. Ops a step runs back to back (a layer's forward and its two backward GEMMs)
// are timed so, in the state a step keeps the core in: timed one after another, an op measured
// first after other work ran up to 1.3x faster than inside a step (the forward GEMMs of the
// DLRM configs; docs/PLANNER.md), and a drift of the machine's speed falls on all of them alike.
inline absl::StatusOr<std::vector<double>> InterleavedMedianSeconds(
    double warm_seconds, double min_seconds,
    const std::vector<std::function<absl::StatusOr<double>()>>& ops) {
  Stopwatch warm;
  while (warm.ElapsedSeconds() < warm_seconds) {
    for (const auto& op : ops) {
      absl::StatusOr<double> s = op();
      if (!s.ok()) return s.status();
    }
  }
  std::vector<std::vector<double>> t(ops.size());
  Stopwatch total;
  while (t[0].size() < 3 || (total.ElapsedSeconds() < min_seconds && t[0].size() < 10000)) {
    for (size_t i = 0; i < ops.size(); ++i) {
      absl::StatusOr<double> s = ops[i]();
      if (!s.ok()) return s.status();
      t[i].push_back(*s);
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

// Runs `once` (returning its own timed seconds) at least 3 times and until `min_seconds` of
// repetitions passed; returns the median of the repetitions' seconds.
inline absl::StatusOr<double> MedianSeconds(double min_seconds,
                                            const std::function<absl::StatusOr<double>()>& once) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> t, InterleavedMedianSeconds(0, min_seconds, {once}));
  return t[0];
}

// Waits for the device's queued work (CUDA); nothing on the CPU.
absl::Status Sync(const DeviceContext& ctx);

// A progress line on stderr when o.verbose.
void Progress(const CalibrateOptions& o, const std::string& line);

// One config's dense arch with its inputs (constant values), run as a step runs it: the forward
// and the loss (ForwardLoss, which returns the loss), then the backward. MeasureDenseArch times
// it against its parts; the collectives workers time it on every rank at once
// (plan_calibrate_comm.cc). CPU only.
class DenseArchRun {
 public:
  static absl::StatusOr<std::unique_ptr<DenseArchRun>> Create(const std::string& config_path,
                                                              const DeviceContext& ctx);
  const std::string& key() const { return key_; }  // planner::DenseShapeKey
  int64_t batch() const { return batch_; }
  const DenseArchOptions& options() const { return options_; }
  DenseArch& arch() { return *arch_; }
  absl::StatusOr<double> ForwardLoss();
  absl::Status Backward();

 private:
  DenseArchRun() = default;
  DeviceContext ctx_ = DeviceContext::Cpu();
  std::string key_;
  int64_t batch_ = 0;
  DenseArchOptions options_;
  std::unique_ptr<DenseArch> arch_;
  std::vector<float> dense_, emb_, labels_, d_logits_, d_emb_;
};
// GEMM rates of the configs' Linear and dot-interaction shapes and their cross layers timed
// whole (d->gemm, gemm_peak_flops_per_s, gemm_fused_passes, cross; plan_calibrate_dense.cc).
absl::Status MeasureDense(const CalibrateOptions& o, const DeviceContext& ctx,
                          planner::DeviceProfile* d);

// Copy bandwidth, per-call overhead, gather / scatter-update rates (plan_calibrate_device.cc)
// and MeasureDense's.
absl::StatusOr<planner::DeviceProfile> MeasureDevice(const CalibrateOptions& o,
                                                     const DeviceContext& ctx,
                                                     const std::string& name, int64_t memory_bytes);

// The LLC a table gets on this CPU (bytes): where a uniform gather's time per id has risen half
// way as the table grows (planner::EffectiveLlcBytes), at most what sysfs reports (a VM may
// report its host's L3; plan_calibrate_device.cc). `curve` gets the measured points for the
// progress line.
absl::StatusOr<int64_t> MeasureEffectiveLlc(const CalibrateOptions& o, int64_t memory_bytes,
                                            std::string* curve);

// Before each timed call: a pass over o.evict_bytes of scratch, untimed, so the table's rows are
// not left in the caches by the previous call. In training the dense layers run between two
// lookups of a table (and between its lookup and its update) and evict them; back-to-back calls
// would find the hot rows of the last batches still cached (3-4x faster than tessera-bench sees).
// `bytes` >= 0: that many instead of o.evict_bytes.
void EvictCaches(const CalibrateOptions& o, const DeviceContext& ctx, std::vector<float>* buf,
                 int64_t bytes = -1);
// After EvictCaches: one load per cache line of a call's input (untimed; CPU only), which a step
// hands over cached from the stage before (the batch's ids from the data loader, the output
// gradients from the dense backward, the received blocks from the all-to-all); the rest of what
// the call touches (table rows, optimizer state, its output) stays evicted.
void WarmInput(const DeviceContext& ctx, const void* p, int64_t bytes);
void WarmInput(const DeviceContext& ctx, const KeyedJagged& batch);
// One feature's batch of `batch` bags of `pooling` ids over `rows` (a power of two) rows: Zipf
// ranks scattered over the table by an odd multiplier (a bijection mod 2^k, so hot rows do not
// share pages, as the synthetic generator's scramble does), or uniform ids (plan_calibrate_device.cc).
KeyedJagged MakeBatch(int64_t rows, int64_t batch, int64_t pooling, bool hot, double exponent,
                      uint64_t stream);
// The input dist's packing rates (CPU only; plan_calibrate_pack.cc): d->pack_id_s and
// pack_distinct, and the multi-hot point pack_hot_id_s / pack_hot_distinct.
absl::Status MeasurePackIds(const CalibrateOptions& o, const DeviceContext& ctx,
                            planner::DeviceProfile* d);

// Collective points for every world size in o.world_sizes (sorted by op, transport, size), and
// in `comm_memory_bytes` the most resident memory MPI added to a rank (0 when skipped).
absl::StatusOr<std::vector<planner::CollectivePoint>> MeasureCollectives(
    const CalibrateOptions& o, int64_t* comm_memory_bytes);
// Tier points for every dim in o.tier_dims (sorted by value bytes).
absl::StatusOr<std::vector<planner::TierPoint>> MeasureTier(const CalibrateOptions& o);

}  // namespace tessera::calibrate_internal
