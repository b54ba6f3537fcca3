// tessera-plan: the sharding planner's command line (docs/PLANNER.md).
//   tessera-plan --config C.yaml --world_size T [--ranks_per_node R]
//                [--memory host=24G,device=0,disk=100G] [--profile NAME|FILE] [--group_size N]
//                [--transport mpi|nccl] [--data_sample FILE] [--out plan.yaml]
//                [--format text|json] [--svg F] [--set key=value ...]
//   tessera-plan calibrate ...        (measures this machine: tools/plan_calibrate.h)
//   tessera-plan replay TRACE ...     (replays a step trace: tools/plan_replay.h)
// Prints the plan's explanation (per-rank table, phases, baselines, one line per table) and
// writes the plan file the trainer reads (--out). Exit status 0 on success, 1 on any error (one
// message naming the file, key or table; nothing written), 2 on bad usage.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "planner/baselines.h"
#include "planner/explain.h"
#include "planner/planner.h"
#include "tools/blas_env.h"
#include "tools/flags_util.h"
#include "tools/help.h"
#include "tools/plan_calibrate.h"
#include "tools/plan_replay.h"
#include "tools/plan_sample.h"
#include "trainer/auto_plan.h"
#include "trainer/config.h"

ABSL_FLAG(std::string, config, "", "training config (YAML) to plan for");
ABSL_FLAG(int, world_size, 1, "ranks T");
ABSL_FLAG(int, ranks_per_node, 0, "ranks per node R (0 = all on one node)");
ABSL_FLAG(std::string, memory, "",
          "memory per rank: host=SIZE,device=SIZE,disk=SIZE (K/M/G/T suffixes, powers of 1024); "
          "kinds not given: this machine's (host RAM / R, free disk of output.dir / R, no device)");
ABSL_FLAG(std::string, profile, "",
          "machine profile: auto (this machine's, cached or calibrated once), a shipped name "
          "(cpu_default, h200_cluster, ...) or a file; default: the config's sharding.profile "
          "(auto unless it says otherwise) for device cpu, h200_cluster for device cuda");
ABSL_FLAG(int, group_size, -1, "fix the group size N (default: the config's; 0 = choose)");
ABSL_FLAG(std::string, transport, "",
          "collectives of the profile: mpi or nccl (default: mpi "
          "for cpu, nccl for cuda)");
ABSL_FLAG(std::string, data_sample, "", "data file (the config's data.format) to measure ids from");
ABSL_FLAG(std::string, out, "", "write the plan file here");
ABSL_FLAG(std::string, format, "text", "text or json");
ABSL_FLAG(std::string, svg, "", "write an SVG of per-rank load and memory here");

namespace tessera {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tessera-plan: %s\n", std::string(status.message()).c_str());
  return 1;
}

absl::StatusOr<int64_t> ParseSize(const std::string& key, const std::string& text) {
  std::string s = text;
  double mult = 1;
  while (!s.empty() && (s.back() == 'B' || s.back() == 'b' || s.back() == 'i')) s.pop_back();
  if (!s.empty()) {
    const char c = s.back();
    const double k = 1024;
    if (c == 'K' || c == 'k') mult = k;
    if (c == 'M' || c == 'm') mult = k * k;
    if (c == 'G' || c == 'g') mult = k * k * k;
    if (c == 'T' || c == 't') mult = k * k * k * k;
    if (mult > 1) s.pop_back();
  }
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory: ", key, "=", text, " is not a size (e.g. 24G, 512M, 0)"));
  }
  return static_cast<int64_t>(v * mult);
}

absl::Status ParseMemory(const std::string& text, planner::MemoryLimits* m) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory: '", part, "' is not kind=size (kinds: host, device, disk)"));
    }
    int64_t* dst = kv[0] == "host"     ? &m->host
                   : kv[0] == "device" ? &m->device
                   : kv[0] == "disk"   ? &m->disk
                                       : nullptr;
    if (dst == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory: unknown kind '", kv[0], "' (expected host, device, disk)"));
    }
    absl::StatusOr<int64_t> v = ParseSize(kv[0], kv[1]);
    if (!v.ok()) return v.status();
    *dst = *v;
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

planner::Baseline MakeBaseline(const std::string& name, const planner::PlanInputs& in,
                               const planner::MachineProfile& profile,
                               const absl::StatusOr<ShardingPlan>& plan) {
  planner::Baseline b;
  b.name = name;
  if (!plan.ok()) {
    b.error = std::string(plan.status().message());
    return b;
  }
  absl::StatusOr<planner::StepEstimate> e = planner::EstimatePlan(in, profile, *plan);
  if (!e.ok()) {
    b.error = std::string(e.status().message());
    return b;
  }
  b.ok = true;
  b.group_size = plan->group_size > 0 ? plan->group_size : in.topology.world_size;
  b.estimate = std::move(e).value();
  b.fits = planner::EstimateFits(in, b.estimate, &b.fits_what);
  return b;
}

// --help's text. A subcommand added to main() below gets its line under "Usage".
constexpr char kUsage[] =
    "tessera-plan: plans the sharding of a config's tables on T ranks from a machine profile\n"
    "(docs/PLANNER.md): per-rank predicted time and memory, one line per table saying why, and\n"
    "the plan file the trainer reads (sharding.plan).\n"
    "\n"
    "Usage:\n"
    "  tessera-plan --config C.yaml --world_size T [--ranks_per_node R]\n"
    "               [--memory host=24G,device=0,disk=100G] [--profile NAME|FILE] [--group_size N]\n"
    "               [--transport mpi|nccl] [--data_sample FILE] [--out plan.yaml]\n"
    "               [--format text|json] [--svg F] [--set key=value ...]\n"
    "  tessera-plan calibrate --out FILE [...]\n"
    "      measures this machine and writes the profile the planner reads\n"
    "      (tessera-plan calibrate --help lists its flags)\n"
    "  tessera-plan replay TRACE [--what-if comm_dtype=bf16|link=K|group_size=N ...]\n"
    "      replays a step trace (--trace of tessera-train / tessera-bench): each rank's\n"
    "      critical path, the profile's prediction beside each phase, what-if questions\n"
    "      (tessera-plan replay --help)\n"
    "\n"
    "Example:\n"
    "  tessera-plan --config configs/criteo_kaggle.yaml --world_size 4 --out plan.yaml\n";
const std::vector<ExtraFlag> kExtraFlags = {
    {"--set key=value", "override one config key of --config (repeatable; the value is YAML)"}};

int Run(int argc, char** argv) {
  if (HandleHelp(argc, argv, kUsage, kExtraFlags)) return 0;
  std::vector<std::string> overrides = ExtractOverrides(&argc, argv);
  DashesToUnderscores(argc, argv);
  if (!CheckKnownFlags(argc, argv, "tessera-plan", &SetHint)) return 2;
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "tessera-plan: unexpected argument '%s' (see --help)\n", rest[1]);
    return 2;
  }
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    std::fprintf(stderr, "tessera-plan: --config is required (see --help)\n");
    return 2;
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "tessera-plan: --format must be text or json (got '%s')\n",
                 format.c_str());
    return 2;
  }
  absl::StatusOr<Config> config = LoadConfig(config_path, overrides);
  if (!config.ok()) return Fail(config.status());
  const int world = absl::GetFlag(FLAGS_world_size);
  if (world < 1)
    return Fail(absl::InvalidArgumentError(absl::StrCat("--world_size ", world, " must be >= 1")));
  planner::Topology topo;
  topo.world_size = world;
  topo.ranks_per_node =
      absl::GetFlag(FLAGS_ranks_per_node) > 0 ? absl::GetFlag(FLAGS_ranks_per_node) : world;
  const bool cuda = config->device == Device::kCuda;
  std::string profile_name = absl::GetFlag(FLAGS_profile);
  if (profile_name.empty()) profile_name = cuda ? "h200_cluster" : config->sharding.profile;
  absl::StatusOr<ResolvedProfile> resolved = ResolveProfile(profile_name, config_path);
  if (!resolved.ok()) {
    return Fail(absl::Status(resolved.status().code(),
                             absl::StrCat("--profile ", profile_name, ": ",
                                          resolved.status().message())));
  }
  const planner::MachineProfile* profile = &resolved->profile;
  topo.transport = absl::GetFlag(FLAGS_transport);
  if (topo.transport.empty()) topo.transport = cuda ? "nccl" : "mpi";
  // Memory: what --memory gives, this machine's for the rest (the device only when given).
  topo.memory = MachineMemoryPerRank(topo.ranks_per_node, config->output.dir);
  if (cuda) {
    const planner::DeviceProfile* d = profile->device("cuda");
    topo.memory.device = d != nullptr ? d->memory_bytes : 0;
  }
  if (absl::Status st = ParseMemory(absl::GetFlag(FLAGS_memory), &topo.memory); !st.ok()) {
    return Fail(st);
  }
  planner::PlanInputs in = PlanInputsFromConfig(*config, topo);
  if (absl::GetFlag(FLAGS_group_size) >= 0) in.group_size = absl::GetFlag(FLAGS_group_size);
  if (const std::string sample = absl::GetFlag(FLAGS_data_sample); !sample.empty()) {
    absl::StatusOr<std::vector<planner::MeasuredIdStats>> stats =
        MeasureDataSample(*config, sample, in.step.batch_per_rank);
    if (!stats.ok()) return Fail(stats.status());
    for (size_t t = 0; t < in.tables.size(); ++t) {
      const planner::MeasuredIdStats& m = (*stats)[t];
      if (m.ids_per_sample <= 0 || m.distinct_per_batch <= 0) continue;
      in.tables[t].measured = {m};
      in.tables[t].ids_per_bag = m.ids_per_sample / in.tables[t].num_features;
    }
  }
  absl::StatusOr<planner::PlanResult> result =
      planner::PlanSharding(in, *profile, planner::PlannerOptions{});
  if (!result.ok()) return Fail(result.status());

  std::vector<planner::Baseline> baselines;
  const int base_n = in.group_size > 0 ? in.group_size : world;
  baselines.push_back(MakeBaseline("default", in, *profile, [&]() -> absl::StatusOr<ShardingPlan> {
    ShardingPlan p = DefaultShardingPlan(planner::TableConfigs(in), base_n);
    p.group_size = base_n;
    return p;
  }()));
  baselines.push_back(
      MakeBaseline("torchrec_style", in, *profile, planner::TorchRecStylePlan(in, base_n)));

  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string svg = absl::GetFlag(FLAGS_svg);
  if (!out.empty()) {
    const std::string header =
        absl::StrCat("# Written by tessera-plan for ", config_path, " on ", world,
                     " ranks (profile ", profile_name, "): predicted step ",
                     absl::StrFormat("%.3f", 1e3 * result->group.estimate.step.total()), " ms\n");
    if (absl::Status st = WriteFile(out, header + ShardingPlanToYaml(result->plan)); !st.ok()) {
      return Fail(st);
    }
  }
  if (!svg.empty()) {
    if (absl::Status st = WriteFile(svg, planner::ExplainSvg(in, *result)); !st.ok()) {
      if (!out.empty()) std::remove(out.c_str());
      return Fail(st);
    }
  }
  const std::string text = format == "json" ? planner::ExplainJson(in, *result, baselines)
                                            : planner::ExplainText(in, *result, baselines);
  // Which profile, and whether it was measured on this machine (text: the first line; json:
  // stderr, so that stdout stays one JSON object).
  std::fprintf(format == "json" ? stderr : stdout, "%s\n",
               ProfileProvenance(*resolved).c_str());
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  // calibrate times GEMMs and OpenMP loops: they must run with the kernels and the wait policy
  // tessera-train and tessera-bench get (tools/blas_env.h), or the profile prices another
  // machine. The wait is chosen as for a job that owns its cores (what tessera-train picks on
  // idle cores), whatever else runs while calibrate does: the profile must not carry the load of
  // the minute it was made in.
  tessera::MaybeReexecForBlasKernels(argv, /*assume_idle=*/true);
  if (argc >= 2 && std::string(argv[1]) == "calibrate") {
    return tessera::RunPlanCalibrate(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::string(argv[1]) == "replay") {
    return tessera::RunPlanReplay(argc - 1, argv + 1);
  }
  return tessera::Run(argc, argv);
}
