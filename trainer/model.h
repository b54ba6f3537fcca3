// Model: a DLRM or DCNv2 assembled from a Config: the SparseArch (embedding tables) and the
// DenseArch (bottom MLP, interaction, top MLP), their optimizers and the step that ties them:
//   lookup -> dense forward -> loss -> dense backward -> fused embedding update
//   -> (dense gradient hook, e.g. the all-reduce) -> dense optimizer step.
// The model owns everything it creates; batches are borrowed for the call. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "core/pinned.h"
#include "core/timer.h"
#include "dense/dense_arch.h"
#include "dense/optimizer.h"
#include "io/batch.h"
#include "sharding/communicator.h"
#include "sharding/device_grad_sync.h"
#include "sharding/grad_buckets.h"
#include "trainer/config.h"
#include "trainer/sparse_arch.h"

namespace tessera {

// Called with the dense parameters after their gradients are computed, before the optimizer
// step (the distributed trainer all-reduces them here).
using DenseGradHook = std::function<absl::Status(const std::vector<Parameter*>&)>;

// Per-step phase names recorded into PhaseTimes (tessera-bench prints them).
inline constexpr char kPhaseLookup[] = "lookup";
inline constexpr char kPhaseForward[] = "interaction+mlp fwd";
inline constexpr char kPhaseBackward[] = "backward";
inline constexpr char kPhaseEmbeddingUpdate[] = "embedding update";
inline constexpr char kPhaseDenseUpdate[] = "dense update";
// CUDA only: staging the batch's dense features and labels into device memory.
inline constexpr char kPhaseUpload[] = "upload";

// What made a training step non-finite (TrainStep's `nonfinite`).
struct NonFiniteStep {
  enum What { kNone, kLoss, kGradients };
  // kLoss: the mean loss over the global batch is NaN or infinite. kGradients: the loss is
  // finite but a gradient (of the pooled embeddings or of a dense parameter) is not.
  What what = kNone;
  // This rank's own batch is (one of) the culprits: its local loss or gradients are not finite.
  // Under several ranks `what` is the same on every rank, `this_rank` is not.
  bool this_rank = false;
};

class Model {
 public:
  // Builds the tables (each in the store its config.model.tables[t].storage names, through
  // CreateTableStores in trainer/stores.h; seeded from config.seed) and the dense arch, and loads
  // config.model.init_from when set. Takes `sparse` when given (the sharded path), otherwise
  // creates a LocalSparseArch.
  // With a `world` of more than one rank (borrowed; must outlive the model) every step is
  // collective: the loss gradient is scaled to the mean over the global batch (the ranks' local
  // batches together), dense gradients are summed over the world before the optimizer step, and
  // Export reads the tables on every rank but writes the file on rank 0 only.
  // On a CUDA `ctx` (from a CudaContext, which must outlive the model) the tables are a
  // CudaSparseArch (trainer/cuda_sparse_arch.h) and the dense arch and its optimizer live in
  // device memory; batches stay host memory and are staged through pinned memory each step.
  // A CUDA model on several ranks takes a `sparse` of sharded tables (CreateModelForWorld: the
  // shards in host memory, trainer/sharded_sparse_arch.h); its dense gradients are summed
  // through host memory (InvalidArgument without `sparse`).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Model>> Create(const Config& config,
                                                      const DeviceContext& ctx,
                                                      std::unique_ptr<SparseArch> sparse = nullptr,
                                                      Communicator* world = nullptr);

  // One training step on `batch` with 0-based `step` (the LR schedule's step). Returns the
  // mean loss over the global batch. `times` (nullable) receives per-phase seconds.
  // Non-finite guard: when the global loss, or any rank's gradients, are NaN or infinite, the
  // step updates nothing (no table row, dense parameter or optimizer state changes; the forward
  // is ended like an evaluation forward) on every rank alike. With `nonfinite` non-null the
  // step then returns the loss (OK) and says what was found in *nonfinite (set to kNone on
  // healthy steps); with null it returns InternalError "training diverged: ...". Gradients are
  // checked on the CPU path; on device: cuda only the loss is (a check of the device gradients
  // would cost a copy per step). Under several ranks the check costs one 8-byte all-reduce.
  [[nodiscard]] absl::StatusOr<double> TrainStep(const Batch& batch, int64_t step,
                                                 PhaseTimes* times = nullptr,
                                                 NonFiniteStep* nonfinite = nullptr);
  // Hints that `next` is the batch of the next TrainStep: tables in the RocksDB tier start
  // reading the rows they lack in the background (no-op for in-memory tables). Call it before
  // TrainStep(current) so the reads overlap the current step.
  void Prefetch(const Batch& next);
  // Click probabilities for `batch` (no update) appended to `probs`.
  [[nodiscard]] absl::Status Predict(const Batch& batch, std::vector<float>* probs);

  void set_dense_grad_hook(DenseGradHook hook) { dense_grad_hook_ = std::move(hook); }
  std::vector<Parameter*> dense_parameters() { return dense_->parameters(); }
  SparseArch& sparse() { return *sparse_; }
  // The dense optimizer (its state and step count go into checkpoints).
  DenseOptimizer& dense_optimizer() { return *dense_optimizer_; }
  DenseArch& dense() { return *dense_; }
  const Config& config() const { return config_; }
  const DeviceContext& device_context() const { return ctx_; }

  // CUDA only: when set, each phase of TrainStep waits for the device before it ends, so the
  // PhaseTimes are the device's time per phase (tessera-bench) at the cost of the overlap
  // between phases. No effect on the CPU. Default: off.
  void set_sync_phases(bool sync) { sync_phases_ = sync; }

  // Writes every parameter (tables and dense) to a safetensors file with PyTorch names
  // (docs/FORMATS.md). Atomic: a failed export leaves no file at `path`.
  [[nodiscard]] absl::Status Export(const std::string& path, int64_t step);
  // Loads every parameter from a safetensors file written by Export; names and shapes must
  // match this model (DataLoss/InvalidArgument naming the tensor otherwise).
  [[nodiscard]] absl::Status Import(const std::string& path);

 private:
  Model() = default;
  absl::Status EnsureBuffers(int64_t batch);
  // The step's four hand-offs between the tables and the dense arch, through emb_out_ and
  // d_emb_: fp32, or bf16 under bf16_handoff_ (no widening or rounding pass between them).
  absl::Status LookUp(const KeyedJagged& sparse);
  absl::Status DenseForward(const float* dense, int64_t batch, const float** logits);
  absl::Status DenseBackward();
  absl::Status UpdateTables(float lr, int64_t step);
  absl::Status AllReduceDenseGrads();
  absl::Status AllReduceDeviceGrads();  // AllReduceDenseGrads of a CUDA model
  // CPU: whether this rank's pooled-embedding gradients (first `batch` rows of d_emb_, as the
  // tables read them: bf16 under bf16_handoff_, where an fp32 gradient beyond bf16's range has
  // rounded to infinity) and dense parameter gradients are all finite. CUDA: true (not checked).
  bool LocalGradientsFinite(int64_t batch);
  // CUDA: copies the batch's dense features (and labels when `labels` is non-null) through
  // staging_ into dense_dev_ / labels_dev_ and points *dense / *labels at them.
  absl::Status StageInputs(const Batch& batch, const float** dense, const float** labels);
  // CUDA with sync_phases_: waits for the compute stream (a phase's end). Otherwise nothing.
  absl::Status EndPhase();

  Config config_;
  DeviceContext ctx_;
  std::unique_ptr<SparseArch> sparse_;
  std::unique_ptr<DenseArch> dense_;
  std::unique_ptr<DenseOptimizer> dense_optimizer_;
  DenseGradHook dense_grad_hook_;
  Communicator* world_ = nullptr;
  std::unique_ptr<BucketedAllReduce> grad_sync_;  // dense gradient buckets (world_ only)
  std::unique_ptr<DeviceGradSync> device_grad_sync_;  // a CUDA model's (world_ only)
  // The pooled embeddings and their gradient, [capacity_, output_dim]: fp32, or bf16 when
  // bf16_handoff_ (the CPU with tables whose every output_dtype is bf16, in this process:
  // SparseArch::bf16_outputs; DenseArch::ForwardBf16 / BackwardBf16).
  bool bf16_handoff_ = false;
  Buffer emb_out_, d_emb_, d_logits_;
  int64_t capacity_ = 0;
  // CUDA only: device copies of the batch's dense features and labels, their pinned staging
  // (free again once the stream passed the upload: staging_pending_ says it may not have), and
  // the host copy of the logits Predict reads.
  Buffer dense_dev_, labels_dev_;
  PinnedBuffer staging_;
  bool staging_pending_ = false;
  std::vector<float> host_logits_;
  bool sync_phases_ = false;
};

// Builds the EmbeddingCollectionOptions and DenseArchOptions a Config describes.
EmbeddingCollectionOptions EmbeddingOptionsFromConfig(const Config& config);
DenseArchOptions DenseOptionsFromConfig(const Config& config);

// The device config.device names, for a process with `local_rank` on its node (the binary reads
// it from the launcher, e.g. OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID; libraries read no
// environment). "cpu": nullptr (use DeviceContext::Cpu()). "cuda": a CudaContext on GPU
// CudaDeviceForLocalRank(local_rank), which the caller keeps alive longer than any model built on
// its context(). FailedPrecondition "<config.source>: device: cuda: no CUDA device visible (...)"
// when the build has no CUDA path or the driver shows no GPU.
[[nodiscard]] absl::StatusOr<std::unique_ptr<CudaContext>> CreateDeviceForConfig(
    const Config& config, int local_rank);

}  // namespace tessera
