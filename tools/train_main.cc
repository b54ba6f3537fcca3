// tessera-train: trains the model a YAML config describes.
//   tessera-train --config configs/quickstart.yaml [--set key=value ...] [--threads N]
// Prints progress to stderr, writes metrics (JSON lines), TensorBoard events, the effective
// config and the exported model into output.dir, and ends with a one-line summary.
// With --eval-only it trains nothing and writes nothing there: it loads a saved model
// (--model, default model.init_from, else output.dir/output.export) and prints its AUC, log
// loss and NE on the config's eval data (data.eval; for synthetic data the eval samples),
// optionally one score per sample (--scores FILE), on one rank or several.
// Exit status 0 on success, 1 on any error (one message naming the file, line, key or value),
// 2 on bad usage.
#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "sharding/mpi_communicator.h"
#include "tools/blas_env.h"
#include "tools/eval_inputs.h"
#include "tools/flags_util.h"
#include "tools/help.h"
#include "tools/launcher_env.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/stop_signal.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, config, "", "YAML config file (see docs/CONFIG.md)");
ABSL_FLAG(int, threads, 0,
          "CPU threads (0: the config's `threads`; else all cores, or under mpirun each rank its "
          "share of the node's cores)");
ABSL_FLAG(bool, quiet, false, "no progress line");
ABSL_FLAG(std::string, trace, "",
          "write a step trace (Chrome trace-event JSON, every rank in one file; Perfetto, "
          "chrome://tracing, tessera-plan replay) of --trace_steps steps from --trace_first_step");
ABSL_FLAG(int64_t, trace_first_step, 10, "first step of the --trace window (0: the first)");
ABSL_FLAG(int64_t, trace_steps, 5, "steps the --trace window holds");
ABSL_FLAG(bool, eval_only, false,
          "evaluate a saved model on the config's eval data instead of training (also "
          "spelled --eval-only)");
ABSL_FLAG(std::string, model, "",
          "with --eval-only: the safetensors model (default: model.init_from, else "
          "output.dir/output.export)");
ABSL_FLAG(std::string, scores, "",
          "with --eval-only: write one predicted click probability per eval sample to this "
          "file, one per line, in the data's order");
ABSL_FLAG(std::string, inputs, "",
          "with --eval-only, one process: write the eval set's model inputs (dense, labels, "
          "ids and lengths per feature) to this safetensors file, in the order of --scores "
          "(tools/to_torchrec.py --check scores them in TorchRec)");
// Crash tests only (tests/trainer/kill_resume_check.sh): SIGKILL this process at a checkpoint
// step (trainer/checkpoint.h, SetCheckpointEventHook).
ABSL_FLAG(int64_t, test_crash_at_checkpoint_event, 0,
          "testing: SIGKILL at the N-th checkpoint write step of this run (0: never)");
ABSL_FLAG(int, test_crash_rank, -1, "testing: only this rank crashes (-1: every rank)");

namespace {
std::vector<std::string> overrides;

constexpr char kUsage[] =
    "tessera-train: trains a DLRM/DCNv2 model from a YAML config (docs/CONFIG.md), or evaluates "
    "a saved one.\n"
    "\n"
    "Usage:\n"
    "  tessera-train --config C.yaml [--set key=value ...] [flags]\n"
    "      train; output.dir gets metrics.jsonl, TensorBoard events, the effective config,\n"
    "      checkpoints and the exported model. Rerunning the same command resumes from the\n"
    "      last checkpoint. Ctrl-C (SIGINT) or SIGTERM: a checkpoint and the model are\n"
    "      written after the current step (a second one exits at once).\n"
    "  tessera-train --eval-only --config C.yaml [--model M.safetensors] [--scores FILE]\n"
    "      evaluate a saved model on the config's eval data: AUC, log loss, NE\n"
    "  mpirun -np T --oversubscribe tessera-train --config C.yaml ...\n"
    "      T ranks (docs/SHARDING.md; as root add --allow-run-as-root)\n"
    "\n"
    "Examples:\n"
    "  tessera-train --config configs/quickstart.yaml\n"
    "  tessera-train --config configs/criteo_sample.yaml --set train.epochs=2 "
    "--set output.dir=runs/e2\n";

const std::vector<tessera::ExtraFlag> kExtraFlags = {
    {"--set key=value",
     "override one config key (repeatable; the value is YAML): --set train.epochs=2, "
     "--set model.bottom_mlp=[64,16], --set model.tables[0].storage.tier=rocksdb"}};

// This process's rank as its launcher tells it (0 when not launched as a rank).
int LauncherRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// Reports an error of this rank. Before any collective has started every rank fails the same
// way and returns; after, a failing rank ends the whole job so no rank is left waiting.
int Fail(const absl::Status& status, bool collective_started) {
  const bool distributed = tessera::MpiActive();
  const int rank = LauncherRank();
  if (!distributed || rank == 0 || collective_started) {
    std::string prefix = distributed ? "[rank " + std::to_string(rank) + "] " : "";
    std::fprintf(stderr, "tessera-train: %s%s\n", prefix.c_str(),
                 std::string(status.message()).c_str());
  }
  if (distributed && collective_started) tessera::MpiAbort(1);
  return 1;
}

int64_t crash_at = 0;
void CrashAtCheckpointEvent(const char*) {
  if (--crash_at == 0) std::raise(SIGKILL);
}
}  // namespace

int Main(bool mpi);
int EvalOnly(tessera::Config config, bool mpi);

int main(int argc, char** argv) {
  if (tessera::HandleHelp(argc, argv, kUsage, kExtraFlags)) return 0;
  tessera::MaybeReexecForBlasKernels(argv);
  overrides = tessera::ExtractOverrides(&argc, argv);
  tessera::DashesToUnderscores(argc, argv);  // --eval-only as --eval_only
  if (!tessera::CheckKnownFlags(argc, argv, "tessera-train", &tessera::SetHint)) return 2;
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  // Under mpirun (or a scheduler's MPI launcher) every rank runs this same program.
  const bool mpi = tessera::UnderMpiLauncher();
  if (mpi) {
    absl::Status st = tessera::MpiInitialize(&argc, &argv);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-train: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  // After MPI_Init (which may install its own handlers): SIGINT and SIGTERM stop the run
  // cleanly (trainer/stop_signal.h).
  if (!absl::GetFlag(FLAGS_eval_only)) tessera::InstallStopSignalHandlers("tessera-train");
  int rc = Main(mpi);
  if (mpi) (void)tessera::MpiFinalize();
  return rc;
}

// The run itself; `mpi` when launched as one of several ranks.
int Main(bool mpi) {
  std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) {
    std::fprintf(stderr, "tessera-train: --config is required (try configs/quickstart.yaml)\n");
    return 2;
  }
  auto config = tessera::LoadConfig(path, overrides);
  if (!config.ok()) return Fail(config.status(), false);
  if (absl::GetFlag(FLAGS_threads) > 0) config->threads = absl::GetFlag(FLAGS_threads);
  // Several ranks on one node share its cores (tools/launcher_env.h).
  if (config->threads == 0) config->threads = tessera::DefaultThreadsPerRank();
  if (absl::GetFlag(FLAGS_quiet)) config->output.progress = false;
  crash_at = absl::GetFlag(FLAGS_test_crash_at_checkpoint_event);
  const int crash_rank = absl::GetFlag(FLAGS_test_crash_rank);
  if (crash_at > 0 && (crash_rank < 0 || crash_rank == LauncherRank())) {
    tessera::SetCheckpointEventHook(&CrashAtCheckpointEvent);
  }
  if (absl::GetFlag(FLAGS_eval_only)) return EvalOnly(*std::move(config), mpi);
  tessera::TrainerOptions trainer_options;
  trainer_options.local_rank = tessera::LauncherLocalRank();  // device: cuda picks its GPU by it
  trainer_options.trace_path = absl::GetFlag(FLAGS_trace);
  trainer_options.trace_first_step = std::max<int64_t>(0, absl::GetFlag(FLAGS_trace_first_step));
  trainer_options.trace_steps = std::max<int64_t>(1, absl::GetFlag(FLAGS_trace_steps));
  auto trainer = tessera::Trainer::Create(*config, trainer_options);
  if (!trainer.ok()) return Fail(trainer.status(), mpi);
  if ((*trainer)->world().chief()) {
    TESSERA_LOG(INFO) << "training " << path << " on " << (*trainer)->world().size()
                      << " rank(s) with " << tessera::NumThreads()
                      << " threads each (waiting between parallel regions: "
                      << tessera::OmpWaitChoice() << ")";
  }
  auto summary = (*trainer)->Run();
  if (absl::IsCancelled(summary.status())) {
    // A stop signal: every rank stopped at the same step and wrote its part of the checkpoint.
    if ((*trainer)->world().chief()) {
      std::fprintf(stderr, "tessera-train: %s\n", std::string(summary.status().message()).c_str());
    }
    return 128 + (*trainer)->stop_signal();
  }
  if (!summary.ok()) return Fail(summary.status(), mpi);
  if (!(*trainer)->world().chief()) return 0;
  const tessera::TrainSummary& s = *summary;
  std::printf("trained %lld steps (%lld samples) in %.1f s: %.0f samples/s, train loss %.5f\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.seconds,
              s.samples_per_sec, s.last_train_loss);
  if (s.eval.count > 0) {
    std::printf("eval AUC %.4f  log loss %.5f  NE %.4f  (%lld samples)\n", s.eval.auc,
                s.eval.logloss, s.eval.ne, static_cast<long long>(s.eval.count));
  }
  if (std::isfinite(s.planted_auc) && s.eval.count > 0) {
    double closed = (s.eval.auc - 0.5) / (s.planted_auc - 0.5);
    std::printf("planted model AUC %.4f (the best possible): this run closed %.1f%% of the gap "
                "from chance\n",
                s.planted_auc, 100.0 * closed);
  }
  if (!s.export_path.empty()) std::printf("model exported to %s\n", s.export_path.c_str());
  return 0;
}

// --eval-only: the saved model's metrics (and scores) on the config's eval data.
int EvalOnly(tessera::Config config, bool mpi) {
  std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) model = config.model.init_from;
  if (model.empty() && !config.output.export_path.empty()) {
    model = (std::filesystem::path(config.output.dir) / config.output.export_path).string();
  }
  std::error_code ec;
  if (model.empty() || !std::filesystem::exists(model, ec)) {
    return Fail(absl::NotFoundError(absl::StrCat(
                    "--eval-only: no model file '", model,
                    "' (give --model FILE.safetensors, or model.init_from in the config)")),
                false);
  }
  const bool synthetic = config.data.format == tessera::DataFormat::kSynthetic;
  if (synthetic ? config.data.synthetic.num_eval_samples == 0 : config.data.eval_path.empty()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    config.source, ": --eval-only: no eval data (",
                    synthetic ? "data.synthetic.eval_samples is 0" : "data.eval is empty",
                    "; give it with --set ", synthetic ? "data.synthetic.eval_samples=N"
                                                        : "data.eval=FILE", ")")),
                false);
  }
  config.model.init_from = model;
  tessera::TrainerOptions options;
  options.local_rank = tessera::LauncherLocalRank();
  options.eval_only = true;
  auto trainer = tessera::Trainer::Create(config, options);
  if (!trainer.ok()) return Fail(trainer.status(), mpi);
  const std::string scores_path = absl::GetFlag(FLAGS_scores);
  std::vector<float> scores;
  auto m = (*trainer)->Evaluate(0, scores_path.empty() ? nullptr : &scores);
  if (!m.ok()) return Fail(m.status(), mpi);
  if (!(*trainer)->world().chief()) return 0;
  if (!scores_path.empty()) {
    std::FILE* f = std::fopen(scores_path.c_str(), "w");
    bool ok = f != nullptr;
    for (size_t i = 0; ok && i < scores.size(); ++i) ok = std::fprintf(f, "%.9g\n", scores[i]) > 0;
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("--scores: cannot write '", scores_path, "'")),
                  mpi);
    }
  }
  if (const std::string inputs = absl::GetFlag(FLAGS_inputs); !inputs.empty()) {
    if ((*trainer)->world().distributed()) {
      return Fail(absl::InvalidArgumentError("--inputs: run --eval-only on one process"), mpi);
    }
    absl::Status st = tessera::WriteEvalInputs(*(*trainer)->data().eval, inputs);
    if (!st.ok()) return Fail(st, mpi);
  }
  std::printf("model %s on %lld eval samples (%d rank(s)): AUC %.9g  log loss %.9g  NE %.9g\n",
              model.c_str(), static_cast<long long>(m->count), (*trainer)->world().size(), m->auc,
              m->logloss, m->ne);
  if (!scores_path.empty()) std::printf("scores written to %s\n", scores_path.c_str());
  return 0;
}
