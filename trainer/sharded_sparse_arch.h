// The SparseArch over ranks: adapts sharding/ShardedEmbeddingCollection to the interface the
// Model drives. Every method is collective over the world (ReadRows/WriteRows included).
#pragma once

#include <memory>

#include "sharding/sharded_embedding.h"
#include "trainer/sparse_arch.h"

namespace tessera {

class ShardedSparseArch final : public SparseArch {
 public:
  explicit ShardedSparseArch(std::unique_ptr<ShardedEmbeddingCollection> collection)
      : collection_(std::move(collection)) {}
  int64_t output_dim() const override { return collection_->output_dim(); }
  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    return collection_->Forward(batch, out);
  }
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    return collection_->BackwardUpdate(d_out, lr, step);
  }
  // Packs the next batch so its id all-to-all overlaps the current step (pipelining).
  void Prefetch(const KeyedJagged& next) override { collection_->Prefetch(next); }
  int num_tables() const override { return collection_->num_tables(); }
  const TableConfig& table(int t) const override { return collection_->table(t); }
  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) override {
    return collection_->ReadTable(t, begin, count, out);
  }
  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) override {
    return collection_->WriteTable(t, begin, count, rows);
  }
  ShardedEmbeddingCollection& collection() { return *collection_; }

 private:
  std::unique_ptr<ShardedEmbeddingCollection> collection_;
};

}  // namespace tessera
