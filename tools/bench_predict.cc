#include "tools/bench_predict.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "trainer/sharded_sparse_arch.h"

namespace tessera {

int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

bool AttachShardedPhaseTimes(Model& model, PhaseTimes* times) {
  auto* sharded = dynamic_cast<ShardedSparseArch*>(&model.sparse());
  if (sharded == nullptr) return false;
  sharded->collection().set_phase_times(times);
  return true;
}

absl::Status ReduceOverRanks(const World& world, int64_t peak_rss_bytes, double cpu_ms_per_step,
                             BenchMeasurement* m) {
  std::vector<int64_t> rss(world.size(), peak_rss_bytes);
  std::vector<int64_t> cpu_us(world.size(), static_cast<int64_t>(cpu_ms_per_step * 1e3));
  if (world.distributed()) {
    if (absl::Status st = world.comm->AllGatherCounts(rss[world.rank()], absl::MakeSpan(rss));
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            world.comm->AllGatherCounts(cpu_us[world.rank()], absl::MakeSpan(cpu_us));
        !st.ok()) {
      return st;
    }
  }
  m->peak_rss_bytes = *std::max_element(rss.begin(), rss.end());
  m->cpu_ms_per_step_max = 1e-3 * static_cast<double>(*std::max_element(cpu_us.begin(), cpu_us.end()));
  return absl::OkStatus();
}

double MedianStepSeconds(const BenchMeasurement& m) {
  if (m.step_seconds.empty()) return 0;
  std::vector<double> s = m.step_seconds;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace tessera

namespace tessera {
namespace {

// The estimator's phases (planner/estimator.h, in its order) and what the bench measured for
// each: sums of the named model phases (`model`) and sharded-collection phases (`sharded`).
struct PhaseMap {
  const char* name;
  std::vector<const char*> model;
  std::vector<const char*> sharded;
  std::vector<const char*> model_one_rank;  // a model of one rank (no sharded phases)
};
const std::vector<PhaseMap>& PhaseMaps() {
  static const std::vector<PhaseMap> kMaps = {
      {"input dist", {}, {"input_dist"}, {}},
      {"lookup", {}, {"lookup"}, {kPhaseLookup}},
      {"output dist", {}, {"output_dist"}, {}},
      {"dense fwd", {kPhaseForward}, {}, {kPhaseForward}},
      {"dense bwd", {kPhaseBackward}, {}, {kPhaseBackward}},
      {"backward dist", {}, {"backward_dist"}, {}},
      {"embedding update", {}, {"aggregate", "update"}, {kPhaseEmbeddingUpdate}},
      {"dense all-reduce", {kPhaseDenseUpdate}, {}, {kPhaseDenseUpdate}},
      {"replica sync", {}, {"replica_sync"}, {}},
      {"tier misses", {"prefetch"}, {}, {"prefetch"}},
  };
  return kMaps;
}

// Measured ms per step of each estimator phase.
std::vector<double> MeasuredPhaseMs(const BenchMeasurement& m, bool sharded) {
  std::vector<double> ms;
  for (const PhaseMap& p : PhaseMaps()) {
    double s = 0;
    for (const char* n : sharded ? p.model : p.model_one_rank) s += m.model.Get(n);
    if (sharded) {
      for (const char* n : p.sharded) s += m.sharded.Get(n);
    }
    ms.push_back(m.steps > 0 ? 1e3 * s / m.steps : 0);
  }
  return ms;
}

}  // namespace

void PrintPredictedBesideMeasured(const Config& config, const World& world, Model& model,
                                  const std::string& profile_path, const BenchMeasurement& m,
                                  JsonLine* json) {
  const bool sharded = world.distributed();
  const std::vector<double> meas = MeasuredPhaseMs(m, sharded);
  const double step_ms = 1e3 * MedianStepSeconds(m);
  std::printf("  measured by the planner's phases (ms/step), step median %.3f ms (mean %.3f), "
              "CPU %.3f ms/step (max over ranks), peak RSS %.1f MiB (max over ranks)\n",
              step_ms, 1e3 * m.mean_step_seconds, m.cpu_ms_per_step_max,
              m.peak_rss_bytes / 1048576.0);
  for (size_t i = 0; i < meas.size(); ++i) {
    std::printf("  %-22s %10.3f\n", PhaseMaps()[i].name, meas[i]);
    json->Add(std::string("meas_ms_") + PhaseMaps()[i].name, meas[i]);
  }
  json->Add("meas_step_ms_median", step_ms)
      .Add("meas_cpu_ms_per_step_max", m.cpu_ms_per_step_max)
      .Add("meas_peak_rss_bytes", m.peak_rss_bytes);
  (void)config;
  (void)model;
  (void)profile_path;
  std::printf("  predicted: skipped (the planner's estimator is not in this build yet)\n");
}

}  // namespace tessera
