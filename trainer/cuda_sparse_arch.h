// CudaSparseArch: the SparseArch of a model trained on one GPU. It owns a
// CudaEmbeddingCollection (embedding/embedding_collection_cuda.h): every table and its optimizer
// state in device memory. The twin of LocalSparseArch (trainer/sparse_arch.h) with one
// difference in the memory contract: Forward's `out` and BackwardUpdate's `d_out` are DEVICE
// pointers [batch, output_dim()]; the batch itself stays a host KeyedJagged (the collection stages
// it through pinned memory). ReadRows/WriteRows take host memory and wait for the device, so
// Model::Export/Import work unchanged.
//
// Work is queued on the context's compute stream (see core/cuda_context.h); the CudaContext behind
// the collection's DeviceContext must outlive this object. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "embedding/embedding_collection_cuda.h"
#include "trainer/sparse_arch.h"

namespace tessera {

class CudaSparseArch final : public SparseArch {
 public:
  explicit CudaSparseArch(std::unique_ptr<CudaEmbeddingCollection> collection)
      : collection_(std::move(collection)) {}

  // Tables from `options` on ctx's device. A table is either whole in HBM (storage.tier memory,
  // no device cache) or an HBM cache over its host or RocksDB store (storage.device_cache_rows /
  // bytes: its DeviceRowCache in `caches`, trainer/stores.h CreateDeviceCaches); a RocksDB table
  // without a device cache is InvalidArgument naming the table (the model keeps such tables on
  // the host, trainer/split_sparse_arch.h), and so is a cached table without its cache. Errors
  // of CreateCudaEmbeddingCollection pass through (Unimplemented without the CUDA path,
  // InvalidArgument for a non-CUDA context, ResourceExhausted when HBM is short).
  // `table_ids`: as CreateCudaEmbeddingCollection's (the model's table index of each table, when
  // `options` holds a subset of the model's tables, e.g. SplitSparseArch's device part).
  // `caches`: empty or one entry per table (null: not cached).
  static absl::StatusOr<std::unique_ptr<CudaSparseArch>> Create(
      const EmbeddingCollectionOptions& options, const DeviceContext& ctx,
      const std::vector<uint64_t>& table_ids = {},
      std::vector<std::unique_ptr<DeviceRowCache>> caches = {});

  int64_t output_dim() const override { return collection_->output_dim(); }
  absl::Status Forward(const KeyedJagged& batch, float* out) override {
    return collection_->Forward(batch, out);
  }
  absl::Status BackwardUpdate(const float* d_out, float lr, int64_t step) override {
    return collection_->BackwardUpdate(d_out, lr, step);
  }
  void Prefetch(const KeyedJagged& next) override { collection_->Prefetch(next); }
  int num_tables() const override { return collection_->num_tables(); }
  const TableConfig& table(int t) const override { return collection_->table(t); }
  // Weights only; the optimizer state stays as it is on the device.
  absl::Status ReadRows(int t, int64_t begin, int64_t count, float* out) override {
    return collection_->ReadRows(t, begin, count, out, /*state_out=*/nullptr);
  }
  absl::Status WriteRows(int t, int64_t begin, int64_t count, const float* rows) override {
    return collection_->WriteRows(t, begin, count, rows, /*state=*/nullptr);
  }
  CudaEmbeddingCollection& collection() { return *collection_; }

 private:
  std::unique_ptr<CudaEmbeddingCollection> collection_;
};

}  // namespace tessera
