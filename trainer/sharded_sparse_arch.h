// The SparseArch over ranks: adapts sharding/ShardedEmbeddingCollection to the interface the
// Model drives. Every method is collective over the world (ReadRows/WriteRows included).
// With a CUDA `model_ctx` (device: cuda on several ranks: the dense model on the GPU) Forward's
// `out` and BackwardUpdate's `d_out` are device memory. A collection whose shards are on the
// device too (created with model_ctx) takes them as they are; one whose shards stay in host
// memory (trainer/world.h ShardsStayOnHost) gets host copies: the pooled rows are copied host ->
// device after its Forward and the gradients device -> host before its BackwardUpdate, on
// model_ctx's compute stream (B x output_dim floats each).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_context.h"
#include "core/device.h"
#include "core/status.h"
#include "sharding/sharded_embedding.h"
#include "trainer/sparse_arch.h"

namespace tessera {

class ShardedSparseArch final : public SparseArch {
 public:
  explicit ShardedSparseArch(std::unique_ptr<ShardedEmbeddingCollection> collection,
                             const DeviceContext& model_ctx = DeviceContext::Cpu())
      : collection_(std::move(collection)),
        model_ctx_(model_ctx),
        staged_(model_ctx.is_cuda() && !collection_->on_device()) {}
  int64_t output_dim() const override { return collection_->output_dim(); }
  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    if (!staged_) return collection_->Forward(batch, out);
    const size_t n = static_cast<size_t>(batch.batch_size * output_dim());
    host_out_.resize(n);
    TESSERA_RETURN_IF_ERROR(collection_->Forward(batch, host_out_.data()));
    batch_ = batch.batch_size;
    // From pageable memory the copy has read host_out_ when it returns.
    return CudaCopyToDevice(model_ctx_, out, host_out_.data(), n * sizeof(float));
  }
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    if (!staged_) return collection_->BackwardUpdate(d_out, lr, step);
    const size_t n = static_cast<size_t>(batch_ * output_dim());
    host_d_.resize(n);
    TESSERA_RETURN_IF_ERROR(CudaCopyToHost(model_ctx_, host_d_.data(), d_out, n * sizeof(float)));
    return collection_->BackwardUpdate(host_d_.data(), lr, step);
  }
  // Packs the next batch so its id all-to-all overlaps the current step (pipelining).
  void Prefetch(const KeyedJagged& next) override { collection_->Prefetch(next); }
  // Dynamic tables sharded by key (sharding/key_routing.h).
  void SetTraining(bool training) override { collection_->SetTraining(training); }
  absl::StatusOr<DynamicTableStats> DynamicStats(int t) override {
    return collection_->DynamicStats(t);
  }
  absl::StatusOr<DynamicTableState> GatherDynamicTable(int t, bool with_state) override {
    return collection_->GatherDynamicTable(t, with_state);
  }
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
  DeviceContext model_ctx_;
  bool staged_ = false;  // host shards under a CUDA model: copies both ways
  std::vector<float> host_out_, host_d_;  // staging for a CUDA model
  int64_t batch_ = 0;
};

}  // namespace tessera
