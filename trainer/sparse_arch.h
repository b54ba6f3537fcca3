// SparseArch: the embedding tables as the training loop sees them, whether they live in this
// process (LocalSparseArch over embedding/EmbeddingCollection) or are sharded over ranks
// (sharding/ShardedEmbeddingCollection). Forward writes each sample's pooled vectors,
// features side by side, into a [batch, output_dim()] row; BackwardUpdate applies the fused
// optimizer from the gradient in the same layout. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/keyed_jagged.h"
#include "embedding/dynamic_row_store.h"
#include "embedding/embedding_collection.h"

namespace tessera {

class SparseArch {
 public:
  virtual ~SparseArch() = default;
  virtual int64_t output_dim() const = 0;
  // Pooled lookup of the local batch into out [batch, output_dim()].
  virtual absl::Status Forward(const KeyedJagged& batch, float* out) = 0;
  // Fused backward + update for the batch of the last Forward.
  virtual absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) = 0;
  // Whether ForwardBf16 / BackwardUpdateBf16 are available: the tables pool into bf16 outputs
  // and update from bf16 gradients (every table's output_dtype bf16, in this process), so the
  // model hands bf16 to the dense side with no conversion pass. Default: false.
  virtual bool bf16_outputs() const { return false; }
  // Forward and BackwardUpdate with out / d_out [batch, output_dim()] in bf16 (the bits the fp32
  // calls would widen from and round to). Default: Unimplemented (bf16_outputs() false).
  virtual absl::Status ForwardBf16(const KeyedJagged& batch, uint16_t* out) {
    return absl::UnimplementedError("this SparseArch has no bf16 outputs");
  }
  virtual absl::Status BackwardUpdateBf16(const uint16_t* d_out, float lr, int64_t step) {
    return absl::UnimplementedError("this SparseArch has no bf16 outputs");
  }
  // Hints that `next` is the local batch of the next Forward (tiered tables read ahead).
  // Default: nothing.
  virtual void Prefetch(const KeyedJagged& next) {}
  // false: the following Forwards are evaluation (dynamic tables admit no key; an unseen key
  // pools the zero row); true again for training. Default: nothing (no dynamic tables).
  virtual void SetTraining(bool training) {}
  // Table t's dynamic store when the table is dynamic and in this process, else null.
  virtual DynamicRowStore* dynamic_store(int t) { return nullptr; }
  // A dynamic table's counters (collective when sharded: every rank calls it), and the whole
  // table by key (export; with `with_state` its optimizer state). Defaults: dynamic_store(t)'s;
  // NotFound for a table that is not dynamic.
  virtual absl::StatusOr<DynamicTableStats> DynamicStats(int t) {
    DynamicRowStore* d = dynamic_store(t);
    if (d == nullptr) return absl::NotFoundError("not a dynamic table");
    return d->stats();
  }
  virtual absl::StatusOr<DynamicTableState> GatherDynamicTable(int t, bool with_state) {
    DynamicRowStore* d = dynamic_store(t);
    if (d == nullptr) return absl::NotFoundError("not a dynamic table");
    DynamicTableState s;
    absl::Status saved = d->SaveState(with_state, &s);
    if (!saved.ok()) return saved;
    return s;
  }
  virtual int num_tables() const = 0;
  virtual const TableConfig& table(int t) const = 0;
  // Rows [begin, begin + count) of table t's weights, in row order (count * dim floats).
  virtual absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) = 0;
  // Overwrites rows [begin, begin + count) of table t's weights (optimizer state untouched).
  virtual absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) = 0;
};

// The single-process SparseArch: owns an EmbeddingCollection.
class LocalSparseArch final : public SparseArch {
 public:
  explicit LocalSparseArch(std::unique_ptr<EmbeddingCollection> collection)
      : collection_(std::move(collection)) {}
  int64_t output_dim() const override { return collection_->output_dim(); }
  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    return collection_->Forward(batch, out);
  }
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    return collection_->BackwardUpdate(d_out, lr, step);
  }
  bool bf16_outputs() const override { return collection_->bf16_outputs(); }
  absl::Status ForwardBf16(const KeyedJagged& batch, uint16_t* out) override {
    return collection_->ForwardBf16(batch, out);
  }
  absl::Status BackwardUpdateBf16(const uint16_t* d_out, float lr, int64_t step) override {
    return collection_->BackwardUpdateBf16(d_out, lr, step);
  }
  void Prefetch(const KeyedJagged& next) override { collection_->Prefetch(next); }
  void SetTraining(bool training) override { collection_->set_training(training); }
  DynamicRowStore* dynamic_store(int t) override {
    return dynamic_cast<DynamicRowStore*>(&collection_->store(t));
  }
  int num_tables() const override { return collection_->num_tables(); }
  const TableConfig& table(int t) const override { return collection_->table(t); }
  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) override {
    return collection_->store(t).ReadRows(begin, count, out, nullptr);
  }
  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) override {
    return collection_->store(t).WriteRows(begin, count, rows, nullptr);
  }
  EmbeddingCollection& collection() { return *collection_; }

 private:
  std::unique_ptr<EmbeddingCollection> collection_;
};

}  // namespace tessera
