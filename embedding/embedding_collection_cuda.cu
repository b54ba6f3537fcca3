// CudaEmbeddingCollection (contract in embedding_collection_cuda.h): tables as device Buffers,
// the batch staged through one pinned block, and the CUDA twins of pooled_lookup_cuda.h.
// Why the pieces are where they are:
//   - Validation runs on the host copy of the batch before anything is uploaded, so a bad id is
//     reported with its table, feature and sample and never reaches a kernel.
//   - One pinned block holds [offsets | ids | weights]; three async copies move it. An event
//     after the copies lets the next Forward wait for exactly that upload before it overwrites
//     the block, instead of synchronising the whole stream.
//   - A cached table (device_row_cache.h) resolves its ids to cache slots on the host, in the
//     pinned block before the upload, so the kernels never know the table is cached.
//   - The backward passes host id counts and the slot bit width (ids were range-checked), so it
//     queues without a single wait for the host.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "core/pinned.h"
#include "embedding/embedding_collection_cuda.h"
#include "embedding/internal/collection_checks.h"
#include "embedding/pooled_lookup_cuda.h"
#include "embedding/row_init.h"

namespace tessera {
namespace {

using embedding_internal::TableLabel;

int BitWidth(uint64_t x) {
  int b = 0;
  while (x != 0) ++b, x >>= 1;
  return b;
}

// One thread per row: InitRow, then the state's initial value.
__global__ void InitTableKernel(RowInit init, uint64_t seed, uint64_t table_id, int64_t rows,
                                int64_t dim, int64_t state_dim, float state_init,
                                float* __restrict__ weights, float* __restrict__ state) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    InitRow(init, seed, table_id, rows, r, dim, weights + r * dim);
    for (int64_t k = 0; k < state_dim; ++k) state[r * state_dim + k] = state_init;
  }
}

class CudaEmbeddingCollectionImpl final : public CudaEmbeddingCollection {
 public:
  CudaEmbeddingCollectionImpl(const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
                              std::vector<uint64_t> table_ids,
                              std::vector<std::unique_ptr<DeviceRowCache>> caches)
      : options_(options),
        table_ids_(std::move(table_ids)),
        ctx_(ctx),
        caches_(std::move(caches)),
        ws_(ctx) {
    caches_.resize(options_.tables.size());
  }
  ~CudaEmbeddingCollectionImpl() override {
    if (uploaded_ != nullptr) {
      cudaEventSynchronize(uploaded_);
      cudaEventDestroy(uploaded_);
    }
  }

  absl::Status Init() {
    const int tables = num_tables();
    table_of_feature_.assign(options_.num_features, -1);
    for (int t = 0; t < tables; ++t) {
      for (int f : options_.tables[t].features) table_of_feature_[f] = t;
    }
    feature_column_.resize(options_.num_features);
    for (int f = 0; f < options_.num_features; ++f) {
      feature_column_[f] = output_dim_;
      output_dim_ += options_.tables[table_of_feature_[f]].dim;
    }
    weights_.resize(tables);
    state_.resize(tables);
    for (int t = 0; t < tables; ++t) {
      const TableConfig& table = options_.tables[t];
      const int64_t sd = RowStateDim(options_.optimizer.type, table.dim);
      if (caches_[t] != nullptr) continue;  // the rows live in the cache and its backing
      TESSERA_ASSIGN_OR_RETURN(
          weights_[t], Buffer::Allocate(Device::kCuda, DType::kF32, {table.num_rows, table.dim}));
      if (sd > 0) {
        TESSERA_ASSIGN_OR_RETURN(
            state_[t], Buffer::Allocate(Device::kCuda, DType::kF32, {table.num_rows, sd}));
      }
      const float state_init = options_.optimizer.type == RowOptimizerType::kRowWiseAdagrad
                                   ? options_.optimizer.adagrad_initial
                                   : 0.0f;
      InitTableKernel<<<GridFor(table.num_rows, 256), 256, 0, ComputeStream(ctx_)>>>(
          table.init, options_.seed, table_ids_.empty() ? static_cast<uint64_t>(t) : table_ids_[t],
          table.num_rows, table.dim, sd,
          state_init, weights_[t].data<float>(), sd > 0 ? state_[t].data<float>() : nullptr);
      TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("InitTableKernel");
    }
    TESSERA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    return CudaSynchronize(ctx_);
  }

  int64_t output_dim() const override { return output_dim_; }
  int64_t feature_column(int f) const override { return feature_column_[f]; }
  int num_tables() const override { return static_cast<int>(options_.tables.size()); }
  const TableConfig& table(int t) const override { return options_.tables[t]; }
  const EmbeddingCollectionOptions& options() const override { return options_; }
  float* device_weights(int t) override { return W(t); }
  float* device_state(int t) override { return S(t); }
  DeviceRowCache* cache(int t) override { return caches_[t].get(); }

  void Prefetch(const KeyedJagged& next) override {
    if (next.num_features != options_.num_features ||
        static_cast<int64_t>(next.offsets.size()) != next.num_bags() + 1 ||
        next.offsets.back() != static_cast<int64_t>(next.values.size())) {
      return;
    }
    for (int t = 0; t < num_tables(); ++t) {
      if (caches_[t] == nullptr) continue;
      TableIds(next, t, &cache_ids_);
      caches_[t]->Prefetch(cache_ids_);
    }
  }

  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    pending_ = false;
    // A step left open (a Forward without BackwardUpdate: evaluation) only read its rows.
    TESSERA_RETURN_IF_ERROR(EndCacheSteps(/*updated=*/false));
    // The checks of EmbeddingCollection::Forward, on the host copy of the batch.
    TESSERA_RETURN_IF_ERROR(embedding_internal::ValidateBatch(
        batch, options_, table_of_feature_, out, "CudaEmbeddingCollection::Forward"));
    const int64_t B = batch.batch_size;
    const int64_t n_off = static_cast<int64_t>(batch.offsets.size());
    const int64_t n_ids = static_cast<int64_t>(batch.values.size());
    const bool weighted = !batch.weights.empty();
    // Stage [offsets | ids | weights] in pinned memory, after the previous upload has left it.
    const size_t off_bytes = sizeof(int64_t) * n_off, id_bytes = sizeof(int64_t) * n_ids,
                 w_bytes = weighted ? sizeof(float) * n_ids : 0;
    TESSERA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(uploaded_));
    TESSERA_RETURN_IF_ERROR(staging_.Reserve(off_bytes + id_bytes + w_bytes));
    char* host = static_cast<char*>(staging_.data());
    std::memcpy(host, batch.offsets.data(), off_bytes);
    std::memcpy(host + off_bytes, batch.values.data(), id_bytes);
    if (weighted) std::memcpy(host + off_bytes + id_bytes, batch.weights.data(), w_bytes);
    TESSERA_RETURN_IF_ERROR(ResolveCached(batch, reinterpret_cast<int64_t*>(host + off_bytes)));
    TESSERA_RETURN_IF_ERROR(Grow(&d_offsets_, DType::kI64, n_off));
    TESSERA_RETURN_IF_ERROR(Grow(&d_ids_, DType::kI64, n_ids));
    if (weighted) TESSERA_RETURN_IF_ERROR(Grow(&d_weights_, DType::kF32, n_ids));
    TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx_, d_offsets_.raw(), host, off_bytes));
    TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx_, d_ids_.raw(), host + off_bytes, id_bytes));
    if (weighted) {
      TESSERA_RETURN_IF_ERROR(
          CudaCopyToDevice(ctx_, d_weights_.raw(), host + off_bytes + id_bytes, w_bytes));
    }
    TESSERA_CUDA_RETURN_IF_ERROR(cudaEventRecord(uploaded_, ComputeStream(ctx_)));

    batch_size_ = B;
    weighted_ = weighted;
    feature_ids_.resize(options_.num_features);
    for (int f = 0; f < options_.num_features; ++f) {
      feature_ids_[f] = batch.feature_end(f) - batch.feature_begin(f);
    }
    // One launch per distinct table dim (up to kMaxFusedFeatures features each), not one per
    // feature: the Criteo models' 26 features of one dim take one launch.
    std::vector<bool> done(options_.num_features, false);
    for (int f0 = 0; f0 < options_.num_features && B > 0; ++f0) {
      if (done[f0]) continue;
      const int64_t dim = options_.tables[table_of_feature_[f0]].dim;
      FusedLookupArgs a;
      a.offsets = d_offsets_.data<int64_t>();
      a.indices = d_ids_.data<int64_t>();
      a.per_id_weights = weighted ? d_weights_.data<float>() : nullptr;
      a.num_bags = B;
      a.dim = dim;
      a.out = out;
      a.out_stride = output_dim_;
      for (int f = f0; f < options_.num_features; ++f) {
        const int t = table_of_feature_[f];
        if (done[f] || options_.tables[t].dim != dim) continue;
        done[f] = true;
        const int k = a.num_features++;
        a.feature[k] = f;
        a.weights[k] = W(t);
        a.out_column[k] = feature_column_[f];
        a.pooling[k] = options_.tables[t].pooling;
        if (a.num_features == kMaxFusedFeatures) {
          TESSERA_RETURN_IF_ERROR(PooledLookupForwardFusedCuda(ctx_, a));
          a.num_features = 0;
        }
      }
      TESSERA_RETURN_IF_ERROR(PooledLookupForwardFusedCuda(ctx_, a));
    }
    pending_ = true;
    return absl::OkStatus();
  }

  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    if (!pending_) {
      return absl::FailedPreconditionError(
          "CudaEmbeddingCollection::BackwardUpdate: no Forward since the last update");
    }
    if (d_out == nullptr && batch_size_ > 0) {
      return absl::InvalidArgumentError("CudaEmbeddingCollection::BackwardUpdate: null d_out");
    }
    pending_ = false;
    if (batch_size_ == 0) return EndCacheSteps(/*updated=*/true);
    const int64_t B = batch_size_;
    // Tables of one dim go through one sort and one update launch (FusedBackwardUpdateTablesCuda,
    // up to kMaxFusedFeatures tables), instead of ~13 launches each; a group whose sort key
    // would not fit 64 bits falls back to one pass per table.
    std::vector<bool> done(num_tables(), false);
    for (int t0 = 0; t0 < num_tables(); ++t0) {
      if (done[t0]) continue;
      const int64_t dim = options_.tables[t0].dim;
      std::vector<int> group;
      for (int t = t0; t < num_tables() && group.size() < kMaxFusedFeatures; ++t) {
        if (!done[t] && options_.tables[t].dim == dim) group.push_back(t);
      }
      for (int t : group) done[t] = true;
      TESSERA_RETURN_IF_ERROR(BackwardGroup(group, d_out, lr, step, B));
    }
    // The cached rows were updated by the kernels just queued: dirty. Their write-back (a
    // later Resolve or Flush) gathers them on the same stream, after the updates.
    return EndCacheSteps(/*updated=*/true);
  }

  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* weights_out,
                        float* state_out) override {
    TESSERA_RETURN_IF_ERROR(CheckRows("ReadRows", t, begin, count));
    const int64_t dim = options_.tables[t].dim, sd = StateDim(t);
    if (count > 0 && weights_out == nullptr) {
      return absl::InvalidArgumentError("CudaEmbeddingCollection::ReadRows: null weights_out");
    }
    // A cached table: the dirty slots are written back first, then the backing is read.
    if (caches_[t] != nullptr) return caches_[t]->ReadRows(begin, count, weights_out, state_out);
    TESSERA_RETURN_IF_ERROR(CudaCopyToHost(
        ctx_, weights_out, weights_[t].data<float>() + begin * dim, sizeof(float) * count * dim));
    if (state_out != nullptr && sd > 0) {
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx_, state_out, state_[t].data<float>() + begin * sd,
                                             sizeof(float) * count * sd));
    }
    return absl::OkStatus();
  }

  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* weights,
                         const float* state) override {
    TESSERA_RETURN_IF_ERROR(CheckRows("WriteRows", t, begin, count));
    const int64_t dim = options_.tables[t].dim, sd = StateDim(t);
    if (count > 0 && weights == nullptr) {
      return absl::InvalidArgumentError("CudaEmbeddingCollection::WriteRows: null weights");
    }
    if (caches_[t] != nullptr) return caches_[t]->WriteRows(begin, count, weights, state);
    TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx_, weights_[t].data<float>() + begin * dim, weights,
                                             sizeof(float) * count * dim));
    if (state != nullptr && sd > 0) {
      TESSERA_RETURN_IF_ERROR(CudaCopyToDevice(ctx_, state_[t].data<float>() + begin * sd, state,
                                               sizeof(float) * count * sd));
    }
    // The sources are the caller's pageable memory: finish before returning.
    return CudaSynchronize(ctx_);
  }

 private:
  // The sources (features) of table t and their host id counts, appended.
  void AppendSources(int t, const float* d_out, int64_t B) {
    for (int f : options_.tables[t].features) {
      BagGradients g;
      g.offsets = d_offsets_.data<int64_t>() + static_cast<int64_t>(f) * B;
      g.indices = d_ids_.data<int64_t>();
      g.per_id_weights = weighted_ ? d_weights_.data<float>() : nullptr;
      g.num_bags = B;
      g.grad = d_out + feature_column_[f];
      g.grad_stride = output_dim_;
      sources_.push_back(g);
      counts_.push_back(feature_ids_[f]);
    }
  }

  RowUpdateArgs UpdateArgs(int t, float lr, int64_t step) {
    RowUpdateArgs args;
    args.weights = W(t);
    args.state = S(t);
    args.dim = options_.tables[t].dim;
    args.optimizer = options_.optimizer;
    args.lr = lr;
    args.step = step;
    return args;
  }

  int SlotBits(int t) const {
    const int64_t slots =
        caches_[t] != nullptr ? caches_[t]->cache_rows() : options_.tables[t].num_rows;
    return std::max(1, BitWidth(static_cast<uint64_t>(slots - 1)));
  }

  float* W(int t) {
    return caches_[t] != nullptr ? static_cast<float*>(caches_[t]->weight_data())
                                 : weights_[t].data<float>();
  }
  float* S(int t) {
    if (caches_[t] != nullptr) return caches_[t]->state();
    return state_[t].empty() ? nullptr : state_[t].data<float>();
  }

  // The ids of table t's features in `batch`, feature after feature.
  void TableIds(const KeyedJagged& batch, int t, std::vector<int64_t>* ids) const {
    ids->clear();
    for (int f : options_.tables[t].features) {
      ids->insert(ids->end(), batch.values.begin() + batch.feature_begin(f),
                  batch.values.begin() + batch.feature_end(f));
    }
  }

  // Replaces each cached table's ids in `staged_ids` (the pinned copy of batch.values) by the
  // cache slots Resolve gives them (fetching misses and writing back victims).
  absl::Status ResolveCached(const KeyedJagged& batch, int64_t* staged_ids) {
    for (int t = 0; t < num_tables(); ++t) {
      if (caches_[t] == nullptr) continue;
      TableIds(batch, t, &cache_ids_);
      cache_slots_.resize(cache_ids_.size());
      cache_step_open_ = true;
      absl::Status st = caches_[t]->Resolve(cache_ids_, absl::MakeSpan(cache_slots_));
      if (!st.ok()) return st;  // names the table
      int64_t k = 0;
      for (int f : options_.tables[t].features) {
        for (int64_t j = batch.feature_begin(f); j < batch.feature_end(f); ++j) {
          staged_ids[j] = cache_slots_[k++];
        }
      }
    }
    return absl::OkStatus();
  }

  // Ends the cached tables' step, if one is open.
  absl::Status EndCacheSteps(bool updated) {
    if (!cache_step_open_) return absl::OkStatus();
    cache_step_open_ = false;
    for (auto& c : caches_) {
      if (c == nullptr) continue;
      TESSERA_RETURN_IF_ERROR(updated ? c->EndStep() : c->EndReadOnlyStep());
    }
    return absl::OkStatus();
  }

  // The fused backward of the tables in `group` (all of one dim).
  absl::Status BackwardGroup(const std::vector<int>& group, const float* d_out, float lr,
                             int64_t step, int64_t B) {
    sources_.clear();
    counts_.clear();
    info_.clear();
    int slot_bits = 1;
    int64_t n = 0;
    for (size_t k = 0; k < group.size(); ++k) {
      const int t = group[k];
      const size_t first = sources_.size();
      AppendSources(t, d_out, B);
      for (size_t s = first; s < sources_.size(); ++s) {
        info_.push_back({static_cast<int>(k), options_.tables[t].pooling});
        n += counts_[s];
      }
      slot_bits = std::max(slot_bits, SlotBits(t));
    }
    const int num = static_cast<int>(group.size());
    if (num > 1 && MultiTableKeysFit(n, num, slot_bits)) {
      TableGroupUpdate u;
      u.args = UpdateArgs(group[0], lr, step);
      u.num_tables = num;
      u.slot_bits = slot_bits;
      for (int k = 0; k < num; ++k) {
        u.weights[k] = W(group[k]);
        u.state[k] = S(group[k]);
      }
      absl::Status st = FusedBackwardUpdateTablesCuda(ctx_, sources_, counts_, info_, u, &ws_);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("tables ", TableLabel(options_.tables[group[0]],
                                                                          group[0]),
                                                    " and ", num - 1, " more of dim ",
                                                    u.args.dim, ": ", st.message()));
      }
      return absl::OkStatus();
    }
    for (int t : group) {  // one table, or keys too wide for one sort
      sources_.clear();
      counts_.clear();
      AppendSources(t, d_out, B);
      absl::Status st =
          FusedBackwardUpdateCuda(ctx_, sources_, counts_, options_.tables[t].pooling,
                                  SlotBits(t), UpdateArgs(t, lr, step), &ws_);
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat(TableLabel(options_.tables[t], t), ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }

  int64_t StateDim(int t) const {
    return RowStateDim(options_.optimizer.type, options_.tables[t].dim);
  }

  absl::Status CheckRows(const char* what, int t, int64_t begin, int64_t count) const {
    if (t < 0 || t >= num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaEmbeddingCollection::", what, ": table ", t, " of ", num_tables()));
    }
    const int64_t rows = options_.tables[t].num_rows;
    if (begin < 0 || count < 0 || begin > rows - count) {
      return absl::InvalidArgumentError(absl::StrCat(TableLabel(options_.tables[t], t), ": ", what,
                                                     " of rows [", begin, ", ", begin + count,
                                                     ") is outside [0, ", rows, ")"));
    }
    return absl::OkStatus();
  }

  // Grows a device scratch buffer to n elements (never shrinks). The old buffer may still be
  // read by queued kernels: cudaFree (Buffer's destructor) waits for the device first.
  absl::Status Grow(Buffer* b, DType dtype, int64_t n) {
    n = std::max<int64_t>(n, 1);
    if (!b->empty() && b->numel() >= n) return absl::OkStatus();
    TESSERA_ASSIGN_OR_RETURN(*b, Buffer::Allocate(Device::kCuda, dtype, {n + n / 2}));
    return absl::OkStatus();
  }

  EmbeddingCollectionOptions options_;
  std::vector<uint64_t> table_ids_;  // InitRow ids; empty: the table index
  DeviceContext ctx_;
  std::vector<int> table_of_feature_;
  std::vector<int64_t> feature_column_;
  int64_t output_dim_ = 0;
  std::vector<Buffer> weights_, state_;
  std::vector<std::unique_ptr<DeviceRowCache>> caches_;  // per table; null: in weights_/state_
  std::vector<int64_t> cache_ids_, cache_slots_;
  bool cache_step_open_ = false;

  PinnedBuffer staging_;
  cudaEvent_t uploaded_ = nullptr;
  Buffer d_offsets_, d_ids_, d_weights_;
  bool pending_ = false, weighted_ = false;
  int64_t batch_size_ = 0;
  std::vector<int64_t> feature_ids_;
  std::vector<BagGradients> sources_;
  std::vector<int64_t> counts_;
  std::vector<TableSourceInfo> info_;
  CudaEmbeddingWorkspace ws_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaEmbeddingCollection>> CreateCudaEmbeddingCollection(
    const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
    const std::vector<uint64_t>& table_ids,
    std::vector<std::unique_ptr<DeviceRowCache>> caches) {
  TESSERA_RETURN_IF_ERROR(embedding_internal::ValidateOptions(options, "CudaEmbeddingCollection"));
  if (!caches.empty() && caches.size() != options.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CreateCudaEmbeddingCollection: ",
                                                   caches.size(), " cache entries for ",
                                                   options.tables.size(), " tables"));
  }
  for (size_t t = 0; t < caches.size(); ++t) {
    const DeviceRowCache* c = caches[t].get();
    if (c == nullptr) continue;
    const TableConfig& table = options.tables[t];
    const int64_t sd = RowStateDim(options.optimizer.type, table.dim);
    if (c->num_rows() != table.num_rows || c->dim() != table.dim || c->state_dim() != sd ||
        c->weight_dtype() != RowDtype::kF32 || !c->options().ctx.is_cuda() ||
        c->options().ctx.compute_stream != ctx.compute_stream) {
      return absl::InvalidArgumentError(absl::StrCat(
          TableLabel(table, static_cast<int>(t)), ": its device cache does not match the table "
          "(want ", table.num_rows, " rows, dim ", table.dim, ", state_dim ", sd,
          ", fp32 rows, on this context's stream; got ", c->num_rows(), " rows, dim ", c->dim(),
          ", state_dim ", c->state_dim(), ", ", RowDtypeName(c->weight_dtype()),
          c->options().ctx.is_cuda() ? "" : ", on the host",
          c->options().ctx.compute_stream == ctx.compute_stream ? "" : ", another stream", ")"));
    }
  }
  if (!table_ids.empty() && table_ids.size() != options.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateCudaEmbeddingCollection: ", table_ids.size(), " table ids for ",
        options.tables.size(), " tables"));
  }
  if (!ctx.is_cuda() || ctx.compute_stream == nullptr) {
    return absl::InvalidArgumentError(
        "CreateCudaEmbeddingCollection: needs a CUDA DeviceContext (CudaContext::context())");
  }
  auto c = std::make_unique<CudaEmbeddingCollectionImpl>(options, ctx, table_ids,
                                                         std::move(caches));
  TESSERA_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<CudaEmbeddingCollection>(std::move(c));
}

}  // namespace tessera
