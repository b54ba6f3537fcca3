// DataParallelTables (data_parallel.h).
#include "sharding/internal/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace tessera::internal {

int DataParallelTables::Add(int t, std::unique_ptr<RowStore> store) {
  tables_.push_back({t, std::move(store)});
  return static_cast<int>(tables_.size()) - 1;
}

absl::Status DataParallelTables::Forward(const KeyedJagged& batch, const LocalStep& local,
                                         bool weighted, float* out) {
  const auto& co = l_.options.collection;
  const int64_t b = batch.batch_size, od = l_.output_dim;
  slots_.resize(batch.values.size());
  for (const Table& d : tables_) {
    const TableConfig& cfg = co.tables[d.table];
    for (int f : cfg.features) {
      const int64_t fb = batch.feature_begin(f), nv = batch.feature_end(f) - fb;
      TESSERA_RETURN_IF_ERROR(d.store->Resolve(absl::MakeConstSpan(batch.values.data() + fb, nv),
                                               absl::MakeSpan(slots_.data() + fb, nv)));
    }
  }
  // One copy of every data-parallel feature's slots into ctx's memory (none on the CPU).
  if (tables_.empty()) return absl::OkStatus();
  TESSERA_ASSIGN_OR_RETURN(ctx_slots_,
                           Mirror(l_.ctx, slots_, &slots_mirror_, "the data-parallel slots"));
  for (const Table& d : tables_) {
    const TableConfig& cfg = co.tables[d.table];
    RowStore& store = *d.store;
    for (int f : cfg.features) {
      PooledLookupArgs a;
      a.weights = store.weight_data();
      a.weight_dtype = store.weight_dtype();
      a.dim = cfg.dim;
      a.offsets = local.ctx_offsets + static_cast<int64_t>(f) * b;
      a.indices = ctx_slots_;
      a.per_id_weights = weighted ? local.ctx_id_weights : nullptr;
      a.num_bags = b;
      a.pooling = cfg.pooling;
      a.out = out + l_.feature_column[f];
      a.out_stride = od;
      if (b > 0) TESSERA_RETURN_IF_ERROR(PooledLookupForward(l_.ctx, a));
    }
  }
  return absl::OkStatus();
}

absl::Status DataParallelTables::BackwardUpdate(const LocalStep& local, const float* d_out,
                                                float lr, int64_t step) {
  if (tables_.empty()) return absl::OkStatus();
  const auto& tables = l_.options.collection.tables;
  const int64_t batch = local.batch;
  // Dense [rows, dim + 1] per table: the summed gradient and, last, how many ranks touched the
  // row, so that exactly the rows some rank saw get an update (as one rank would).
  int64_t total = 0;
  std::vector<int64_t> base(tables_.size());
  for (size_t i = 0; i < tables_.size(); ++i) {
    base[i] = total;
    total += tables[tables_[i].table].num_rows * (tables[tables_[i].table].dim + 1);
  }
  // Zero between steps: cleared row by row below after the update (the rows the all-reduce made
  // nonzero are exactly those with a nonzero count), so only the first step allocates.
  std::vector<float>& buf = buf_;
  if (static_cast<int64_t>(buf.size()) != total) buf.assign(total, 0.0f);
  // An error part way leaves rows set: drop the buffer then, so the next step starts from zero.
  struct DropOnError {
    std::vector<float>* buf;
    bool done = false;
    ~DropOnError() {
      if (!done) buf->clear();
    }
  } guard{&buf};
  std::vector<int64_t> uslots;
  std::vector<float> grads;
  for (size_t i = 0; i < tables_.size(); ++i) {
    const TableConfig& cfg = tables[tables_[i].table];
    std::vector<BagGradients> sources;
    for (int f : cfg.features) {
      BagGradients g;
      g.offsets = local.ctx_offsets + static_cast<int64_t>(f) * batch;
      g.indices = ctx_slots_;
      g.per_id_weights = local.ctx_id_weights;
      g.num_bags = batch;
      g.grad = d_out + l_.feature_column[f];
      g.grad_stride = l_.output_dim;
      if (batch > 0) sources.push_back(g);
    }
    if (sources.empty()) continue;
    TESSERA_RETURN_IF_ERROR(
        AggregateRowGradients(l_.ctx, sources, cfg.dim, cfg.pooling, &ws_, &uslots, &grads));
    // In-memory stores: slot == row.
    for (size_t u = 0; u < uslots.size(); ++u) {
      float* row = buf.data() + base[i] + uslots[u] * (cfg.dim + 1);
      std::memcpy(row, grads.data() + u * cfg.dim, cfg.dim * sizeof(float));
      row[cfg.dim] = 1.0f;
    }
  }
  TESSERA_RETURN_IF_ERROR(l_.world->AllReduce(buf.data(), total, ReduceOp::kSum));
  for (size_t i = 0; i < tables_.size(); ++i) {
    const TableConfig& cfg = tables[tables_[i].table];
    std::vector<int64_t> rows;
    std::vector<float> g;
    for (int64_t r = 0; r < cfg.num_rows; ++r) {
      float* row = buf.data() + base[i] + r * (cfg.dim + 1);
      if (row[cfg.dim] == 0.0f) continue;
      rows.push_back(r);
      g.insert(g.end(), row, row + cfg.dim);
      std::fill(row, row + cfg.dim + 1, 0.0f);
    }
    if (rows.empty()) continue;
    RowStore& store = *tables_[i].store;
    std::vector<int64_t> slots(rows.size());
    TESSERA_RETURN_IF_ERROR(store.Resolve(rows, absl::MakeSpan(slots)));
    RowUpdateArgs a;
    a.weights = store.weight_data();
    a.weight_dtype = store.weight_dtype();
    a.rounding = cfg.storage.rounding;
    a.rounding_seed = l_.options.collection.seed;
    a.state = store.state();
    a.dim = cfg.dim;
    a.optimizer = l_.options.collection.optimizer;
    a.lr = lr;
    a.step = step;
    const int64_t count = static_cast<int64_t>(slots.size());
    TESSERA_ASSIGN_OR_RETURN(const int64_t* ctx_slots,
                             Mirror(l_.ctx, slots, &update_slots_, "the data-parallel rows"));
    TESSERA_ASSIGN_OR_RETURN(const float* ctx_g,
                             Mirror(l_.ctx, g, &update_grads_, "the data-parallel gradients"));
    TESSERA_RETURN_IF_ERROR(
        ApplyRowUpdates(l_.ctx, absl::MakeConstSpan(ctx_slots, count), ctx_g, a));
  }
  guard.done = true;
  return absl::OkStatus();
}

absl::Status DataParallelTables::EndStep() {
  for (Table& d : tables_) TESSERA_RETURN_IF_ERROR(d.store->EndStep());
  return absl::OkStatus();
}

absl::Status DataParallelTables::EndReadOnlyStep() {
  for (Table& d : tables_) TESSERA_RETURN_IF_ERROR(d.store->EndReadOnlyStep());
  return absl::OkStatus();
}

}  // namespace tessera::internal
