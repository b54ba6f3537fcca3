// CudaWorkspaceAccess: the friend of CudaEmbeddingWorkspace (embedding/pooled_lookup_cuda.h)
// through which the CUDA backward (pooled_lookup_cuda.cu) and the id preprocessing
// (id_preprocess_cuda.cu) use the workspace's buffers: CUB's key sort and run scan, the buffers'
// sizing and the error counters. Included by .cu files only.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "embedding/internal/lookup_cuda_common.h"
#include "embedding/pooled_lookup_cuda.h"

namespace tessera {

// Friend of CudaEmbeddingWorkspace: the routines that use its buffers.
struct CudaWorkspaceAccess {
  // Sorts ws->keys_[0, n) by bits [begin_bit, end_bit) (stable); the result is in ws->keys_.
  static absl::Status SortKeys(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws, int64_t n,
                               int begin_bit, int end_bit) {
    if (end_bit <= begin_bit || n <= 1) return absl::OkStatus();
    cub::DoubleBuffer<embedding_internal::lookup_cuda::Key> db(ws->keys_, ws->keys_alt_);
    size_t bytes = ws->cap_sort_;
    TESSERA_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortKeys(
        ws->sort_temp_, bytes, db, static_cast<int>(n), begin_bit, end_bit, ComputeStream(ctx)));
    if (db.Current() != ws->keys_) std::swap(ws->keys_, ws->keys_alt_);
    return absl::OkStatus();
  }

  // Flags run starts of equal keys >> pos_bits and scans them into run_ids_ (1-based run ids).
  static absl::Status Runs(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws, int64_t n,
                           int pos_bits);

  // The CUB temp-storage sizes are host-side queries: asked only when n outgrows the count they
  // were last asked for, and then for half as much again, so a step whose id count did not grow
  // asks nothing (before: two queries per table per step). CUB's sizes grow with the item count
  // (tile state per tile of items); were one smaller for fewer items, CUB would report the short
  // buffer as an error, not overrun it.
  static absl::Status Reserve(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws, int64_t n,
                              int64_t dim) {
    if (n > ws->temp_sized_for_) {
      const int64_t m = std::min<int64_t>(std::max<int64_t>(n, ws->temp_sized_for_ * 3 / 2),
                                          (int64_t{1} << 31) - 1);
      ws->sort_bytes_ = SortTempBytes(m);
      ws->scan_bytes_ = ScanTempBytes(m);
      ws->temp_sized_for_ = m;
    }
    return ws->Reserve(n, dim, ws->sort_bytes_, ws->scan_bytes_);
  }

  static size_t SortTempBytes(int64_t n) {
    size_t bytes = 0;
    cub::DoubleBuffer<embedding_internal::lookup_cuda::Key> db(nullptr, nullptr);
    cub::DeviceRadixSort::SortKeys(nullptr, bytes, db, static_cast<int>(n), 0, 64);
    return bytes;
  }
  static size_t ScanTempBytes(int64_t n) {
    size_t bytes = 0;
    cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<int*>(nullptr),
                                  static_cast<int*>(nullptr), static_cast<int>(n));
    return bytes;
  }

  // Resets counters to {0, 0, kNoBad}.
  static absl::Status ResetCounters(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws) {
    static const int64_t kInit[3] = {0, 0, embedding_internal::lookup_cuda::kNoBad};
    return CudaStatus(cudaMemcpyAsync(ws->counters_, kInit, sizeof(kInit), cudaMemcpyHostToDevice,
                                      ComputeStream(ctx)),
                      "cudaMemcpyAsync(counters)");
  }
  static absl::Status ReadCounters(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws,
                                   int64_t out[3]) {
    return CudaCopyToHost(ctx, out, ws->counters_, 3 * sizeof(int64_t));
  }

  // poolings and slot_bases: per source (empty: `pooling` and 0 for all).
  static absl::Status Aggregate(const DeviceContext& ctx, absl::Span<const BagGradients> sources,
                                absl::Span<const int64_t> num_ids, int64_t dim, PoolingMode pooling,
                                int slot_bits, CudaEmbeddingWorkspace* ws,
                                absl::Span<const PoolingMode> poolings = {},
                                absl::Span<const int64_t> slot_bases = {});
  static absl::Status Dedup(const DeviceContext& ctx, const int64_t* ids, int64_t n, int id_bits,
                            CudaEmbeddingWorkspace* ws, int64_t* unique, int64_t* inverse,
                            int64_t* num_unique);
  static absl::Status Bucketize(const DeviceContext& ctx, const BucketizeArgs& a,
                                CudaEmbeddingWorkspace* ws);
};

}  // namespace tessera
