// Trainer: runs a Config end to end, on one process or as one rank of an MPI world (then every
// rank runs the same Trainer; each reads its own slice of the data, metrics cover all ranks'
// predictions, and rank 0 alone writes the logs and the model): opens the data, builds the Model, trains
// for train.steps (or train.epochs), evaluates every train.eval_every steps and at the end,
// logs metrics as JSON lines and a progress line, and exports the model to safetensors.
//
// Failure behaviour: everything that can be checked is checked before the first step (config,
// files, output dir); a failure mid-run writes a final {"status": "failed"} metrics line, and the
// export is atomic, so no output is left looking like a finished run. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "core/timer.h"
#include "trainer/config.h"
#include "trainer/data_sources.h"
#include "trainer/metrics.h"
#include "trainer/model.h"
#include "trainer/run_log.h"
#include "trainer/world.h"

namespace tessera {

struct TrainSummary {
  int64_t steps = 0;
  int64_t samples = 0;
  double seconds = 0;             // training loop wall time, evals excluded
  double samples_per_sec = 0;
  double last_train_loss = 0;     // mean over the last log interval
  EvalMetrics eval;               // final eval (count 0 when there is no eval set)
  double planted_auc = 0.0 / 0.0; // synthetic data only
  std::string export_path;        // "" when not exported
  PhaseTimes phases;              // summed over all steps
};

// What the process knows that the config does not (the binary reads it from its launcher).
struct TrainerOptions {
  // This process's rank on its node (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, ...): with
  // device: cuda it picks the GPU (CudaDeviceForLocalRank). Default: 0.
  int local_rank = 0;
};

class Trainer {
 public:
  // Validates and prepares everything (data, model, output dir) without training. With
  // device: cuda the trainer owns the CudaContext the model runs on; a config asking for cuda
  // where no GPU is visible fails first, before any output is written (FailedPrecondition
  // "<file>: device: cuda: no CUDA device visible (...)").
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const Config& config,
                                                         const TrainerOptions& options);
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const Config& config) {
    return Create(config, TrainerOptions());
  }

  absl::StatusOr<TrainSummary> Run();
  // Predictions over the eval set (at most `max_batches` batches; 0 = all) and their metrics.
  absl::StatusOr<EvalMetrics> Evaluate(int64_t max_batches);

  Model& model() { return *model_; }
  const World& world() const { return world_; }
  const DataSources& data() const { return data_; }

 private:
  Trainer() = default;
  absl::StatusOr<TrainSummary> RunLoop();
  // True when every rank has a batch this step (collective); false ends the epoch for all.
  absl::StatusOr<bool> AllHaveBatch(bool mine);

  Config config_;
  std::unique_ptr<CudaContext> cuda_;  // device: cuda only; declared first, so it outlives model_
  DeviceContext ctx_;
  World world_;
  DataSources data_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<RunLog> log_;
};

}  // namespace tessera
