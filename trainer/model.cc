#include "trainer/model.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "dense/loss.h"
#include "dense/lr_schedule.h"
#include "trainer/cuda_sparse_arch.h"
#include "trainer/split_sparse_arch.h"
#include "trainer/internal/dynamic_tables.h"
#include "trainer/internal/memory_check.h"
#include "trainer/safetensors.h"
#include "trainer/stores.h"

namespace tessera {

EmbeddingCollectionOptions EmbeddingOptionsFromConfig(const Config& config) {
  EmbeddingCollectionOptions o;
  o.tables = config.model.tables;
  int features = 0;
  for (const TableConfig& t : o.tables) {
    for (int f : t.features) features = std::max(features, f + 1);
  }
  o.num_features = features;
  o.optimizer = config.optimizer.embedding;
  o.seed = config.seed;
  return o;
}

DenseArchOptions DenseOptionsFromConfig(const Config& config) {
  DenseArchOptions o;
  o.num_dense = config.model.num_dense;
  o.num_embeddings = EmbeddingOptionsFromConfig(config).num_features;
  o.embedding_dim = config.model.embedding_dim;
  o.bottom_mlp = config.model.bottom_mlp;
  o.top_mlp = config.model.top_mlp;
  o.interaction = config.model.interaction;
  o.dcn_num_layers = config.model.dcn_num_layers;
  o.dcn_low_rank = config.model.dcn_low_rank;
  o.dense_dtype = config.model.dense_dtype;
  return o;
}

absl::StatusOr<std::unique_ptr<CudaContext>> CreateDeviceForConfig(const Config& config,
                                                                   int local_rank) {
  if (config.device != Device::kCuda) return std::unique_ptr<CudaContext>();
  const std::string where = config.source.empty() ? "" : config.source + ": ";
  if (!CudaCompiled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where,
                     "device: cuda: no CUDA device visible (this binary was built without the "
                     "CUDA path: configure with -DTESSERA_CUDA=ON on a machine with the CUDA "
                     "toolkit, or set device: cpu)"));
  }
  absl::StatusOr<int> device = CudaDeviceForLocalRank(local_rank);
  if (!device.ok()) {
    const std::string why =
        device.status().code() == absl::StatusCode::kFailedPrecondition
            ? absl::StrCat("the CUDA runtime reports 0 devices for local rank ", local_rank)
            : std::string(device.status().message());
    return absl::FailedPreconditionError(
        absl::StrCat(where, "device: cuda: no CUDA device visible (", why,
                     "; check CUDA_VISIBLE_DEVICES and nvidia-smi, or set device: cpu)"));
  }
  CudaContextOptions o;
  o.device = *device;
  absl::StatusOr<std::unique_ptr<CudaContext>> cuda = CudaContext::Create(o);
  if (!cuda.ok()) {
    return absl::Status(cuda.status().code(),
                        absl::StrCat(where, "device: cuda: cannot use GPU ", *device, " (local rank ",
                                     local_rank, "): ", cuda.status().message()));
  }
  return cuda;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const Config& config,
                                                     const DeviceContext& ctx,
                                                     std::unique_ptr<SparseArch> sparse,
                                                     Communicator* world) {
  // Before any table or layer is allocated: a model too large for the host is an error naming
  // the key, not an allocation failure (or an OOM kill) halfway through.
  TESSERA_RETURN_IF_ERROR(internal::CheckDenseMemory(config, DenseOptionsFromConfig(config),
                                                     internal::AvailableHostMemory()));
  TESSERA_RETURN_IF_ERROR(
      internal::CheckDynamicMemory(config, internal::AvailableHostMemory()));
  std::unique_ptr<Model> m(new Model());
  m->config_ = config;
  m->ctx_ = ctx;
  if (world != nullptr && world->size() > 1) m->world_ = world;
  if (ctx.is_cuda() && m->world_ != nullptr && sparse == nullptr) {
    // Several ranks need the sharded tables (CreateModelForWorld gives them); a CudaSparseArch
    // per rank would train unsynchronised copies of every table.
    return absl::InvalidArgumentError(absl::StrCat(
        config.source.empty() ? "" : config.source + ": ", "device: cuda with ", world->size(),
        " ranks needs the sharded tables (trainer/world.h CreateModelForWorld)"));
  }
  if (sparse == nullptr && ctx.is_cuda()) {
    bool tiered = false;
    for (const TableConfig& t : config.model.tables) {
      tiered = tiered || (t.storage.tier == StorageTier::kRocksDb && !t.storage.device_cached());
    }
    // Tables with storage.device_cache_rows train on the GPU as an HBM cache over their host or
    // RocksDB store (embedding/device_row_cache.h); the others whole in HBM.
    auto on_device = [&ctx, &config](const EmbeddingCollectionOptions& o,
                                     const std::vector<int>& global)
        -> absl::StatusOr<std::unique_ptr<SparseArch>> {
      std::vector<uint64_t> ids(global.begin(), global.end());
      TESSERA_ASSIGN_OR_RETURN(auto caches, CreateDeviceCaches(config, global, ctx));
      TESSERA_ASSIGN_OR_RETURN(auto arch, CudaSparseArch::Create(o, ctx, ids, std::move(caches)));
      return std::unique_ptr<SparseArch>(std::move(arch));
    };
    if (tiered) {
      // RocksDB-tier tables without a device cache stay on the host (their cache, prefetch and
      // disk as on the CPU); the pooled rows and their gradients cross PCIe per step
      // (trainer/split_sparse_arch.h).
      TESSERA_ASSIGN_OR_RETURN(sparse, CreateTierSplitSparseArch(config, on_device, false,
                                                                 DeviceColumnCopies(ctx),
                                                                 Device::kCuda));
    } else {
      std::vector<int> all(config.model.tables.size());
      for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int>(t);
      TESSERA_ASSIGN_OR_RETURN(sparse, on_device(EmbeddingOptionsFromConfig(config), all));
    }
  }
  if (sparse == nullptr) {
    // Each table's store as its config.model.tables[t].storage says (trainer/stores.h); a
    // table with a device cache gets the cache's CPU twin (host memory standing in for HBM).
    TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(config));
    TESSERA_ASSIGN_OR_RETURN(auto collection,
                             EmbeddingCollection::CreateWithStores(
                                 EmbeddingOptionsFromConfig(config), std::move(stores), ctx));
    sparse = std::make_unique<LocalSparseArch>(std::move(collection));
  }
  m->sparse_ = std::move(sparse);
  m->bf16_handoff_ = !ctx.is_cuda() && m->sparse_->bf16_outputs();
  TESSERA_ASSIGN_OR_RETURN(m->dense_, DenseArch::Create(DenseOptionsFromConfig(config), ctx));
  m->dense_->Init(config.seed);
  TESSERA_ASSIGN_OR_RETURN(
      m->dense_optimizer_,
      CreateDenseOptimizer(config.optimizer.dense, m->dense_->parameters(), ctx));
  if (!config.model.init_from.empty()) {
    TESSERA_RETURN_IF_ERROR(m->Import(config.model.init_from));
  }
  return m;
}

absl::Status Model::EnsureBuffers(int64_t batch) {
  if (batch <= capacity_) return absl::OkStatus();
  const int64_t width = sparse_->output_dim();
  const DType emb_dtype = bf16_handoff_ ? DType::kBF16 : DType::kF32;
  TESSERA_ASSIGN_OR_RETURN(emb_out_, Buffer::Allocate(ctx_.device, emb_dtype, {batch, width}));
  TESSERA_ASSIGN_OR_RETURN(d_emb_, Buffer::Allocate(ctx_.device, emb_dtype, {batch, width}));
  TESSERA_ASSIGN_OR_RETURN(d_logits_, Buffer::Allocate(ctx_.device, DType::kF32, {batch}));
  if (ctx_.is_cuda()) {
    const int64_t num_dense = std::max<int64_t>(config_.model.num_dense, 1);
    TESSERA_ASSIGN_OR_RETURN(dense_dev_,
                             Buffer::Allocate(ctx_.device, DType::kF32, {batch, num_dense}));
    TESSERA_ASSIGN_OR_RETURN(labels_dev_, Buffer::Allocate(ctx_.device, DType::kF32, {batch}));
  }
  capacity_ = batch;
  return absl::OkStatus();
}

absl::Status Model::LookUp(const KeyedJagged& sparse) {
  if (bf16_handoff_) return sparse_->ForwardBf16(sparse, emb_out_.data<uint16_t>());
  return sparse_->Forward(sparse, emb_out_.data<float>());
}

absl::Status Model::DenseForward(const float* dense, int64_t batch, const float** logits) {
  if (bf16_handoff_) return dense_->ForwardBf16(dense, emb_out_.data<uint16_t>(), batch, logits);
  return dense_->Forward(dense, emb_out_.data<float>(), batch, logits);
}

absl::Status Model::DenseBackward() {
  if (bf16_handoff_) return dense_->BackwardBf16(d_logits_.data<float>(), d_emb_.data<uint16_t>());
  return dense_->Backward(d_logits_.data<float>(), d_emb_.data<float>());
}

absl::Status Model::UpdateTables(float lr, int64_t step) {
  if (bf16_handoff_) return sparse_->BackwardUpdateBf16(d_emb_.data<uint16_t>(), lr, step);
  return sparse_->BackwardUpdate(d_emb_.data<float>(), lr, step);
}

absl::StatusOr<double> Model::TrainStep(const Batch& batch, int64_t step, PhaseTimes* times,
                                       NonFiniteStep* nonfinite) {
  const int64_t b = batch.batch_size;
  TESSERA_RETURN_IF_ERROR(EnsureBuffers(b));
  const float lr_scale = LearningRate(config_.optimizer.schedule, step);
  const float emb_lr = config_.optimizer.embedding_lr * lr_scale;
  const float dense_lr = config_.optimizer.dense_lr * lr_scale;

  const float* dense_in = batch.dense.data();
  const float* labels_in = batch.labels.data();
  if (ctx_.is_cuda() && b > 0) {
    // Queued first, so the upload runs while the host validates and stages the sparse batch.
    ScopedPhase p(times, kPhaseUpload);
    TESSERA_RETURN_IF_ERROR(StageInputs(batch, &dense_in, &labels_in));
    TESSERA_RETURN_IF_ERROR(EndPhase());
  }
  {
    ScopedPhase p(times, kPhaseLookup);
    TESSERA_RETURN_IF_ERROR(LookUp(batch.sparse));
    TESSERA_RETURN_IF_ERROR(EndPhase());
  }
  const float* logits = nullptr;
  double loss = 0;
  bool local_loss_finite = true;
  {
    ScopedPhase p(times, kPhaseForward);
    TESSERA_RETURN_IF_ERROR(DenseForward(dense_in, b, &logits));
    if (b > 0) {
      // On the GPU this waits for the stream (the loss reaches the host), so the pinned staging
      // of this step's inputs is free again afterwards.
      TESSERA_ASSIGN_OR_RETURN(loss,
                               BceWithLogits(ctx_, logits, labels_in, b, d_logits_.data<float>()));
      if (ctx_.is_cuda()) staging_pending_ = false;
    }
    local_loss_finite = std::isfinite(loss);
    if (world_ != nullptr) {
      // The gradient of the mean over the global batch: scale this rank's local mean by
      // local / global samples (one small all-reduce gives the global count and loss).
      double sums[2] = {static_cast<double>(b), loss * static_cast<double>(b)};
      TESSERA_RETURN_IF_ERROR(world_->AllReduce(sums, 2, ReduceOp::kSum));
      if (sums[0] <= 0) return absl::InvalidArgumentError("every rank's batch is empty");
      const float scale = static_cast<float>(b / sums[0]);
      TESSERA_RETURN_IF_ERROR(ScaleGradient(ctx_, d_logits_.data<float>(), b, scale));
      loss = sums[1] / sums[0];
    }
  }
  if (nonfinite != nullptr) *nonfinite = NonFiniteStep();
  // The global loss is the same on every rank, so they all skip together here.
  if (!std::isfinite(loss)) {
    if (nonfinite == nullptr) {
      return absl::InternalError(absl::StrCat("training diverged: loss is ", loss, " at step ",
                                              step, " (lower the learning rate)"));
    }
    *nonfinite = {NonFiniteStep::kLoss, !local_loss_finite};
    return loss;
  }
  {
    ScopedPhase p(times, kPhaseBackward);
    TESSERA_RETURN_IF_ERROR(DenseBackward());
    TESSERA_RETURN_IF_ERROR(EndPhase());
  }
  {
    // Before any update: the ranks agree (one small all-reduce) whether some rank's gradients
    // are not finite. Buckets of the dense all-reduce already in flight read their own copies
    // of the gradients (sharding/grad_buckets.h), so reading them here is safe, and the
    // all-reduce below is ordered after those buckets on every rank alike.
    const bool local_ok = LocalGradientsFinite(b);
    int64_t bad = local_ok ? 0 : 1;
    if (world_ != nullptr) TESSERA_RETURN_IF_ERROR(world_->AllReduce(&bad, 1, ReduceOp::kSum));
    if (bad > 0) {
      // Complete the buckets started during backward (their sums are dropped: the next
      // backward overwrites every gradient), so the next step starts with none in flight.
      if (grad_sync_ != nullptr) TESSERA_RETURN_IF_ERROR(grad_sync_->Finish());
      if (device_grad_sync_ != nullptr) TESSERA_RETURN_IF_ERROR(device_grad_sync_->Finish());
      if (nonfinite == nullptr) {
        return absl::InternalError(absl::StrCat("training diverged: gradients are not finite at "
                                                "step ", step, " (lower the learning rate)"));
      }
      *nonfinite = {NonFiniteStep::kGradients, !local_ok};
      return loss;
    }
  }
  {
    ScopedPhase p(times, kPhaseEmbeddingUpdate);
    // Gradient copies that have landed start their buckets before the embedding update.
    if (device_grad_sync_ != nullptr) TESSERA_RETURN_IF_ERROR(device_grad_sync_->Poll());
    TESSERA_RETURN_IF_ERROR(UpdateTables(emb_lr, step + 1));
    TESSERA_RETURN_IF_ERROR(EndPhase());
  }
  {
    ScopedPhase p(times, kPhaseDenseUpdate);
    if (world_ != nullptr) TESSERA_RETURN_IF_ERROR(AllReduceDenseGrads());
    if (dense_grad_hook_) TESSERA_RETURN_IF_ERROR(dense_grad_hook_(dense_->parameters()));
    TESSERA_RETURN_IF_ERROR(dense_optimizer_->Step(dense_lr));
    TESSERA_RETURN_IF_ERROR(EndPhase());
  }
  return loss;
}

absl::Status Model::StageInputs(const Batch& batch, const float** dense, const float** labels) {
  const int64_t b = batch.batch_size;
  const int64_t num_dense = config_.model.num_dense;
  // The CPU path reads these arrays in place; here they are copied by size, so check the sizes.
  if (static_cast<int64_t>(batch.dense.size()) != b * num_dense) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", b, " samples has ", batch.dense.size(),
                     " dense values; model.num_dense ", num_dense, " needs ", b * num_dense));
  }
  if (labels != nullptr && static_cast<int64_t>(batch.labels.size()) != b) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", b, " samples has ", batch.labels.size(), " labels"));
  }
  // A copy queued from staging_ by an earlier call that failed before its host wait may still
  // be pending: wait for it before overwriting the pinned memory.
  if (staging_pending_) TESSERA_RETURN_IF_ERROR(CudaSynchronize(ctx_));
  staging_pending_ = false;
  const size_t dense_bytes = batch.dense.size() * sizeof(float);
  const size_t label_bytes = labels != nullptr ? batch.labels.size() * sizeof(float) : 0;
  TESSERA_RETURN_IF_ERROR(staging_.Reserve(std::max<size_t>(dense_bytes + label_bytes, 1)));
  char* host = staging_.as<char>();
  if (dense_bytes > 0) std::memcpy(host, batch.dense.data(), dense_bytes);
  if (label_bytes > 0) std::memcpy(host + dense_bytes, batch.labels.data(), label_bytes);
  staging_pending_ = true;
  if (dense_bytes > 0) {
    TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx_, dense_dev_.raw(), host, dense_bytes));
  }
  if (label_bytes > 0) {
    TESSERA_RETURN_IF_ERROR(
        CudaCopyToDevice(ctx_, labels_dev_.raw(), host + dense_bytes, label_bytes));
  }
  *dense = dense_dev_.data<float>();
  if (labels != nullptr) *labels = labels_dev_.data<float>();
  return absl::OkStatus();
}

absl::Status Model::EndPhase() {
  if (!sync_phases_ || !ctx_.is_cuda()) return absl::OkStatus();
  return CudaSynchronize(ctx_);
}

absl::Status Model::AllReduceDeviceGrads() {
  // The gradients are device memory: each is copied to pinned host memory on the comm stream as
  // soon as backward has queued its last kernel, and summed over MPI in buckets by
  // DeviceGradSync (sharding/device_grad_sync.h): the copies overlap backward, the buckets the
  // embedding update, and the sums (rank order) have the bits of one flat all-reduce, as on the
  // CPU. The first call sets it up (every copy then starts here) and the gradient-ready callback.
  if (device_grad_sync_ == nullptr) {
    std::vector<Parameter*> params = dense_->parameters();
    std::vector<DeviceGradTensor> grads;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {  // backward runs top first
      grads.push_back({(*it)->grad.data<float>(), (*it)->grad.numel()});
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GradStager> stager, CreateCudaGradStager(ctx_));
    BucketedAllReduceOptions o;
    o.bucket_bytes = config_.sharding.bucket_bytes;
    TESSERA_ASSIGN_OR_RETURN(device_grad_sync_, DeviceGradSync::Create(world_, std::move(grads),
                                                                       std::move(stager), o));
    TESSERA_RETURN_IF_ERROR(device_grad_sync_->Finish());
    dense_->set_grad_ready_callback(
        [this](Parameter& p) { return device_grad_sync_->MarkReady(p.grad.data<float>()); });
    return absl::OkStatus();
  }
  return device_grad_sync_->Finish();
}

absl::Status Model::AllReduceDenseGrads() {
  // Buckets of ~sharding.bucket_bytes in the order the dense backward finishes its gradients
  // (sharding/grad_buckets.h). The first call sets up the buckets and the backward's
  // gradient-ready callback, so from the second step on each bucket's all-reduce starts inside
  // the backward and runs during the rest of it and the embedding update; here the remaining
  // buckets start and all are waited for. Sums in rank order: the same bits as one flat
  // all-reduce, and every rank's parameters stay identical.
  if (ctx_.is_cuda()) return AllReduceDeviceGrads();
  if (grad_sync_ == nullptr) {
    std::vector<Parameter*> params = dense_->parameters();
    std::vector<absl::Span<float>> grads;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {  // backward runs top first
      grads.push_back(absl::MakeSpan((*it)->grad.data<float>(), (*it)->grad.numel()));
    }
    BucketedAllReduceOptions o;
    o.bucket_bytes = config_.sharding.bucket_bytes;
    TESSERA_ASSIGN_OR_RETURN(grad_sync_, BucketedAllReduce::Create(world_, std::move(grads), o));
    TESSERA_RETURN_IF_ERROR(grad_sync_->Finish());
    dense_->set_grad_ready_callback(
        [this](Parameter& p) { return grad_sync_->MarkReady(p.grad.data<float>()); });
    return absl::OkStatus();
  }
  return grad_sync_->Finish();
}

namespace {
// True when none of `n` floats is NaN or infinite: an all-ones exponent marks both. Integer
// bit tests (no float compares) so the loop vectorizes without -ffast-math.
bool AllFinite(const float* x, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return any == 0;
}
// The same for n bf16 values.
bool AllFiniteBf16(const uint16_t* x, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= static_cast<uint32_t>((x[i] & 0x7f80u) == 0x7f80u);
  return any == 0;
}
}  // namespace

bool Model::LocalGradientsFinite(int64_t batch) {
  if (ctx_.is_cuda()) return true;
  const int64_t n = batch * sparse_->output_dim();
  if (bf16_handoff_ ? !AllFiniteBf16(d_emb_.data<uint16_t>(), n)
                    : !AllFinite(d_emb_.data<float>(), n)) {
    return false;
  }
  for (Parameter* p : dense_->parameters()) {
    if (!AllFinite(p->grad.data<float>(), p->grad.numel())) return false;
  }
  return true;
}

void Model::Prefetch(const Batch& next) { sparse_->Prefetch(next.sparse); }

absl::Status Model::Predict(const Batch& batch, std::vector<float>* probs) {
  const int64_t b = batch.batch_size;
  TESSERA_RETURN_IF_ERROR(EnsureBuffers(std::max<int64_t>(b, 1)));
  // Collective on a sharded model: a rank with no samples left still takes part. An
  // evaluation forward: dynamic tables admit nothing (unseen keys pool the zero row).
  sparse_->SetTraining(false);
  absl::Status looked_up = LookUp(batch.sparse);
  sparse_->SetTraining(true);
  TESSERA_RETURN_IF_ERROR(looked_up);
  if (b == 0) return absl::OkStatus();
  const float* logits = nullptr;
  const float* dense_in = batch.dense.data();
  if (ctx_.is_cuda()) TESSERA_RETURN_IF_ERROR(StageInputs(batch, &dense_in, nullptr));
  TESSERA_RETURN_IF_ERROR(DenseForward(dense_in, b, &logits));
  if (ctx_.is_cuda()) {
    // Waits for the forward; the staged inputs are free again too.
    host_logits_.resize(static_cast<size_t>(b));
    TESSERA_RETURN_IF_ERROR(
        CudaCopyToHost(ctx_, host_logits_.data(), logits, host_logits_.size() * sizeof(float)));
    staging_pending_ = false;
    logits = host_logits_.data();
  }
  probs->reserve(probs->size() + b);
  for (int64_t i = 0; i < b; ++i) probs->push_back(1.0f / (1.0f + std::exp(-logits[i])));
  return absl::OkStatus();
}

}  // namespace tessera

namespace tessera {
namespace {
constexpr int64_t kExportChunkRows = 1 << 16;

std::string TableTensorName(const TableConfig& t) { return "embedding." + t.name + ".weight"; }
}  // namespace

absl::Status Model::Export(const std::string& path, int64_t step) {
  std::vector<TensorSpec> specs;
  // Dynamic tables: the keys held and their rows (trainer/internal/dynamic_tables.h).
  std::vector<internal::DynamicExport> dynamic(sparse_->num_tables());
  for (int t = 0; t < sparse_->num_tables(); ++t) {
    const TableConfig& tc = sparse_->table(t);
    if (tc.dynamic.enabled) {
      // Collective when sharded: every rank gathers the table by key.
      TESSERA_ASSIGN_OR_RETURN(DynamicTableState st,
                               sparse_->GatherDynamicTable(t, /*with_state=*/false));
      dynamic[t] = internal::ExportDynamicState(tc.name, std::move(st));
      const int64_t n = static_cast<int64_t>(dynamic[t].keys.size());
      specs.push_back({TableTensorName(tc), SafetensorsDtype::kF32, {n, tc.dim}});
      specs.push_back({"embedding." + tc.name + ".keys", SafetensorsDtype::kU64, {n}});
      continue;
    }
    specs.push_back({TableTensorName(tc), SafetensorsDtype::kF32, {tc.num_rows, tc.dim}});
  }
  std::vector<Parameter*> params = dense_->parameters();
  for (Parameter* p : params) {
    specs.push_back({p->name, SafetensorsDtype::kF32, p->value.shape()});
  }
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"producer", "tessera"},
      {"model", config_.model.interaction == InteractionType::kDot ? "dlrm" : "dcnv2"},
      {"step", std::to_string(step)}};
  // Every rank reads the tables (collective when sharded); rank 0 alone writes the file.
  const bool write = world_ == nullptr || world_->rank() == 0;
  std::unique_ptr<SafetensorsWriter> writer;
  if (write) {
    TESSERA_ASSIGN_OR_RETURN(writer, SafetensorsWriter::Create(path, specs, metadata));
  }
  std::vector<float> chunk;
  for (int t = 0; t < sparse_->num_tables(); ++t) {
    const TableConfig& tc = sparse_->table(t);
    if (tc.dynamic.enabled) {
      if (write) {
        TESSERA_RETURN_IF_ERROR(writer->WriteTensor(TableTensorName(tc), dynamic[t].weights.data()));
        TESSERA_RETURN_IF_ERROR(
            writer->WriteTensor("embedding." + tc.name + ".keys", dynamic[t].keys.data()));
      }
      continue;
    }
    for (int64_t r = 0; r < tc.num_rows; r += kExportChunkRows) {
      int64_t n = std::min(kExportChunkRows, tc.num_rows - r);
      chunk.resize(static_cast<size_t>(n * tc.dim));
      TESSERA_RETURN_IF_ERROR(sparse_->ReadRows(t, r, n, chunk.data()));
      if (write) {
        TESSERA_RETURN_IF_ERROR(writer->WriteRows(TableTensorName(tc), r, r + n, chunk.data()));
      }
    }
  }
  if (!write) return absl::OkStatus();
  for (Parameter* p : params) {
    if (p->value.device() != Device::kCpu) {
      std::vector<float> host(p->value.numel());
      TESSERA_RETURN_IF_ERROR(CudaMemcpy(host.data(), p->value.raw(), p->value.bytes()));
      TESSERA_RETURN_IF_ERROR(writer->WriteTensor(p->name, host.data()));
    } else {
      TESSERA_RETURN_IF_ERROR(writer->WriteTensor(p->name, p->value.raw()));
    }
  }
  return writer->Finish();
}

absl::Status Model::Import(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  size_t expected = static_cast<size_t>(sparse_->num_tables());
  for (int t = 0; t < sparse_->num_tables(); ++t) {
    const TableConfig& tc = sparse_->table(t);
    if (DynamicRowStore* d = sparse_->dynamic_store(t)) {
      TESSERA_RETURN_IF_ERROR(internal::ImportDynamicTable(*file, tc.name, *d));
      ++expected;  // its keys
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(
        const TensorView* v,
        file->Get(TableTensorName(tc), SafetensorsDtype::kF32, {tc.num_rows, tc.dim}));
    for (int64_t r = 0; r < tc.num_rows; r += kExportChunkRows) {
      int64_t n = std::min(kExportChunkRows, tc.num_rows - r);
      TESSERA_RETURN_IF_ERROR(sparse_->WriteRows(t, r, n, v->f32() + r * tc.dim));
    }
  }
  for (Parameter* p : dense_->parameters()) {
    ++expected;
    TESSERA_ASSIGN_OR_RETURN(const TensorView* v,
                             file->Get(p->name, SafetensorsDtype::kF32, p->value.shape()));
    if (p->value.device() != Device::kCpu) {
      TESSERA_RETURN_IF_ERROR(CudaMemcpy(p->value.raw(), v->data, p->value.bytes()));
    } else {
      std::memcpy(p->value.raw(), v->data, p->value.bytes());
    }
  }
  if (file->tensors().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds ", file->tensors().size(), " tensors but this model has ", expected,
        " (model.init_from must come from a model of the same shape)"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
