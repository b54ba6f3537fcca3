#include "trainer/model.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "dense/loss.h"
#include "dense/lr_schedule.h"
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
  return o;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const Config& config,
                                                     const DeviceContext& ctx,
                                                     std::unique_ptr<SparseArch> sparse,
                                                     Communicator* world) {
  std::unique_ptr<Model> m(new Model());
  m->config_ = config;
  m->ctx_ = ctx;
  if (world != nullptr && world->size() > 1) m->world_ = world;
  if (sparse == nullptr) {
    // Each table's store as its config.model.tables[t].storage says (trainer/stores.h).
    TESSERA_ASSIGN_OR_RETURN(auto stores, CreateTableStores(config));
    TESSERA_ASSIGN_OR_RETURN(auto collection,
                             EmbeddingCollection::CreateWithStores(
                                 EmbeddingOptionsFromConfig(config), std::move(stores), ctx));
    sparse = std::make_unique<LocalSparseArch>(std::move(collection));
  }
  m->sparse_ = std::move(sparse);
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
  TESSERA_ASSIGN_OR_RETURN(emb_out_, Buffer::Allocate(ctx_.device, DType::kF32, {batch, width}));
  TESSERA_ASSIGN_OR_RETURN(d_emb_, Buffer::Allocate(ctx_.device, DType::kF32, {batch, width}));
  TESSERA_ASSIGN_OR_RETURN(d_logits_, Buffer::Allocate(ctx_.device, DType::kF32, {batch}));
  capacity_ = batch;
  return absl::OkStatus();
}

absl::StatusOr<double> Model::TrainStep(const Batch& batch, int64_t step, PhaseTimes* times) {
  const int64_t b = batch.batch_size;
  TESSERA_RETURN_IF_ERROR(EnsureBuffers(b));
  const float lr_scale = LearningRate(config_.optimizer.schedule, step);
  const float emb_lr = config_.optimizer.embedding_lr * lr_scale;
  const float dense_lr = config_.optimizer.dense_lr * lr_scale;

  {
    ScopedPhase p(times, kPhaseLookup);
    TESSERA_RETURN_IF_ERROR(sparse_->Forward(batch.sparse, emb_out_.data<float>()));
  }
  const float* logits = nullptr;
  double loss = 0;
  {
    ScopedPhase p(times, kPhaseForward);
    TESSERA_RETURN_IF_ERROR(
        dense_->Forward(batch.dense.data(), emb_out_.data<float>(), b, &logits));
    if (b > 0) {
      TESSERA_ASSIGN_OR_RETURN(
          loss, BceWithLogits(ctx_, logits, batch.labels.data(), b, d_logits_.data<float>()));
    }
    if (world_ != nullptr) {
      // The gradient of the mean over the global batch: scale this rank's local mean by
      // local / global samples (one small all-reduce gives the global count and loss).
      double sums[2] = {static_cast<double>(b), loss * static_cast<double>(b)};
      TESSERA_RETURN_IF_ERROR(world_->AllReduce(sums, 2, ReduceOp::kSum));
      if (sums[0] <= 0) return absl::InvalidArgumentError("every rank's batch is empty");
      const float scale = static_cast<float>(b / sums[0]);
      float* d = d_logits_.data<float>();
      for (int64_t i = 0; i < b; ++i) d[i] *= scale;
      loss = sums[1] / sums[0];
    }
  }
  if (!std::isfinite(loss)) {
    return absl::InternalError(absl::StrCat("training diverged: loss is ", loss, " at step ",
                                            step, " (lower the learning rate)"));
  }
  {
    ScopedPhase p(times, kPhaseBackward);
    TESSERA_RETURN_IF_ERROR(dense_->Backward(d_logits_.data<float>(), d_emb_.data<float>()));
  }
  {
    ScopedPhase p(times, kPhaseEmbeddingUpdate);
    TESSERA_RETURN_IF_ERROR(sparse_->BackwardUpdate(d_emb_.data<float>(), emb_lr, step + 1));
  }
  {
    ScopedPhase p(times, kPhaseDenseUpdate);
    if (world_ != nullptr) TESSERA_RETURN_IF_ERROR(AllReduceDenseGrads());
    if (dense_grad_hook_) TESSERA_RETURN_IF_ERROR(dense_grad_hook_(dense_->parameters()));
    TESSERA_RETURN_IF_ERROR(dense_optimizer_->Step(dense_lr));
  }
  return loss;
}

absl::Status Model::AllReduceDenseGrads() {
  // Buckets of ~sharding.bucket_bytes in the order the dense backward finishes its gradients
  // (sharding/grad_buckets.h). The first call sets up the buckets and the backward's
  // gradient-ready callback, so from the second step on each bucket's all-reduce starts inside
  // the backward and runs during the rest of it and the embedding update; here the remaining
  // buckets start and all are waited for. Sums in rank order: the same bits as one flat
  // all-reduce, and every rank's parameters stay identical.
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

void Model::Prefetch(const Batch& next) { sparse_->Prefetch(next.sparse); }

absl::Status Model::Predict(const Batch& batch, std::vector<float>* probs) {
  const int64_t b = batch.batch_size;
  TESSERA_RETURN_IF_ERROR(EnsureBuffers(std::max<int64_t>(b, 1)));
  // Collective on a sharded model: a rank with no samples left still takes part.
  TESSERA_RETURN_IF_ERROR(sparse_->Forward(batch.sparse, emb_out_.data<float>()));
  if (b == 0) return absl::OkStatus();
  const float* logits = nullptr;
  TESSERA_RETURN_IF_ERROR(dense_->Forward(batch.dense.data(), emb_out_.data<float>(), b, &logits));
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
  for (int t = 0; t < sparse_->num_tables(); ++t) {
    const TableConfig& tc = sparse_->table(t);
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
