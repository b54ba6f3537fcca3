// tessera-bench: the DLRM benchmark runner, one process or T ranks under mpirun
// (`mpirun -np T build/bin/tessera-bench --config ... --set sharding.group_size=N`). Runs a config's model for --steps
// training steps after --warmup steps on synthetic batches generated before timing (so the
// generator does not compete with the step for the cores), and prints samples/s and the time
// per phase as a table, plus one JSON object (stdout's last line, and --json FILE).
//   tessera-bench --config configs/bench/small.yaml [--steps 50] [--warmup 5] [--threads N]
// With several ranks each rank trains on its own local batches (data.batch_size per rank) and
// rank 0 prints, besides its phase times, the bytes each rank sent per step by communicator:
// the sharding group's all-to-alls (input/output dist), the replica group's embedding sync and
// the world's dense all-reduce.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/cuda_context.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "core/trace.h"
#include "sharding/mpi_communicator.h"
#include "tools/bench_predict.h"
#include "tools/bench_tier.h"
#include "tools/blas_env.h"
#include "tools/flags_util.h"
#include "tools/help.h"
#include "tools/launcher_env.h"
#include "trainer/config.h"
#include "trainer/data_sources.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/trace_writer.h"
#include "trainer/world.h"

ABSL_FLAG(std::string, config, "", "YAML config file");
ABSL_FLAG(int, steps, 50, "timed training steps");
ABSL_FLAG(int, warmup, 5, "untimed steps first");
ABSL_FLAG(int, threads, 0,
          "CPU threads (0: config's `threads`; else all cores, or under mpirun each rank its "
          "share of the node's cores)");
ABSL_FLAG(int, batches, 64,
          "distinct synthetic batches generated up front and cycled (the default 64 touches "
          "more table bytes than the last-level cache on the bench configs; the run prints both)");
ABSL_FLAG(std::string, name, "", "name of this run in the JSON output (default: the config)");
ABSL_FLAG(std::string, json, "", "also write the JSON result to this file");
ABSL_FLAG(std::string, tier_tables, "",
          "put tables in the RocksDB tier: 'all' or indices '0,3' (default: as the config says)");
ABSL_FLAG(std::string, tier_policy, "", "cache policy of RocksDB tables: lru or lfu");
ABSL_FLAG(std::string, dynamic_tables, "",
          "make tables dynamic (model.tables[].dynamic, capacity = their rows, every key "
          "admitted, no eviction) after the batches are generated, so their ids (row ids of the "
          "static tables) become keys: 'all' or indices '0,3' (default: as the config says)");
ABSL_FLAG(bool, cuda_sync_phases, false,
          "device: cuda: wait for the GPU at the end of each phase, so phase times are the "
          "device's (costs the overlap between phases and 5 host waits per step; off for the "
          "headline samples/s, on in a separate run for the phase breakdown)");
ABSL_FLAG(double, tier_cache_fraction, 0,
          "cache of each RocksDB table = this fraction of the rows the batches touch");
ABSL_FLAG(std::string, phase_clock, "wall",
          "clock of the per-phase times: wall, or cpu (this process's CPU seconds, all threads: "
          "steady while other jobs share the cores)");
ABSL_FLAG(std::string, trace, "",
          "write a step trace of the first --trace_steps timed steps here (Chrome trace-event "
          "JSON, every rank in one file: Perfetto, chrome://tracing, tessera-plan replay)");
ABSL_FLAG(int, trace_steps, 5, "timed steps the --trace window holds");
ABSL_FLAG(std::string, profile, "config",
          "machine profile for the predicted-beside-measured table: 'config' = the config's "
          "sharding.profile (default auto: this machine's, cached per user or calibrated once), "
          "auto, a shipped name (compiled in, so found wherever the binary runs) or a profile "
          "file (tessera-plan calibrate); '' = no prediction");

namespace tessera {
namespace {

// The L3 size the kernel reports (sysfs; sysconf's cpuid-based value is wrong in some VMs), or
// 32 MiB when unreadable.
double LastLevelCacheMib() {
  double kib = 32768;
  if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
    if (std::fscanf(f, "%lf", &kib) != 1) kib = 32768;
    std::fclose(f);
  }
  return kib / 1024;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tessera-bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run(const std::string& path, const std::vector<std::string>& overrides) {
  auto config = LoadConfig(path, overrides);
  if (!config.ok()) return Fail(config.status());
  Config& c = *config;
  if (absl::GetFlag(FLAGS_threads) > 0) c.threads = absl::GetFlag(FLAGS_threads);
  // Several ranks on one node share its cores (tools/launcher_env.h).
  if (c.threads == 0) c.threads = DefaultThreadsPerRank();
  if (c.threads > 0) SetNumThreads(c.threads);
  c.data.format = DataFormat::kSynthetic;
  const int n_batches = std::max(1, absl::GetFlag(FLAGS_batches));
  c.data.synthetic.num_eval_samples = 0;
  c.model.init_from.clear();

  auto world = CreateWorld(c);
  if (!world.ok()) return Fail(world.status());
  const bool chief = world->chief();
  // n_batches local batches of data.batch_size on every rank.
  c.data.synthetic.num_train_samples = c.data.batch_size * n_batches * world->size();
  auto data = OpenDataSources(c, world->rank(), world->size());
  if (!data.ok()) return Fail(data.status());
  Stopwatch gen_watch;
  std::vector<Batch> batches(n_batches);
  for (Batch& b : batches) {
    auto more = data->train->Next(&b);
    if (!more.ok()) return Fail(more.status());
  }
  const double gen_seconds = gen_watch.ElapsedSeconds();
  // RocksDB tier: which tables, cache sizes relative to the rows these batches touch.
  const TierRowCounts tier_rows = CountTierRows(c, batches);
  // Bytes of the distinct rows (values + optimizer state) the cycled batches touch, against the
  // last-level cache: fewer would keep every hot row cached and flatter the lookup and update.
  double touched_mib = 0;
  for (size_t t = 0; t < c.model.tables.size(); ++t) {
    touched_mib += static_cast<double>(tier_rows.touched[t]) * 4.0 *
                   (c.model.tables[t].dim + 2) / (1 << 20);  // row + state (<= 2 floats)
  }
  const double llc_mib = LastLevelCacheMib();
  if (absl::Status st = ApplyTierFlags(&c, absl::GetFlag(FLAGS_tier_tables),
                                       absl::GetFlag(FLAGS_tier_policy),
                                       absl::GetFlag(FLAGS_tier_cache_fraction), tier_rows);
      !st.ok()) {
    return Fail(st);
  }

  // --dynamic_tables: the same ids as keys of dynamic tables (the key -> slot overhead alone).
  if (const std::string dyn = absl::GetFlag(FLAGS_dynamic_tables); !dyn.empty()) {
    for (size_t t = 0; t < c.model.tables.size(); ++t) {
      bool pick = dyn == "all";
      for (absl::string_view part : absl::StrSplit(dyn, ',')) {
        int index = -1;
        if (absl::SimpleAtoi(part, &index) && index == static_cast<int>(t)) pick = true;
      }
      if (pick) c.model.tables[t].dynamic.enabled = true;
    }
  }

  // device: cuda: this rank's GPU (by its local rank), alive longer than the model.
  auto cuda = CreateDeviceForConfig(c, LauncherLocalRank());
  if (!cuda.ok()) return Fail(cuda.status());
  const DeviceContext ctx = *cuda != nullptr ? (*cuda)->context() : DeviceContext::Cpu();
  auto model = CreateModelForWorld(c, *world, ctx);
  if (!model.ok()) return Fail(model.status());
  (*model)->set_sync_phases(absl::GetFlag(FLAGS_cuda_sync_phases));
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  for (int i = 0; i < warmup; ++i) {
    (*model)->Prefetch(batches[(i + 1) % n_batches]);  // RocksDB tables read ahead
    auto loss = (*model)->TrainStep(batches[i % n_batches], i);
    if (!loss.ok()) return Fail(loss.status());
  }
  // Byte counters of every communicator, from the first timed step on.
  std::vector<std::pair<std::string, Communicator*>> comms = {{"world", world->comm.get()}};
  if (world->grid.has_value()) {
    comms = {{"sharding group", &world->grid->sharding_group()},
             {"replica group", &world->grid->replica_group()},
             {"world", &world->grid->world()}};
  }
  for (auto& [name, comm] : comms) comm->ResetStats();
  if (world->distributed()) (void)world->comm->Barrier();
  Communicator* tier_world = world->distributed() ? world->comm.get() : nullptr;
  auto tier_before = BenchTierMetrics(**model, tier_world);
  if (!tier_before.ok()) return Fail(tier_before.status());
  const double cpu_before = ProcessCpuSeconds();
  PhaseTimes phases;
  BenchMeasurement measured;  // per-step times and the sharded phases (tools/bench_predict.h)
  if (absl::GetFlag(FLAGS_phase_clock) == "cpu") {
    phases.set_clock(PhaseTimes::Clock::kProcessCpu);
    measured.sharded.set_clock(PhaseTimes::Clock::kProcessCpu);
  } else if (absl::GetFlag(FLAGS_phase_clock) != "wall") {
    return Fail(absl::InvalidArgumentError("--phase_clock: expected wall or cpu"));
  }
  AttachShardedPhaseTimes(**model, &measured.sharded);
  // The step trace (trainer/trace_writer.h): the bench's phases as "step", the sharded
  // collection's as "sharded", from the first timed step for --trace_steps steps.
  trace::SetPhaseCategory(&phases, "step");
  trace::SetPhaseCategory(&measured.sharded, "sharded");
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  const int trace_steps = std::max(1, std::min(absl::GetFlag(FLAGS_trace_steps), steps));
  Communicator* trace_comm = world->distributed() ? world->comm.get() : nullptr;
  if (!trace_path.empty()) {
    if (absl::Status st = StartStepTrace(trace_comm); !st.ok()) return Fail(st);
  }
  Stopwatch watch;
  double samples = 0;
  double last_loss = 0;
  for (int i = 0; i < steps; ++i) {
    if (i == trace_steps) trace::Stop();
    trace::Span step_span("step", "iteration");
    step_span.Arg("step", warmup + i);
    Stopwatch step_watch;
    const Batch* next;
    {
      // Batches were generated up front, so the data phase is only the hand-over; the
      // generator's own rate is printed separately.
      ScopedPhase p(&phases, "data");
      next = &batches[(warmup + i) % n_batches];
    }
    const Batch& b = *next;
    {
      // RocksDB tables: hand the next batch's ids to the tier (its reads run in the background).
      ScopedPhase p(&phases, "prefetch");
      (*model)->Prefetch(batches[(warmup + i + 1) % n_batches]);
    }
    auto loss = (*model)->TrainStep(b, warmup + i, &phases);
    if (!loss.ok()) return Fail(loss.status());
    samples += b.batch_size;
    last_loss = *loss;
    measured.step_seconds.push_back(step_watch.ElapsedSeconds());
  }
  if (ctx.is_cuda()) {
    // The last step's optimizer kernels may still be queued: the total counts them.
    if (absl::Status st = CudaSynchronize(ctx); !st.ok()) return Fail(st);
  }
  const double seconds = watch.ElapsedSeconds();
  auto tier_after = BenchTierMetrics(**model, tier_world);
  if (!tier_after.ok()) return Fail(tier_after.status());
  // CPU seconds of all our threads (training + the tier's readers and writers) per step: on a
  // shared machine far steadier than wall time, and the cost a quiet machine would pay.
  const double cpu_ms_per_step = 1e3 * (ProcessCpuSeconds() - cpu_before) / steps;
  // Bytes sent per step by this rank, per communicator and collective, averaged over ranks.
  std::vector<std::pair<std::string, double>> bytes_per_step;
  for (auto& [name, comm] : comms) {
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      double b = static_cast<double>(comm->stats().bytes[k]) / steps;
      if (world->distributed()) {
        if (!world->comm->AllReduce(&b, 1, ReduceOp::kAvg).ok()) return 1;
      }
      if (b > 0) {
        bytes_per_step.emplace_back(
            name + " " + CollectiveKindName(static_cast<CollectiveKind>(k)), b);
      }
    }
  }
  if (world->distributed()) {
    if (!world->comm->AllReduce(&samples, 1, ReduceOp::kSum).ok()) return 1;
  }
  const double sps = samples / seconds;
  measured.steps = steps;
  measured.warmup_steps = warmup;
  measured.distinct_batches = n_batches;
  for (const Batch& b : batches) {
    measured.harness_bytes += static_cast<int64_t>(
        (b.dense.capacity() + b.labels.capacity()) * sizeof(float) +
        (b.sparse.values.capacity() + b.sparse.offsets.capacity()) * sizeof(int64_t) +
        b.sparse.weights.capacity() * sizeof(float));
  }
  measured.mean_step_seconds = seconds / steps;
  measured.model = phases;
  if (absl::Status st = ReduceOverRanks(*world, PeakRssBytes(), cpu_ms_per_step, &measured);
      !st.ok()) {
    return Fail(st);
  }
  std::string trace_text;
  if (!trace_path.empty()) {
    absl::StatusOr<std::string> t = GatherStepTrace(
        trace_comm, absl::StrFormat("\"tool\": \"tessera-bench\", \"config\": \"%s\", "
                                    "\"steps\": %d, \"world_size\": %d, \"group_size\": %d, "
                                    "\"phase_clock\": \"%s\"",
                                    path, trace_steps, world->size(),
                                    world->grid ? world->grid->group_size() : 1,
                                    absl::GetFlag(FLAGS_phase_clock)));
    if (!t.ok()) return Fail(t.status());
    trace_text = *std::move(t);
  }
  if (!chief) return 0;

  int64_t lookups_per_sample = 0;
  for (int64_t p : c.data.synthetic.pooling) lookups_per_sample += p;
  if (c.data.synthetic.pooling.size() == 1) {
    lookups_per_sample = c.data.synthetic.pooling[0] * static_cast<int64_t>(c.model.tables.size());
  }
  std::string name = absl::GetFlag(FLAGS_name).empty() ? path : absl::GetFlag(FLAGS_name);
  std::printf("tessera-bench %s: %d rank(s) on %s", name.c_str(), world->size(),
              ctx.is_cuda() ? ("GPU " + std::to_string(ctx.cuda_device)).c_str() : "the CPU");
  if (world->grid.has_value()) {
    std::printf(" (%d groups x %d ranks, %s)", world->grid->num_groups(),
                world->grid->group_size(), GridLayoutName(c.sharding.layout));
  }
  std::printf(", %d threads each, batch %lld per rank, %d steps after %d warm-up\n",
              NumThreads(), static_cast<long long>(c.data.batch_size), steps, warmup);
  std::printf("  threads wait between parallel regions: %s\n", OmpWaitChoice().c_str());
  std::printf("  %-22s %10s %8s\n", "phase", "ms/step", "share");
  for (const auto& [phase, secs] : phases.phases()) {
    std::printf("  %-22s %10.3f %7.1f%%\n", phase.c_str(), 1e3 * secs / steps,
                100.0 * secs / seconds);
  }
  std::printf("  %-22s %10.3f\n", "total", 1e3 * seconds / steps);
  std::printf("  samples/s %.0f   (synthetic data generated at %.0f samples/s, not timed)\n", sps,
              samples > 0 ? c.data.batch_size * n_batches / gen_seconds : 0.0);
  std::printf("  %d distinct batches cycled, touching %.0f MiB of rows + state (LLC %.0f MiB)%s\n",
              n_batches, touched_mib, llc_mib,
              touched_mib < llc_mib ? ": FITS IN CACHE, raise --batches" : "");
  for (const auto& [what, b] : bytes_per_step) {
    std::printf("  bytes/step/rank %-26s %12.0f\n", what.c_str(), b);
  }

  JsonLine j;
  j.Add("name", name)
      .Add("device", DeviceName(c.device))
      .Add("ranks", static_cast<int64_t>(world->size()))
      .Add("group_size", static_cast<int64_t>(world->grid ? world->grid->group_size() : 1))
      .Add("threads", static_cast<int64_t>(NumThreads()))
      .Add("omp_wait", OmpWaitChoice())
      .Add("batch_size", c.data.batch_size)
      .Add("steps", static_cast<int64_t>(steps))
      .Add("samples_per_sec", sps)
      .Add("ms_per_step", 1e3 * seconds / steps)
      .Add("lookups_per_sample", lookups_per_sample)
      .Add("final_loss", last_loss)
      .Add("batches", static_cast<int64_t>(n_batches))
      .Add("touched_mib", touched_mib);
  for (const auto& [phase, secs] : phases.phases()) j.Add("ms_" + phase, 1e3 * secs / steps);
  for (const auto& [what, b] : bytes_per_step) j.Add("bytes_" + what, b);
  std::printf("  cpu ms/step %.3f (all threads)\n", cpu_ms_per_step);
  j.Add("cpu_ms_per_step", cpu_ms_per_step);
  PrintTierSection(*tier_before, *tier_after, steps, tier_rows, world->size(), &j);
  std::vector<double> predicted_ms;
  std::vector<GroupSizePrediction> other_groups;
  PrintPredictedBesideMeasured(c, *world, **model, absl::GetFlag(FLAGS_profile), measured, &j,
                               &predicted_ms, trace_path.empty() ? nullptr : &other_groups);
  if (!trace_path.empty()) {
    // The estimator's phases and predictions join the trace's otherData (before its "}}").
    const size_t end = trace_text.rfind("}}");
    const int group_size = world->grid ? world->grid->group_size() : world->size();
    trace_text.insert(end, ", " + EstimatorPhasesTraceJson(world->distributed(), predicted_ms,
                                                           group_size, other_groups));
    if (absl::Status st = WriteTraceFile(trace_path, trace_text); !st.ok()) return Fail(st);
    std::printf("  step trace of %d steps written to %s\n", trace_steps, trace_path.c_str());
  }
  std::printf("%s\n", j.str().c_str());
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::FILE* f = std::fopen(absl::GetFlag(FLAGS_json).c_str(), "a");
    if (f == nullptr) return Fail(absl::InvalidArgumentError("cannot open --json file"));
    std::fprintf(f, "%s\n", j.str().c_str());
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace tessera

namespace {
constexpr char kUsage[] =
    "tessera-bench: times a config's training steps on synthetic batches generated before\n"
    "timing; prints samples/s and the time per phase as a table, then one JSON object (the\n"
    "last line of stdout, and --json FILE). docs/PERFORMANCE.md gives the numbers it measures.\n"
    "\n"
    "Usage:\n"
    "  tessera-bench --config C.yaml [--steps 50] [--warmup 5] [--threads N] [--set key=value ...]\n"
    "  mpirun -np T --oversubscribe tessera-bench --config C.yaml --set sharding.group_size=N\n"
    "      T ranks, each on its own local batches (data.batch_size per rank); rank 0 also\n"
    "      prints the bytes each rank sent per step by communicator\n"
    "\n"
    "Example:\n"
    "  tessera-bench --config configs/bench/small.yaml --threads 2\n";
const std::vector<tessera::ExtraFlag> kExtraFlags = {
    {"--set key=value",
     "override one config key (repeatable; the value is YAML), e.g. --set data.batch_size=4096"}};
}  // namespace

int main(int argc, char** argv) {
  if (tessera::HandleHelp(argc, argv, kUsage, kExtraFlags)) return 0;
  tessera::MaybeReexecForBlasKernels(argv);
  std::vector<std::string> overrides = tessera::ExtractOverrides(&argc, argv);
  tessera::DashesToUnderscores(argc, argv);
  if (!tessera::CheckKnownFlags(argc, argv, "tessera-bench", &tessera::SetHint)) return 2;
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_config).empty()) {
    std::fprintf(stderr, "tessera-bench: --config is required\n");
    return 2;
  }
  const bool mpi = tessera::UnderMpiLauncher();
  if (mpi && !tessera::MpiInitialize(&argc, &argv).ok()) return 1;
  int rc = tessera::Run(absl::GetFlag(FLAGS_config), overrides);
  if (mpi) (void)tessera::MpiFinalize();
  return rc;
}
