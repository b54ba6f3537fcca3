// tessera-bench's predicted-beside-measured section (used by tools/bench_main.cc only): what the
// run measured, regrouped into the planner estimator's phases (planner/estimator.h), next to what
// the estimator predicts for the same config, world shape and plan from a machine profile
// (planner/profile.h), with the ratio predicted / measured per phase, for the step and for peak
// memory.
//
// Measured phases. The model's phases (trainer/model.h) and, on a sharded model, the sharded
// collection's own (ShardedEmbeddingCollection::set_phase_times) map onto the estimator's:
//   input dist       sharded input_dist + the bench's "prefetch" (a sharded model's Prefetch
//                    packs the next batch's input dist, sharding.pipeline)   (one rank: 0)
//   lookup           sharded lookup                    (one rank: the model's lookup)
//   output dist      sharded output_dist
//   dense fwd        the model's "interaction+mlp fwd" (loss and its small all-reduce included)
//   dense bwd        the model's "backward"
//   backward dist    sharded backward_dist
//   embedding update sharded aggregate + update         (one rank: the model's embedding update)
//   dense all-reduce the model's "dense update"         (bucket wait + dense optimizer step)
//   replica sync     sharded replica_sync
//   tier misses      one rank: the bench's "prefetch" (the next ids probed in the row cache and
//                    the misses handed to the tier's threads); sharded: inside input dist (the
//                    owners prefetch there); synchronous miss reads are inside lookup. On the
//                    process CPU clock (--phase_clock cpu) every phase also holds whatever the
//                    tier's threads ran meanwhile (the estimator's background_s)
// Each phase is the slowest rank's (the estimator's step takes every phase at its slowest rank).
// The step is the median of the timed steps' wall times (robust to the other engineers' builds
// on this shared machine; the mean is printed too), taken on rank 0 after each step, and peak
// memory the largest VmHWM (peak resident set) over the ranks.
// Thread-safety: none; the benchmark's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/timer.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/world.h"

namespace tessera {

// This process's peak resident set (VmHWM) in bytes; 0 when /proc is unreadable.
int64_t PeakRssBytes();

// On a sharded model, points the sharded collection's phase timer at `times` and returns true;
// false (nothing attached) for a model of one rank.
bool AttachShardedPhaseTimes(Model& model, PhaseTimes* times);

struct BenchMeasurement {
  int64_t steps = 0;
  int64_t warmup_steps = 0;          // untimed steps before them (the planner's run length)
  int64_t distinct_batches = 0;      // batches cycled (0: every step a new one)
  // Bytes of the bench's own cycled batches (resident in every rank, no part of training):
  // added to the planner's peak memory so that it compares with the process's VmHWM.
  int64_t harness_bytes = 0;
  std::vector<double> step_seconds;  // wall time of each timed step (rank 0)
  double mean_step_seconds = 0;      // timed seconds / steps
  PhaseTimes model;                  // the model's and the bench's phases, summed over steps
  PhaseTimes sharded;                // the sharded collection's, summed (empty for one rank)
  int64_t peak_rss_bytes = 0;        // max over ranks
  double cpu_ms_per_step_max = 0;    // CPU ms per step of all threads, max over ranks
  std::vector<double> phase_ms_max;  // per estimator phase: ms per step of the slowest rank
};

// Fills m's peak_rss_bytes, cpu_ms_per_step_max and phase_ms_max with the largest of every
// rank's `peak_rss_bytes`, `cpu_ms_per_step` and phase times (m->steps, m->model and m->sharded
// set on every rank first). Collective over the world.
[[nodiscard]] absl::Status ReduceOverRanks(const World& world, int64_t peak_rss_bytes,
                                           double cpu_ms_per_step, BenchMeasurement* m);

// Median of m.step_seconds.
double MedianStepSeconds(const BenchMeasurement& m);

// Prints the predicted-beside-measured table and adds pred_* / meas_* fields to `json`. Not
// collective: rank 0 calls it alone, with the measurement already reduced over the ranks.
// `profile_path`: "config" (the config's sharding.profile), auto, a shipped name or a file
// (trainer/auto_plan.h ResolveProfile; a line says where it came from and whether it was
// measured on this machine); empty: prints one line saying the prediction was skipped. Errors (a bad
// profile, inputs the planner refuses) are printed and do not fail the benchmark.
// The planner's prediction, per estimator phase (ms per step), of its own plan at another
// group size N of the same world.
struct GroupSizePrediction {
  int group_size = 0;
  std::vector<double> phase_ms;
};
// `other_groups`: that prediction for every other divisor N of T at which a plan fits.
void PrintPredictedBesideMeasured(const Config& config, const World& world, Model& model,
                                  const std::string& profile_path, const BenchMeasurement& m,
                                  JsonLine* json, std::vector<double>* predicted_ms = nullptr,
                                  std::vector<GroupSizePrediction>* other_groups = nullptr);

// The estimator's phases as a step trace's otherData member (trainer/trace_writer.h):
// "estimator_phases": [{"phase": "lookup", "names": ["sharded/lookup"], "predicted_ms": x}, ...]
// where names are the trace's "category/name" spans each phase sums (the bench's "step" phases
// and the sharded collection's "sharded" ones, as PrintPredictedBesideMeasured maps them);
// predicted_ms -1 when there is no prediction. Before it "group_size": the run's N, and
// "group_size_what_if": [{"group_size": N, "phases_ms": [...]}, ...] (estimator phase order).
std::string EstimatorPhasesTraceJson(bool sharded, const std::vector<double>& predicted_ms,
                                     int group_size = 1,
                                     const std::vector<GroupSizePrediction>& other_groups = {});

}  // namespace tessera
