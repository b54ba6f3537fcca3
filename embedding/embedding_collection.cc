#include "embedding/embedding_collection.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "core/status.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/internal/collection_checks.h"

namespace tessera {
namespace {

using embedding_internal::TableLabel;

}  // namespace

InMemoryRowStoreOptions TableRowStoreOptions(const TableConfig& table, int t,
                                             const RowOptimizerOptions& optimizer, uint64_t seed) {
  InMemoryRowStoreOptions so;
  so.num_rows = table.num_rows;
  so.dim = table.dim;
  so.state_dim = RowStateDim(optimizer.type, table.dim);
  so.state_init =
      optimizer.type == RowOptimizerType::kRowWiseAdagrad ? optimizer.adagrad_initial : 0.0f;
  so.init = table.init;
  so.seed = seed;
  so.table_id = static_cast<uint64_t>(t);
  so.name = table.name;
  so.dtype = table.storage.dtype;
  return so;
}

DynamicRowStoreOptions DynamicTableStoreOptions(const TableConfig& table, int t,
                                                const RowOptimizerOptions& optimizer,
                                                uint64_t seed) {
  const InMemoryRowStoreOptions so = TableRowStoreOptions(table, t, optimizer, seed);
  DynamicRowStoreOptions d;
  d.capacity = table.num_rows;
  d.dim = so.dim;
  d.state_dim = so.state_dim;
  d.state_init = so.state_init;
  d.init = so.init;
  d.seed = so.seed;
  d.table_id = so.table_id;
  d.name = so.name;
  d.dtype = so.dtype;
  d.dynamic = table.dynamic;
  return d;
}

absl::StatusOr<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::Create(
    const EmbeddingCollectionOptions& options, const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(embedding_internal::ValidateOptions(options, "EmbeddingCollection"));
  std::vector<std::unique_ptr<RowStore>> stores;
  for (int t = 0; t < static_cast<int>(options.tables.size()); ++t) {
    const TableConfig& table = options.tables[t];
    if (table.dynamic.enabled) {
      TESSERA_ASSIGN_OR_RETURN(auto store, DynamicRowStore::Create(DynamicTableStoreOptions(
                                               table, t, options.optimizer, options.seed)));
      stores.push_back(std::move(store));
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(auto store, CreateInMemoryRowStore(TableRowStoreOptions(
                                             table, t, options.optimizer, options.seed)));
    stores.push_back(std::move(store));
  }
  return CreateWithStores(options, std::move(stores), ctx);
}

absl::StatusOr<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::CreateWithStores(
    const EmbeddingCollectionOptions& options, std::vector<std::unique_ptr<RowStore>> stores,
    const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(embedding_internal::ValidateOptions(options, "EmbeddingCollection"));
  if (stores.size() != options.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EmbeddingCollection: ", stores.size(), " stores for ", options.tables.size(), " tables"));
  }
  for (int t = 0; t < static_cast<int>(stores.size()); ++t) {
    const TableConfig& table = options.tables[t];
    const RowStore* s = stores[t].get();
    const int64_t state_dim = RowStateDim(options.optimizer.type, table.dim);
    if (s == nullptr || s->num_rows() != table.num_rows || s->dim() != table.dim ||
        s->state_dim() != state_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(TableLabel(table, t), ": store does not match the table (want ",
                       table.num_rows, " rows, dim ", table.dim, ", state_dim ", state_dim,
                       s == nullptr ? "; got null)" : "; got ",
                       s == nullptr ? ""
                                    : absl::StrCat(s->num_rows(), " rows, dim ", s->dim(),
                                                   ", state_dim ", s->state_dim(), ")")));
    }
    if (s->weight_dtype() != table.storage.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          TableLabel(table, t), ": store holds ", RowDtypeName(s->weight_dtype()),
          " weights but the table's storage.dtype is ", RowDtypeName(table.storage.dtype)));
    }
  }
  std::unique_ptr<EmbeddingCollection> c(new EmbeddingCollection());
  c->options_ = options;
  c->ctx_ = ctx;
  c->stores_ = std::move(stores);
  for (const auto& store : c->stores_) {
    c->any_tiered_ = c->any_tiered_ || dynamic_cast<const TieredRowStore*>(store.get()) != nullptr;
  }
  c->table_of_feature_.assign(options.num_features, -1);
  for (int t = 0; t < static_cast<int>(options.tables.size()); ++t) {
    for (int f : options.tables[t].features) c->table_of_feature_[f] = t;
  }
  c->feature_column_.resize(options.num_features);
  for (int f = 0; f < options.num_features; ++f) {
    c->feature_column_[f] = c->output_dim_;
    c->output_dim_ += options.tables[c->table_of_feature_[f]].dim;
  }
  return c;
}

void EmbeddingCollection::set_training(bool training) {
  for (auto& store : stores_) {
    if (auto* d = dynamic_cast<DynamicRowStore*>(store.get())) d->set_admitting(training);
  }
}

absl::Status EmbeddingCollection::EndPendingStep(bool rows_updated) {
  if (!pending_step_) return absl::OkStatus();
  pending_step_ = false;
  return ForEachTable([this, rows_updated](int t) {
    return rows_updated ? stores_[t]->EndStep() : stores_[t]->EndReadOnlyStep();
  });
}

absl::Status EmbeddingCollection::ForEachTable(const std::function<absl::Status(int)>& fn) {
  const int n = num_tables();
  // Tables run concurrently only when a store does real work per call (the tier's Resolve,
  // Prefetch and EndStep: hash lookups, evictions, staging, write-back): the stores are
  // independent objects, and running them side by side keeps both cores busy instead of one
  // thread working while the other spins. In-memory stores stay on the calling thread.
  table_status_.assign(n, absl::OkStatus());
  if (!any_tiered_ || n == 1) {
    for (int t = 0; t < n; ++t) TESSERA_RETURN_IF_ERROR(fn(t));
    return absl::OkStatus();
  }
  ParallelFor(n, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) table_status_[t] = fn(static_cast<int>(t));
  });
  // The first failing table, in table order (the same error whatever the thread count).
  for (const absl::Status& st : table_status_) TESSERA_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

bool EmbeddingCollection::bf16_outputs() const {
  return std::all_of(options_.tables.begin(), options_.tables.end(),
                     [](const TableConfig& t) { return t.output_dtype == RowDtype::kBf16; });
}

void EmbeddingCollection::GrowBf16Scratch() {
  if (out_bf16_.size() >= static_cast<size_t>(batch_size_ * output_dim_)) return;
  if (std::any_of(options_.tables.begin(), options_.tables.end(),
                  [](const TableConfig& t) { return t.output_dtype == RowDtype::kBf16; })) {
    out_bf16_.resize(batch_size_ * output_dim_);
  }
}

absl::Status EmbeddingCollection::CheckBf16Outputs(const char* who) const {
  for (int t = 0; t < num_tables(); ++t) {
    const TableConfig& table = options_.tables[t];
    if (table.output_dtype != RowDtype::kBf16) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": ", TableLabel(table, t), " has output_dtype ", RowDtypeName(table.output_dtype),
          "; the bf16 hand-off needs every table's output_dtype bf16"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingCollection::Forward(const KeyedJagged& batch, float* out) {
  return ForwardInto("EmbeddingCollection::Forward", batch, out, nullptr);
}

absl::Status EmbeddingCollection::ForwardBf16(const KeyedJagged& batch, uint16_t* out) {
  constexpr char kWho[] = "EmbeddingCollection::ForwardBf16";
  TESSERA_RETURN_IF_ERROR(CheckBf16Outputs(kWho));
  return ForwardInto(kWho, batch, nullptr, out);
}

absl::Status EmbeddingCollection::ForwardInto(const char* who, const KeyedJagged& batch,
                                              float* out, uint16_t* out16) {
  // A step still pending here had no BackwardUpdate (evaluation): its rows were only read.
  TESSERA_RETURN_IF_ERROR(EndPendingStep(/*rows_updated=*/false));
  TESSERA_RETURN_IF_ERROR(embedding_internal::ValidateBatch(
      batch, options_, table_of_feature_,
      out16 != nullptr ? static_cast<const void*>(out16) : out, who));
  const int64_t B = batch.batch_size;

  batch_size_ = B;
  offsets_.assign(batch.offsets.begin(), batch.offsets.end());
  id_weights_.assign(batch.weights.begin(), batch.weights.end());
  slots_.resize(batch.values.size());
  pending_step_ = true;
  table_ids_.resize(num_tables());
  table_slots_.resize(num_tables());
  // One Resolve per table and step: a tiered store may move rows between Resolve calls.
  TESSERA_RETURN_IF_ERROR(ForEachTable([&](int t) -> absl::Status {
    const TableConfig& table = options_.tables[t];
    RowStore& store = *stores_[t];
    if (table.features.size() == 1) {
      const int f = table.features[0];
      const int64_t fb = batch.feature_begin(f), n = batch.feature_end(f) - fb;
      return store.Resolve(absl::MakeConstSpan(batch.values.data() + fb, n),
                           absl::MakeSpan(slots_.data() + fb, n));
    }
    std::vector<int64_t>& ids = table_ids_[t];
    std::vector<int64_t>& table_slots = table_slots_[t];
    ids.clear();
    for (int f : table.features) {
      ids.insert(ids.end(), batch.values.begin() + batch.feature_begin(f),
                 batch.values.begin() + batch.feature_end(f));
    }
    table_slots.resize(ids.size());
    TESSERA_RETURN_IF_ERROR(store.Resolve(ids, absl::MakeSpan(table_slots)));
    int64_t k = 0;
    for (int f : table.features) {
      for (int64_t j = batch.feature_begin(f); j < batch.feature_end(f); ++j) {
        slots_[j] = table_slots[k++];
      }
    }
    return absl::OkStatus();
  }));
  // Tables costliest first (ids in this batch), for RunTables and again for BackwardUpdate.
  table_cost_.assign(num_tables(), 0);
  for (int t = 0; t < num_tables(); ++t) {
    for (int f : options_.tables[t].features) {
      table_cost_[t] += batch.feature_end(f) - batch.feature_begin(f);
    }
  }
  table_order_.resize(num_tables());
  std::iota(table_order_.begin(), table_order_.end(), 0);
  std::stable_sort(table_order_.begin(), table_order_.end(),
                   [&](int a, int b) { return table_cost_[a] > table_cost_[b]; });
  if (out16 == nullptr) GrowBf16Scratch();
  return RunTables([&](int t, int) -> absl::Status {
    const TableConfig& table = options_.tables[t];
    RowStore& store = *stores_[t];
    for (int f : table.features) {
      PooledLookupArgs args;
      args.weights = store.weight_data();
      args.weight_dtype = store.weight_dtype();
      args.dim = table.dim;
      args.offsets = batch.feature_offsets(f);
      args.indices = slots_.data();
      args.per_id_weights = batch.weights.empty() ? nullptr : batch.weights.data();
      args.num_bags = B;
      args.pooling = table.pooling;
      args.out_stride = output_dim_;
      if (out16 != nullptr) {  // the bf16 hand-off: straight into the caller's bf16 output
        args.out_bf16 = out16 + feature_column_[f];
        TESSERA_RETURN_IF_ERROR(PooledLookupForward(ctx_, args));
        continue;
      }
      if (table.output_dtype != RowDtype::kBf16) {
        args.out = out + feature_column_[f];
        TESSERA_RETURN_IF_ERROR(PooledLookupForward(ctx_, args));
        continue;
      }
      // bf16 outputs read as fp32 by the caller: widened into `out` (exact).
      uint16_t* pooled16 = out_bf16_.data() + feature_column_[f];
      args.out_bf16 = pooled16;
      TESSERA_RETURN_IF_ERROR(PooledLookupForward(ctx_, args));
      for (int64_t b = 0; b < B; ++b) {
        RowValuesToFloat(RowDtype::kBf16, pooled16 + b * output_dim_, table.dim,
                         out + b * output_dim_ + feature_column_[f]);
      }
    }
    return absl::OkStatus();
  });
}

// The fewest ids a table needs to run alone on all threads (RunTables): below it its lookup and
// update take less than the fork and join of their parallel loops saves (~10 ns an id; a sleeping
// pool, ScaledMinChunk when it spins).
constexpr int64_t kSplitTableMinIds = 16384;

absl::Status EmbeddingCollection::RunTables(const std::function<absl::Status(int, int)>& fn) {
  const int n = num_tables();
  // Whole tables per thread when the stores are host memory: a table's lookup or update is a
  // few hundred microseconds of memory-bound work, too little to split across threads without
  // the fork and join costing more than the second core gives (mlperf-mini at 2 threads ran
  // both phases slower than at 1). Each table's result does not depend on the thread count, so
  // the bits are those of the tables one after the other.
  const int threads = std::min(NumThreads(), n);
  if (ctx_.is_cuda() || any_tiered_ || threads <= 1) {
    if (thread_ws_.empty()) thread_ws_.resize(1);
    for (int t = 0; t < n; ++t) TESSERA_RETURN_IF_ERROR(fn(t, 0));
    return absl::OkStatus();
  }
  if (static_cast<int>(thread_ws_.size()) < threads) thread_ws_.resize(threads);
  table_status_.assign(n, absl::OkStatus());
  // A table that holds more than its share of the ids (1 / threads of them) would leave the other
  // threads idle while it runs alone: such tables (the costliest first in table_order_) run one
  // at a time on the calling thread, where their kernels split bags and runs across all threads
  // (embedding/pooled_lookup_cpu.cc); the others share the threads table by table. The kernels'
  // results do not depend on the thread count, so neither do the bits.
  int64_t total = 0;
  for (int t = 0; t < n; ++t) total += table_cost_[t];
  int split = 0;
  while (split < n && table_cost_[table_order_[split]] * threads > total &&
         table_cost_[table_order_[split]] >= ScaledMinChunk(kSplitTableMinIds)) {
    const int t = table_order_[split];
    table_status_[t] = fn(t, 0);
    total -= table_cost_[t];
    ++split;
  }
  ParallelForDynamic(n - split, [&](int64_t k, int thread) {
    const int t = table_order_[split + k];
    table_status_[t] = fn(t, thread);
  });
  // The first failing table, in table order (the same error whatever the thread count).
  for (const absl::Status& st : table_status_) TESSERA_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

void EmbeddingCollection::Prefetch(const KeyedJagged& next) {
  if (next.num_features != options_.num_features ||
      static_cast<int64_t>(next.offsets.size()) != next.num_bags() + 1 ||
      next.offsets.back() != static_cast<int64_t>(next.values.size())) {
    return;
  }
  prefetch_ids_.resize(num_tables());
  ForEachTable([&](int t) {
    const TableConfig& table = options_.tables[t];
    if (table.features.size() == 1) {
      const int f = table.features[0];
      const int64_t fb = next.feature_begin(f);
      stores_[t]->Prefetch(absl::MakeConstSpan(next.values.data() + fb, next.feature_end(f) - fb));
      return absl::OkStatus();
    }
    std::vector<int64_t>& ids = prefetch_ids_[t];
    ids.clear();
    for (int f : table.features) {
      ids.insert(ids.end(), next.values.begin() + next.feature_begin(f),
                 next.values.begin() + next.feature_end(f));
    }
    stores_[t]->Prefetch(ids);
    return absl::OkStatus();
  }).IgnoreError();
}

absl::Status EmbeddingCollection::BackwardUpdate(const float* d_out, float lr, int64_t step) {
  return UpdateFrom("EmbeddingCollection::BackwardUpdate", d_out, nullptr, lr, step);
}

absl::Status EmbeddingCollection::BackwardUpdateBf16(const uint16_t* d_out, float lr,
                                                     int64_t step) {
  constexpr char kWho[] = "EmbeddingCollection::BackwardUpdateBf16";
  TESSERA_RETURN_IF_ERROR(CheckBf16Outputs(kWho));
  return UpdateFrom(kWho, nullptr, d_out, lr, step);
}

absl::Status EmbeddingCollection::UpdateFrom(const char* who, const float* d_out,
                                             const uint16_t* d_out16, float lr, int64_t step) {
  if (!pending_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no Forward since the last update"));
  }
  if (d_out == nullptr && d_out16 == nullptr && batch_size_ > 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null d_out"));
  }
  // (A Forward of the bf16 API did not grow it.)
  if (d_out16 == nullptr) GrowBf16Scratch();
  TESSERA_RETURN_IF_ERROR(RunTables([&](int t, int thread) -> absl::Status {
    const TableConfig& table = options_.tables[t];
    RowStore& store = *stores_[t];
    ThreadScratch& scratch = thread_ws_[thread];
    std::vector<BagGradients>& sources = scratch.sources;
    sources.clear();
    for (int f : table.features) {
      BagGradients g;
      g.offsets = offsets_.data() + static_cast<int64_t>(f) * batch_size_;
      g.indices = slots_.data();
      g.per_id_weights = id_weights_.empty() ? nullptr : id_weights_.data();
      g.num_bags = batch_size_;
      g.grad_stride = output_dim_;
      if (d_out16 != nullptr) {  // the bf16 hand-off: read in place
        g.grad_bf16 = d_out16 + feature_column_[f];
      } else if (table.output_dtype == RowDtype::kBf16) {
        // The gradient of a bf16 output is bf16: this table's columns of d_out, rounded.
        uint16_t* g16 = out_bf16_.data() + feature_column_[f];
        const float* src = d_out + feature_column_[f];
        for (int64_t b = 0; b < batch_size_; ++b) {
          RowValuesFromFloat(RowDtype::kBf16, src + b * output_dim_, table.dim,
                             g16 + b * output_dim_);
        }
        g.grad_bf16 = g16;
      } else {
        g.grad = d_out + feature_column_[f];
      }
      sources.push_back(g);
    }
    RowUpdateArgs args;
    args.weights = store.weight_data();
    args.weight_dtype = store.weight_dtype();
    args.state = store.state();
    args.dim = table.dim;
    args.optimizer = options_.optimizer;
    args.lr = lr;
    args.step = step;
    args.rounding = table.storage.rounding;
    args.rounding_seed = options_.seed;
    absl::Status st = FusedBackwardUpdate(ctx_, sources, table.pooling, args, &scratch.ws);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(TableLabel(table, t), ": ", st.message()));
    }
    return absl::OkStatus();
  }));
  return EndPendingStep(/*rows_updated=*/true);
}

}  // namespace tessera
