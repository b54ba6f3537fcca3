// The per-shard compute of ShardedEmbeddingCollection's phases: the device seam. Everything the
// phase objects (input_dist.h, output_dist.h, replica_sync.h, shard_update.h) do to payload and
// row buffers goes through these entry points, so a CUDA twin can be added without touching the
// orchestration; the transport is the Communicator's (MPI on host memory, NCCL on device
// memory).
//
// Shape (dense/'s twins): each op has a CPU twin <Op>Cpu in shard_kernels_cpu.cc (the reference
// the tests trust) and a CUDA twin <Op>Cuda with the same signature, declared here to fix it; the
// dispatching entry point <Op> (shard_kernels.cc) picks one by ctx.device and is the only place
// that knows whether a twin is built. The CUDA twins (shard_kernels_cuda.cu) are compiled with
// the CUDA path; without it a kCuda context gets Unimplemented. The orchestration does not use
// them yet: ShardedEmbeddingCollection::Create refuses a CUDA context (issue 10).
//
// Kernels take plain views: pointers into memory of ctx.device and sizes; the caller owns the
// memory, sizes the outputs and keeps pointers alive until the call returns (a CUDA twin runs on
// ctx's stream and must be synchronised before the host reads an output or a communicator
// sends it). Sizes are element counts unless named `bytes`. None of them allocates, and each
// writes exactly the elements its contract names, so the CPU twins give the bits the code before
// the seam gave (same loops, same float operations in the same order).
//
// Thread-safety: stateless; concurrent calls on disjoint outputs are fine.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/device.h"
#include "embedding/row_optimizer.h"
#include "sharding/sharded_embedding.h"  // PayloadDType

namespace tessera::internal {

// One piece of a packed payload: `bytes` bytes at `data` (may be null when bytes == 0).
struct ByteSegment {
  const void* data = nullptr;
  int64_t bytes = 0;
};

// ---- Input dist: id payloads ------------------------------------------------------------------
// Copies segs[0 .. count) back to back into dst (sum of their bytes): the requester's id payload
// to one owner (unique ids, bag lengths and positions, per-id weights), and the owner's copy of
// received per-id weights. `segs` itself is a host array; the bytes it points at and dst are in
// ctx's memory.
absl::Status PackSegments(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                          char* dst);
absl::Status PackSegmentsCpu(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                             char* dst);
absl::Status PackSegmentsCuda(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                              char* dst);

// rows[i] = ids[i] - row_begin for i < count: global ids to a shard's local rows.
absl::Status UnpackIds(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                       int64_t row_begin, int64_t* rows);
absl::Status UnpackIdsCpu(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                          int64_t row_begin, int64_t* rows);
absl::Status UnpackIdsCuda(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                           int64_t row_begin, int64_t* rows);

// One (sender, feature) of a received id payload into the owner's CSR: offsets[0] =
// offset_base, offsets[i + 1] = offsets[i] + lengths[i] for i < num_bags (num_bags + 1 values);
// indices[j] = unique_base + positions[j] for j < num_positions (positions into the sender's
// unique ids become indices into the owner's unique rows of all senders).
absl::Status UnpackBags(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                        const int32_t* positions, int64_t num_positions, int64_t offset_base,
                        int64_t unique_base, int64_t* offsets, int64_t* indices);
absl::Status UnpackBagsCpu(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                           const int32_t* positions, int64_t num_positions, int64_t offset_base,
                           int64_t unique_base, int64_t* offsets, int64_t* indices);
absl::Status UnpackBagsCuda(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                            const int32_t* positions, int64_t num_positions, int64_t offset_base,
                            int64_t unique_base, int64_t* offsets, int64_t* indices);

// indices[j] = table[indices[j]] for j < count (unique-row indices to store slots, in place).
absl::Status MapIndices(const DeviceContext& ctx, const int64_t* table, int64_t count,
                        int64_t* indices);
absl::Status MapIndicesCpu(const DeviceContext& ctx, const int64_t* table, int64_t count,
                           int64_t* indices);
absl::Status MapIndicesCuda(const DeviceContext& ctx, const int64_t* table, int64_t count,
                            int64_t* indices);

// dst[i] = value for i < count (per-id weights of an unweighted sender in a weighted group).
absl::Status FillFloats(const DeviceContext& ctx, float value, int64_t count, float* dst);
absl::Status FillFloatsCpu(const DeviceContext& ctx, float value, int64_t count, float* dst);
absl::Status FillFloatsCuda(const DeviceContext& ctx, float value, int64_t count, float* dst);

// ---- Output dist: pooled partial sums and gradient slices -------------------------------------
// dst[i * dst_stride + c] += src[i * width + c] for i < rows, c < width, in that order: one
// shard's partial sums added into its columns of the requester's output (row-wise and grid
// partials of a feature reduced in the order of the calls). `first`: the columns' first
// partial, written (dst = src) instead of added, so the output needs no zeroing pass before
// (the same bits as adding it to zeros: pooled sums are never -0).
absl::Status AddPartials(const DeviceContext& ctx, const float* src, int64_t rows, int64_t width,
                         float* dst, int64_t dst_stride, bool first = false);
absl::Status AddPartialsCpu(const DeviceContext& ctx, const float* src, int64_t rows, int64_t width,
                            float* dst, int64_t dst_stride, bool first);
absl::Status AddPartialsCuda(const DeviceContext& ctx, const float* src, int64_t rows,
                             int64_t width, float* dst, int64_t dst_stride, bool first);

// Mean pooling after the reduce: out[i * out_stride + c] *= 1 / len_i (len_i = offsets[i + 1] -
// offsets[i], host-computed float reciprocal) for c < dim; empty bags are left as they are.
absl::Status ScaleBagsByLength(const DeviceContext& ctx, const int64_t* offsets, int64_t num_bags,
                               int64_t dim, float* out, int64_t out_stride);
absl::Status ScaleBagsByLengthCpu(const DeviceContext& ctx, const int64_t* offsets,
                                  int64_t num_bags, int64_t dim, float* out, int64_t out_stride);
absl::Status ScaleBagsByLengthCuda(const DeviceContext& ctx, const int64_t* offsets,
                                   int64_t num_bags, int64_t dim, float* out, int64_t out_stride);

// One (shard, feature) slice of the output gradient, packed for its owner: dst[i * width + c] =
// grad[i * grad_stride + c] for i < num_bags, c < width, times 1 / len_i when `mean_offsets` is
// non-null (kMean; len_i from mean_offsets as above, bags of length 0 copied unscaled).
absl::Status PackGradSlice(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                           const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                           float* dst);
absl::Status PackGradSliceCpu(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                              const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                              float* dst);
absl::Status PackGradSliceCuda(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                               const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                               float* dst);

// 16-bit payloads (sharding.comm_dtype): dst[i] = src[i] rounded to nearest even to fp16 / bf16
// (embedding/row_dtype.h's conversions), and back (exact widening). `dtype` is kF16 or kBF16.
absl::Status FloatsTo16(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                        int64_t count, uint16_t* dst);
absl::Status FloatsTo16Cpu(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                           int64_t count, uint16_t* dst);
absl::Status FloatsTo16Cuda(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                            int64_t count, uint16_t* dst);
absl::Status FloatsFrom16(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                          int64_t count, float* dst);
absl::Status FloatsFrom16Cpu(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                             int64_t count, float* dst);
absl::Status FloatsFrom16Cuda(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                              int64_t count, float* dst);

// ---- Replica sync and the update: row payloads ------------------------------------------------
// dst[i * width ..] = src[slots[i] * width ..] for i < count (rows of a store into a payload).
absl::Status GatherRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                        int64_t count, int64_t width, float* dst);
absl::Status GatherRowsCpu(const DeviceContext& ctx, const float* src, const int64_t* slots,
                           int64_t count, int64_t width, float* dst);
absl::Status GatherRowsCuda(const DeviceContext& ctx, const float* src, const int64_t* slots,
                            int64_t count, int64_t width, float* dst);

// dst[slots[i] * width ..] = src[i * width ..] for i < count (a payload back into a store's
// rows; slots distinct).
absl::Status ScatterRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                         int64_t count, int64_t width, float* dst);
absl::Status ScatterRowsCpu(const DeviceContext& ctx, const float* src, const int64_t* slots,
                            int64_t count, int64_t width, float* dst);
absl::Status ScatterRowsCuda(const DeviceContext& ctx, const float* src, const int64_t* slots,
                             int64_t count, int64_t width, float* dst);

// Exact replica sync's payload: row rows[i]'s gradient src[i * width ..] lands at its index in
// `union_rows` (increasing, containing every rows[i]): dst[k * width ..] with union_rows[k] ==
// rows[i]. Other rows of dst are left as they are (the caller zeroes them).
absl::Status ScatterToUnion(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                            const int64_t* union_rows, int64_t union_count, const float* src,
                            int64_t width, float* dst);
absl::Status ScatterToUnionCpu(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                               const int64_t* union_rows, int64_t union_count, const float* src,
                               int64_t width, float* dst);
absl::Status ScatterToUnionCuda(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                                const int64_t* union_rows, int64_t union_count, const float* src,
                                int64_t width, float* dst);

// Average mode's delayed state average: for i < count, c < state_dim, v = state[slots[i] *
// state_dim + c] becomes avg[i * state_dim + c] + (v - snapshot[i * state_dim + c]).
absl::Status ApplyDelayedAverage(const DeviceContext& ctx, const float* avg, const float* snapshot,
                                 const int64_t* slots, int64_t count, int64_t state_dim,
                                 float* state);
absl::Status ApplyDelayedAverageCpu(const DeviceContext& ctx, const float* avg,
                                    const float* snapshot, const int64_t* slots, int64_t count,
                                    int64_t state_dim, float* state);
absl::Status ApplyDelayedAverageCuda(const DeviceContext& ctx, const float* avg,
                                     const float* snapshot, const int64_t* slots, int64_t count,
                                     int64_t state_dim, float* state);

// x[i] *= scale for i < count (average mode's local gradients times M).
absl::Status ScaleFloats(const DeviceContext& ctx, float scale, int64_t count, float* x);
absl::Status ScaleFloatsCpu(const DeviceContext& ctx, float scale, int64_t count, float* x);
absl::Status ScaleFloatsCuda(const DeviceContext& ctx, float scale, int64_t count, float* x);

// Column-split row-wise AdaGrad: out[i] = sum over c < width of g[i * width + c]^2, summed in
// column order (each shard's partial of the row's squared norm).
absl::Status RowSquaredSums(const DeviceContext& ctx, const float* grads, int64_t count,
                            int64_t width, float* out);
absl::Status RowSquaredSumsCpu(const DeviceContext& ctx, const float* grads, int64_t count,
                               int64_t width, float* out);
absl::Status RowSquaredSumsCuda(const DeviceContext& ctx, const float* grads, int64_t count,
                                int64_t width, float* out);

// Column-split row-wise AdaGrad's update: for i < count, RowWiseAdagradStep (embedding/
// row_optimizer.h) of row slots[i] (weights [slots, width], state one float per slot) with the
// gradient grads[i * width ..] and the full row's mean squared gradient total_sq[i] / dim
// (dim: the full table's width). Rows in parallel; slots distinct. The CUDA twin shares the
// step's code, whose weight update nvcc may contract into FMAs: weights within an ulp of the
// CPU twin's, state bit for bit.
absl::Status ColumnSplitAdagrad(const DeviceContext& ctx, const RowOptimizerOptions& opt,
                                float lr, const float* total_sq, float dim, const int64_t* slots,
                                int64_t count, int64_t width, const float* grads, float* weights,
                                float* state);
absl::Status ColumnSplitAdagradCpu(const DeviceContext& ctx, const RowOptimizerOptions& opt,
                                   float lr, const float* total_sq, float dim,
                                   const int64_t* slots, int64_t count, int64_t width,
                                   const float* grads, float* weights, float* state);
absl::Status ColumnSplitAdagradCuda(const DeviceContext& ctx, const RowOptimizerOptions& opt,
                                    float lr, const float* total_sq, float dim,
                                    const int64_t* slots, int64_t count, int64_t width,
                                    const float* grads, float* weights, float* state);

}  // namespace tessera::internal
