// Trainer: runs a Config end to end, on one process or as one rank of an MPI world (then every
// rank runs the same Trainer; each reads its own slice of the data, metrics cover all ranks'
// predictions, and rank 0 alone writes the logs and the model): opens the data, builds the Model, trains
// for train.steps (or train.epochs), evaluates every train.eval_every steps and at the end,
// logs metrics as JSON lines (and a TensorBoard event file, output.tensorboard) and a progress
// line, and exports the model to safetensors. The run directory (output.dir) also gets the
// effective config (kEffectiveConfigFile); a resumed run appends to the metrics log.
// A step whose loss or gradients are not finite updates nothing and stops or is skipped as
// train.nonfinite says (OnNonFiniteStep). TrainerOptions::eval_only builds the same model and
// data for Evaluate alone (tessera-train --eval-only) and writes nothing.
//
// Failure behaviour: everything that can be checked is checked before the first step (config,
// files, output dir); a failure mid-run writes a final {"status": "failed"} metrics line, and the
// export is atomic, so no output is left looking like a finished run. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "core/timer.h"
#include "trainer/config.h"
#include "trainer/data_sources.h"
#include "trainer/metrics.h"
#include "trainer/mllog.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/world.h"

namespace tessera {

class CheckpointedRun;

struct TrainSummary {
  int64_t steps = 0;
  int64_t samples = 0;
  double seconds = 0;             // training loop wall time, evals excluded
  double samples_per_sec = 0;
  double last_train_loss = 0;     // mean over the last log interval
  EvalMetrics eval;               // final eval (count 0 when there is no eval set)
  int64_t nonfinite_skipped = 0;  // steps skipped as not finite (train.nonfinite: skip)
  double planted_auc = 0.0 / 0.0; // synthetic data only
  std::string export_path;        // "" when not exported
  PhaseTimes phases;              // summed over all steps
};

// What the process knows that the config does not (the binary reads it from its launcher).
struct TrainerOptions {
  // This process's rank on its node (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, ...): with
  // device: cuda it picks the GPU (CudaDeviceForLocalRank). Default: 0.
  int local_rank = 0;
  // Evaluation only (tessera-train --eval-only): Create writes nothing (no output dir, metrics,
  // event file or effective config) and the caller calls Evaluate, never Run. The model to
  // evaluate comes in through config.model.init_from. Default: false.
  bool eval_only = false;
  // tessera-train --trace: a step trace (trainer/trace_writer.h) of `trace_steps` training steps
  // from step `trace_first_step` (0-based, counting this run's steps), written by rank 0 to
  // `trace_path` when the window ends (or at the end of a shorter run). "": no trace.
  std::string trace_path;
  int64_t trace_first_step = 10;
  int64_t trace_steps = 5;
};

// The effective config's file name inside output.dir: ConfigToYaml of the run's config (every
// key, defaults included, paths resolved), written by rank 0 when the trainer is created, and
// rewritten on resume (so it shows the config that ran last). It loads back with LoadConfig.
inline constexpr char kEffectiveConfigFile[] = "config.yaml";

// Writes kEffectiveConfigFile into config.output.dir (which must exist), atomically (a .tmp file
// renamed into place). InvalidArgument naming the path when it cannot be written.
[[nodiscard]] absl::Status WriteEffectiveConfig(const Config& config);

class Trainer {
 public:
  // Validates and prepares everything (data, model, output dir) without training. With
  // device: cuda the trainer owns the CudaContext the model runs on; a config asking for cuda
  // where no GPU is visible fails first, before any output is written (FailedPrecondition
  // "<file>: device: cuda: no CUDA device visible (...)").
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const Config& config, const TrainerOptions& options);
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Trainer>> Create(const Config& config) {
    return Create(config, TrainerOptions());
  }

  [[nodiscard]] absl::StatusOr<TrainSummary> Run();
  // Predictions over the eval set (at most `max_batches` batches; 0 = all) and their metrics
  // (every rank gets the same). With `scores` non-null, every rank also gets every prediction
  // (click probability), in the order of the eval data: rank r's slice follows rank r-1's.
  // Collective under several ranks.
  [[nodiscard]] absl::StatusOr<EvalMetrics> Evaluate(int64_t max_batches,
                                                     std::vector<float>* scores = nullptr);

  Model& model() { return *model_; }
  const World& world() const { return world_; }
  const DataSources& data() const { return data_; }
  // The signal that stopped Run (SIGINT when any rank got one, else SIGTERM; the same on every
  // rank), or 0.
  int stop_signal() const { return stop_signal_; }

 private:
  Trainer() = default;
  absl::StatusOr<TrainSummary> RunLoop();
  // After a stop signal (trainer/stop_signal.h), at `step`: a checkpoint, the export and a
  // metrics line {"status": "interrupted", "step", "signal", "checkpoint"}; returns Cancelled
  // saying how to resume. Collective.
  absl::Status Stop(CheckpointedRun& checkpoints, int64_t step, int64_t total_steps);
  // True when every rank has a batch this step (collective); false ends the epoch for all.
  absl::StatusOr<bool> AllHaveBatch(bool mine);
  // Reports a step TrainStep found not finite (0-based `step`; this rank's `epoch`, batch index
  // in it and the batch's origin): a metrics line {"step", "nonfinite", "action", "batch"}
  // naming every culprit rank's batch, then FailedPrecondition with the same detail under
  // train.nonfinite: stop, or a warning under skip. Collective (every rank calls it together).
  absl::Status OnNonFiniteStep(const NonFiniteStep& nonfinite, double loss, int64_t step,
                               int64_t epoch, int64_t batch_index, const std::string& origin);

  Config config_;
  std::unique_ptr<CudaContext> cuda_;  // device: cuda only; declared first, so it outlives model_
  DeviceContext ctx_;
  World world_;
  DataSources data_;
  std::unique_ptr<Model> model_;
  // Samples trained by every rank together after `step` steps (equal local batches).
  int64_t GlobalSamples(int64_t step) const {
    return step * config_.data.batch_size * world_.size();
  }

  std::unique_ptr<RunLog> log_;
  std::unique_ptr<MlperfLog> mllog_;  // output.mllog, rank 0 only
  int stop_signal_ = 0;
  int64_t last_step_ = 0;
  TrainerOptions options_;
};

}  // namespace tessera
