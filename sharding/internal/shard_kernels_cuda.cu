// CUDA twins of sharding/internal/shard_kernels.h. Every kernel and copy is queued on
// ctx.compute_stream and returns without waiting (core/cuda_context.h's async convention).
// Bits: the float ops are the CPU twins' (adds, one IEEE reciprocal and multiply per bag, the
// squared sums with __fmul_rn / __fadd_rn so nvcc does not contract them into FMAs), and the
// 16-bit conversions repeat embedding/row_dtype.h's integer algorithms on the device (those
// are host-only inline functions), so a CUDA twin gives the CPU twin's bits, NaN payloads
// included. Thread mapping: one thread per output element (grid-stride loops), except
// UnpackBags (one block scans the lengths), RowSquaredSums and ColumnSplitAdagrad (one thread
// per row, over its columns in order). Memory access: coalesced over the innermost index
// everywhere; the row gathers and scatters read or write whole rows at the slots given.
#include <cuda_runtime.h>

#include "core/cuda_status_cuda.h"
#include "embedding/row_dtype.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {
namespace {

constexpr int kThreads = 256;

#define TESSERA_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void UnpackIdsKernel(const int64_t* ids, int64_t n, int64_t base, int64_t* rows) {
  TESSERA_GRID_STRIDE(i, n) { rows[i] = ids[i] - base; }
}

__global__ void PositionsKernel(const int32_t* pos, int64_t n, int64_t base, int64_t* out) {
  TESSERA_GRID_STRIDE(i, n) { out[i] = base + pos[i]; }
}

// One block: each thread sums a contiguous chunk of lengths, the block scans the chunk sums
// (serially in thread 0: at most kScanThreads of them), then each thread writes its chunk.
constexpr int kScanThreads = 1024;
__global__ void OffsetsKernel(const int32_t* lengths, int64_t n, int64_t base, int64_t* offsets) {
  __shared__ int64_t part[kScanThreads];
  const int64_t chunk = (n + kScanThreads - 1) / kScanThreads;
  const int64_t b = threadIdx.x * chunk, e = b + chunk < n ? b + chunk : n;
  int64_t sum = 0;
  for (int64_t i = b; i < e; ++i) sum += lengths[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t at = base;
    for (int t = 0; t < kScanThreads; ++t) {
      const int64_t s = part[t];
      part[t] = at;
      at += s;
    }
  }
  __syncthreads();
  int64_t at = part[threadIdx.x];
  if (threadIdx.x == 0) offsets[0] = base;
  for (int64_t i = b; i < e; ++i) offsets[i + 1] = at += lengths[i];
}

__global__ void MapKernel(const int64_t* table, int64_t n, int64_t* idx) {
  TESSERA_GRID_STRIDE(i, n) { idx[i] = table[idx[i]]; }
}

__global__ void FillKernel(float v, int64_t n, float* dst) {
  TESSERA_GRID_STRIDE(i, n) { dst[i] = v; }
}

__global__ void AddPartialsKernel(const float* src, int64_t rows, int64_t w, float* dst,
                                  int64_t stride, bool first) {
  TESSERA_GRID_STRIDE(k, rows * w) {
    const int64_t i = k / w, c = k % w;
    dst[i * stride + c] = first ? src[k] : dst[i * stride + c] + src[k];
  }
}

__global__ void ScaleBagsKernel(const int64_t* offsets, int64_t bags, int64_t dim, float* out,
                                int64_t stride) {
  TESSERA_GRID_STRIDE(k, bags * dim) {
    const int64_t i = k / dim, c = k % dim;
    const int64_t len = offsets[i + 1] - offsets[i];
    if (len != 0) out[i * stride + c] *= 1.0f / static_cast<float>(len);
  }
}

__global__ void GradSliceKernel(const float* grad, int64_t stride, const int64_t* offsets,
                                int64_t bags, int64_t w, float* dst) {
  TESSERA_GRID_STRIDE(k, bags * w) {
    const int64_t i = k / w, c = k % w;
    const float g = grad[i * stride + c];
    const int64_t len = offsets != nullptr ? offsets[i + 1] - offsets[i] : 0;
    dst[k] = len > 0 ? g * (1.0f / static_cast<float>(len)) : g;
  }
}

// embedding/row_dtype.h's conversions (host and device), so the payloads match the CPU twin's.
__global__ void To16Kernel(bool bf16, const float* src, int64_t n, uint16_t* dst) {
  TESSERA_GRID_STRIDE(i, n) {
    dst[i] = bf16 ? row_dtype::FloatToBf16(src[i]) : row_dtype::FloatToHalf(src[i]);
  }
}
__global__ void From16Kernel(bool bf16, const uint16_t* src, int64_t n, float* dst) {
  TESSERA_GRID_STRIDE(i, n) {
    dst[i] = bf16 ? row_dtype::Bf16ToFloat(src[i]) : row_dtype::HalfToFloat(src[i]);
  }
}

__global__ void GatherKernel(const float* src, const int64_t* slots, int64_t n, int64_t w,
                             float* dst) {
  TESSERA_GRID_STRIDE(k, n * w) { dst[k] = src[slots[k / w] * w + k % w]; }
}
__global__ void ScatterKernel(const float* src, const int64_t* slots, int64_t n, int64_t w,
                              float* dst) {
  TESSERA_GRID_STRIDE(k, n * w) { dst[slots[k / w] * w + k % w] = src[k]; }
}

__global__ void ScatterToUnionKernel(const int64_t* rows, int64_t n, const int64_t* uni, int64_t un,
                                     const float* src, int64_t w, float* dst) {
  TESSERA_GRID_STRIDE(k, n * w) {
    const int64_t i = k / w, x = rows[i];
    int64_t lo = 0, hi = un;  // lower_bound
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (uni[mid] < x) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    dst[lo * w + k % w] = src[k];
  }
}

__global__ void DelayedAverageKernel(const float* avg, const float* snap, const int64_t* slots,
                                     int64_t n, int64_t sd, float* state) {
  TESSERA_GRID_STRIDE(k, n * sd) {
    float& v = state[slots[k / sd] * sd + k % sd];
    v = __fadd_rn(avg[k], __fsub_rn(v, snap[k]));
  }
}

__global__ void SquaredSumsKernel(const float* g, int64_t n, int64_t w, float* out) {
  TESSERA_GRID_STRIDE(i, n) {
    float sq = 0.0f;
    for (int64_t c = 0; c < w; ++c) sq = __fadd_rn(sq, __fmul_rn(g[i * w + c], g[i * w + c]));
    out[i] = sq;
  }
}

__global__ void ScaleKernel(float scale, int64_t n, float* x) {
  TESSERA_GRID_STRIDE(i, n) { x[i] = __fmul_rn(x[i], scale); }
}

__global__ void ColumnSplitAdagradKernel(RowOptimizerOptions opt, float lr, const float* total_sq,
                                         float dim, const int64_t* slots, int64_t n, int64_t w,
                                         const float* g, float* weights, float* state) {
  TESSERA_GRID_STRIDE(i, n) {
    RowWiseAdagradStep(opt, lr, __fdiv_rn(total_sq[i], dim), w, g + i * w, weights + slots[i] * w,
                       state + slots[i]);
  }
}

#undef TESSERA_GRID_STRIDE

cudaStream_t Stream(const DeviceContext& ctx) { return ComputeStream(ctx); }

}  // namespace

absl::Status PackSegmentsCuda(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                              char* dst) {
  for (int64_t i = 0; i < count; ++i) {
    if (segs[i].bytes == 0) continue;
    TESSERA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, segs[i].data, segs[i].bytes, cudaMemcpyDefault, Stream(ctx)));
    dst += segs[i].bytes;
  }
  return absl::OkStatus();
}

absl::Status UnpackIdsCuda(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                           int64_t row_begin, int64_t* rows) {
  if (count <= 0) return absl::OkStatus();
  UnpackIdsKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(ids, count, row_begin,
                                                                          rows);
  return CudaLaunchStatus("UnpackIdsKernel");
}

absl::Status UnpackBagsCuda(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                            const int32_t* positions, int64_t num_positions, int64_t offset_base,
                            int64_t unique_base, int64_t* offsets, int64_t* indices) {
  OffsetsKernel<<<1, kScanThreads, 0, Stream(ctx)>>>(lengths, num_bags, offset_base, offsets);
  TESSERA_RETURN_IF_ERROR(CudaLaunchStatus("OffsetsKernel"));
  if (num_positions <= 0) return absl::OkStatus();
  PositionsKernel<<<GridFor(num_positions, kThreads), kThreads, 0, Stream(ctx)>>>(
      positions, num_positions, unique_base, indices);
  return CudaLaunchStatus("PositionsKernel");
}

absl::Status MapIndicesCuda(const DeviceContext& ctx, const int64_t* table, int64_t count,
                            int64_t* indices) {
  if (count <= 0) return absl::OkStatus();
  MapKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(table, count, indices);
  return CudaLaunchStatus("MapKernel");
}

absl::Status FillFloatsCuda(const DeviceContext& ctx, float value, int64_t count, float* dst) {
  if (count <= 0) return absl::OkStatus();
  FillKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(value, count, dst);
  return CudaLaunchStatus("FillKernel");
}

absl::Status AddPartialsCuda(const DeviceContext& ctx, const float* src, int64_t rows,
                             int64_t width, float* dst, int64_t dst_stride, bool first) {
  if (rows <= 0 || width <= 0) return absl::OkStatus();
  AddPartialsKernel<<<GridFor(rows * width, kThreads), kThreads, 0, Stream(ctx)>>>(
      src, rows, width, dst, dst_stride, first);
  return CudaLaunchStatus("AddPartialsKernel");
}

absl::Status ScaleBagsByLengthCuda(const DeviceContext& ctx, const int64_t* offsets,
                                   int64_t num_bags, int64_t dim, float* out, int64_t out_stride) {
  if (num_bags <= 0 || dim <= 0) return absl::OkStatus();
  ScaleBagsKernel<<<GridFor(num_bags * dim, kThreads), kThreads, 0, Stream(ctx)>>>(
      offsets, num_bags, dim, out, out_stride);
  return CudaLaunchStatus("ScaleBagsKernel");
}

absl::Status PackGradSliceCuda(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                               const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                               float* dst) {
  if (num_bags <= 0 || width <= 0) return absl::OkStatus();
  GradSliceKernel<<<GridFor(num_bags * width, kThreads), kThreads, 0, Stream(ctx)>>>(
      grad, grad_stride, mean_offsets, num_bags, width, dst);
  return CudaLaunchStatus("GradSliceKernel");
}

absl::Status FloatsTo16Cuda(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                            int64_t count, uint16_t* dst) {
  if (count <= 0) return absl::OkStatus();
  To16Kernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(dtype == PayloadDType::kBF16,
                                                                     src, count, dst);
  return CudaLaunchStatus("To16Kernel");
}

absl::Status FloatsFrom16Cuda(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                              int64_t count, float* dst) {
  if (count <= 0) return absl::OkStatus();
  From16Kernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(dtype == PayloadDType::kBF16,
                                                                       src, count, dst);
  return CudaLaunchStatus("From16Kernel");
}

absl::Status GatherRowsCuda(const DeviceContext& ctx, const float* src, const int64_t* slots,
                            int64_t count, int64_t width, float* dst) {
  if (count <= 0 || width <= 0) return absl::OkStatus();
  GatherKernel<<<GridFor(count * width, kThreads), kThreads, 0, Stream(ctx)>>>(src, slots, count,
                                                                               width, dst);
  return CudaLaunchStatus("GatherKernel");
}

absl::Status ScatterRowsCuda(const DeviceContext& ctx, const float* src, const int64_t* slots,
                             int64_t count, int64_t width, float* dst) {
  if (count <= 0 || width <= 0) return absl::OkStatus();
  ScatterKernel<<<GridFor(count * width, kThreads), kThreads, 0, Stream(ctx)>>>(src, slots, count,
                                                                                width, dst);
  return CudaLaunchStatus("ScatterKernel");
}

absl::Status ScatterToUnionCuda(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                                const int64_t* union_rows, int64_t union_count, const float* src,
                                int64_t width, float* dst) {
  if (count <= 0 || width <= 0) return absl::OkStatus();
  ScatterToUnionKernel<<<GridFor(count * width, kThreads), kThreads, 0, Stream(ctx)>>>(
      rows, count, union_rows, union_count, src, width, dst);
  return CudaLaunchStatus("ScatterToUnionKernel");
}

absl::Status ApplyDelayedAverageCuda(const DeviceContext& ctx, const float* avg,
                                     const float* snapshot, const int64_t* slots, int64_t count,
                                     int64_t state_dim, float* state) {
  if (count <= 0 || state_dim <= 0) return absl::OkStatus();
  DelayedAverageKernel<<<GridFor(count * state_dim, kThreads), kThreads, 0, Stream(ctx)>>>(
      avg, snapshot, slots, count, state_dim, state);
  return CudaLaunchStatus("DelayedAverageKernel");
}

absl::Status RowSquaredSumsCuda(const DeviceContext& ctx, const float* grads, int64_t count,
                                int64_t width, float* out) {
  if (count <= 0) return absl::OkStatus();
  SquaredSumsKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(grads, count, width,
                                                                            out);
  return CudaLaunchStatus("SquaredSumsKernel");
}

absl::Status ScaleFloatsCuda(const DeviceContext& ctx, float scale, int64_t count, float* x) {
  if (count <= 0) return absl::OkStatus();
  ScaleKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(scale, count, x);
  return CudaLaunchStatus("ScaleKernel");
}

absl::Status ColumnSplitAdagradCuda(const DeviceContext& ctx, const RowOptimizerOptions& opt,
                                    float lr, const float* total_sq, float dim,
                                    const int64_t* slots, int64_t count, int64_t width,
                                    const float* grads, float* weights, float* state) {
  if (count <= 0) return absl::OkStatus();
  ColumnSplitAdagradKernel<<<GridFor(count, kThreads), kThreads, 0, Stream(ctx)>>>(
      opt, lr, total_sq, dim, slots, count, width, grads, weights, state);
  return CudaLaunchStatus("ColumnSplitAdagradKernel");
}

}  // namespace tessera::internal
