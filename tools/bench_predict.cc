#include "tools/bench_predict.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/parallel.h"
#include "core/status.h"
#include "planner/planner.h"
#include "sharding/plan.h"
#include "trainer/auto_plan.h"
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

namespace {
std::vector<double> MeasuredPhaseMs(const BenchMeasurement& m, bool sharded);
}  // namespace

absl::Status ReduceOverRanks(const World& world, int64_t peak_rss_bytes, double cpu_ms_per_step,
                             BenchMeasurement* m) {
  // Every rank's phase times, gathered as bytes (the communicator reduces only sums).
  const std::vector<double> mine = MeasuredPhaseMs(*m, world.distributed());
  const int64_t block = static_cast<int64_t>(mine.size() * sizeof(double));
  std::vector<double> all(mine.size() * world.size());
  if (world.distributed()) {
    std::vector<int64_t> bytes(world.size(), block), displs(world.size());
    for (int r = 0; r < world.size(); ++r) displs[r] = r * block;
    TESSERA_RETURN_IF_ERROR(world.comm->AllGatherV(mine.data(), block, all.data(), bytes, displs));
  } else {
    all = mine;
  }
  m->phase_ms_max.assign(mine.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) {
    m->phase_ms_max[i % mine.size()] = std::max(m->phase_ms_max[i % mine.size()], all[i]);
  }
  std::vector<int64_t> rss(world.size(), peak_rss_bytes);
  std::vector<int64_t> cpu_us(world.size(), static_cast<int64_t>(cpu_ms_per_step * 1e3));
  if (world.distributed()) {
    if (absl::Status st = world.comm->AllGatherCounts(rss[world.rank()], absl::MakeSpan(rss));
        !st.ok()) {
      return st;
    }
    if (absl::Status st = world.comm->AllGatherCounts(cpu_us[world.rank()], absl::MakeSpan(cpu_us));
        !st.ok()) {
      return st;
    }
  }
  m->peak_rss_bytes = *std::max_element(rss.begin(), rss.end());
  m->cpu_ms_per_step_max =
      1e-3 * static_cast<double>(*std::max_element(cpu_us.begin(), cpu_us.end()));
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
      // A sharded model's Prefetch (the bench's "prefetch") packs the next batch's input dist
      // (PackInput, sharding.pipeline), which the estimator prices in the input dist.
      {"input dist", {"prefetch"}, {"input_dist"}, {}},
      {"lookup", {}, {"lookup"}, {kPhaseLookup}},
      {"output dist", {}, {"output_dist"}, {}},
      {"dense fwd", {kPhaseForward}, {}, {kPhaseForward}},
      {"dense bwd", {kPhaseBackward}, {}, {kPhaseBackward}},
      {"backward dist", {}, {"backward_dist"}, {}},
      {"embedding update", {}, {"aggregate", "update"}, {kPhaseEmbeddingUpdate}},
      {"dense all-reduce", {kPhaseDenseUpdate}, {}, {kPhaseDenseUpdate}},
      {"replica sync", {}, {"replica_sync"}, {}},
      {"tier misses", {}, {}, {"prefetch"}},
  };
  return kMaps;
}

// The planner's prediction for the run: per phase (PhaseMaps order), the step, peak memory.
struct Predicted {
  std::vector<double> phase_ms;
  // The planner's own plan at every other group size dividing T: its phases (what-ifs for
  // `tessera-plan replay --what-if group_size=N`).
  std::vector<GroupSizePrediction> other_groups;
  double step_ms = 0;
  double cpu_ms = 0;       // step_ms + the hidden background work (StepEstimate background_s)
  int64_t peak_bytes = 0;  // largest rank's host + device bytes
};

absl::StatusOr<Predicted> Predict(const Config& config, const World& world, Model& model,
                                  const std::string& profile_path, int64_t run_steps,
                                  int64_t distinct_batches, int64_t harness_bytes,
                                  bool other_group_sizes) {
  TESSERA_ASSIGN_OR_RETURN(ResolvedProfile resolved, ResolveProfile(profile_path, config.source));
  std::printf("  %s\n", ProfileProvenance(resolved).c_str());
  const planner::MachineProfile& profile = resolved.profile;
  planner::Topology topo;
  topo.world_size = world.size();
  topo.ranks_per_node = LauncherRanksPerNode(world.size());
  topo.memory = MachineMemoryPerRank(topo.ranks_per_node, config.output.dir);
  planner::PlanInputs inputs = PlanInputsFromConfig(config, topo);
  inputs.step.threads = NumThreads();
  // The RocksDB memtables hold the distinct rows this run wrote: the bench cycles
  // `distinct_batches` batches, so no step past them brings new rows.
  inputs.step.steps =
      distinct_batches > 0 ? std::min(run_steps, distinct_batches) : run_steps;
  std::vector<TableConfig> tables;
  for (int t = 0; t < model.sparse().num_tables(); ++t) tables.push_back(model.sparse().table(t));
  ShardingPlan plan;
  if (auto* s = dynamic_cast<ShardedSparseArch*>(&model.sparse())) {
    plan = s->collection().plan();
    inputs.group_size = s->collection().group_size();
  } else {
    plan = DefaultShardingPlan(tables, 1);
    inputs.group_size = 1;
  }
  TESSERA_ASSIGN_OR_RETURN(planner::StepEstimate e, planner::EstimatePlan(inputs, profile, plan));
  Predicted p;
  for (int i = 0; i < planner::kNumPhases; ++i) p.phase_ms.push_back(1e3 * e.step.s[i]);
  p.step_ms = 1e3 * e.step.total();
  p.cpu_ms = p.step_ms + 1e3 * e.step.background_s;
  for (const auto& mem : e.memory) {
    p.peak_bytes = std::max<int64_t>(
        p.peak_bytes, static_cast<int64_t>(mem[planner::kHost] + mem[planner::kDevice]));
  }
  p.peak_bytes += harness_bytes;  // the bench's batches: resident, not the trainer's
  const int current = inputs.group_size > 0 ? inputs.group_size : world.size();
  for (int n = 1; other_group_sizes && n <= world.size() && world.size() > 1; ++n) {
    if (world.size() % n != 0 || n == current) continue;
    planner::PlanInputs at = inputs;
    at.group_size = n;
    planner::PlannerOptions opt;
    opt.group_sizes = {n};
    absl::StatusOr<planner::PlanResult> r = planner::PlanSharding(at, profile, opt);
    if (!r.ok()) continue;  // no plan fits at n: no what-if for it
    GroupSizePrediction g;
    g.group_size = n;
    for (int i = 0; i < planner::kNumPhases; ++i) {
      g.phase_ms.push_back(1e3 * r->group.estimate.step.s[i]);
    }
    p.other_groups.push_back(std::move(g));
  }
  return p;
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
                                  JsonLine* json, std::vector<double>* predicted_ms,
                                  std::vector<GroupSizePrediction>* other_groups) {
  const bool sharded = world.distributed();
  const std::vector<double> meas =
      m.phase_ms_max.empty() ? MeasuredPhaseMs(m, sharded) : m.phase_ms_max;
  const double step_ms = 1e3 * MedianStepSeconds(m);
  json->Add("meas_step_ms_median", step_ms)
      .Add("meas_cpu_ms_per_step_max", m.cpu_ms_per_step_max)
      .Add("meas_peak_rss_bytes", m.peak_rss_bytes);
  for (size_t i = 0; i < meas.size(); ++i) {
    json->Add(std::string("meas_ms_") + PhaseMaps()[i].name, meas[i]);
  }
  const std::string profile_name = profile_path == "config" ? config.sharding.profile : profile_path;
  absl::StatusOr<Predicted> pred = profile_name.empty()
                                       ? absl::NotFoundError("no --profile")
                                       : Predict(config, world, model, profile_name,
                                                 m.warmup_steps + m.steps, m.distinct_batches,
                                                 m.harness_bytes, other_groups != nullptr);
  std::printf(
      "  predicted beside measured (ms/step; the planner's phases, tools/bench_predict.h)%s\n",
      pred.ok() ? "" : ": no prediction");
  if (!pred.ok()) {
    std::printf("    (%s)\n", std::string(pred.status().message()).c_str());
  }
  std::printf("  %-22s %10s %10s %8s   (measured: the slowest rank's, on the phase clock)\n",
              "phase", "predicted", "measured", "ratio");
  for (size_t i = 0; i < meas.size(); ++i) {
    const double p = pred.ok() ? pred->phase_ms[i] : 0;
    std::printf("  %-22s %10s %10.3f %8s\n", PhaseMaps()[i].name,
                pred.ok() ? absl::StrFormat("%.3f", p).c_str() : "-", meas[i],
                pred.ok() && meas[i] > 0 ? absl::StrFormat("%.2f", p / meas[i]).c_str() : "-");
    if (pred.ok()) json->Add(std::string("pred_ms_") + PhaseMaps()[i].name, p);
  }
  auto line = [&](const char* what, double p, double v, const char* unit) {
    std::printf("  %-22s %10s %10.3f %8s %s\n", what,
                pred.ok() ? absl::StrFormat("%.3f", p).c_str() : "-", v,
                pred.ok() && v > 0 ? absl::StrFormat("%.2f", p / v).c_str() : "-", unit);
  };
  const double p_step = pred.ok() ? pred->step_ms : 0;
  const double p_mem = pred.ok() ? pred->peak_bytes / 1048576.0 : 0;
  line("step (median wall)", p_step, step_ms, "ms");
  // On the CPU clock the tier's background reads count too (all threads).
  const double p_cpu = pred.ok() ? pred->cpu_ms : 0;
  line("step (CPU, max rank)", p_cpu, m.cpu_ms_per_step_max, "ms");
  line("peak memory", p_mem, m.peak_rss_bytes / 1048576.0, "MiB (VmHWM, max rank)");
  if (predicted_ms != nullptr && pred.ok()) *predicted_ms = pred->phase_ms;
  if (other_groups != nullptr && pred.ok()) *other_groups = pred->other_groups;
  if (pred.ok()) {
    json->Add("pred_step_ms", p_step)
        .Add("pred_cpu_ms", p_cpu)
        .Add("pred_peak_bytes", pred->peak_bytes);
  }
}

std::string EstimatorPhasesTraceJson(bool sharded, const std::vector<double>& predicted_ms,
                                     int group_size,
                                     const std::vector<GroupSizePrediction>& other_groups) {
  std::string s = absl::StrCat("\"group_size\": ", group_size, ", \"group_size_what_if\": [");
  for (size_t g = 0; g < other_groups.size(); ++g) {
    absl::StrAppend(&s, g ? ", " : "", "{\"group_size\": ", other_groups[g].group_size,
                    ", \"phases_ms\": [");
    for (size_t i = 0; i < other_groups[g].phase_ms.size(); ++i) {
      absl::StrAppend(&s, i ? ", " : "", absl::StrFormat("%.6g", other_groups[g].phase_ms[i]));
    }
    absl::StrAppend(&s, "]}");
  }
  absl::StrAppend(&s, "], \"estimator_phases\": [");
  for (size_t i = 0; i < PhaseMaps().size(); ++i) {
    const PhaseMap& p = PhaseMaps()[i];
    absl::StrAppend(&s, i ? ", " : "", "{\"phase\": \"", p.name, "\", \"names\": [");
    bool first = true;
    auto name = [&](const char* cat, const char* n) {
      absl::StrAppend(&s, first ? "" : ", ", "\"", cat, "/", n, "\"");
      first = false;
    };
    for (const char* n : sharded ? p.model : p.model_one_rank) name("step", n);
    if (sharded) {
      for (const char* n : p.sharded) name("sharded", n);
    }
    absl::StrAppend(&s, "], \"predicted_ms\": ",
                    i < predicted_ms.size() ? absl::StrFormat("%.6g", predicted_ms[i]) : "-1", "}");
  }
  return s + "]";
}

}  // namespace tessera
