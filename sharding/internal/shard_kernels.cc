// Dispatch of sharding/internal/shard_kernels.h to its twins: the only place that knows whether
// the CUDA twins (shard_kernels_cuda.cu) are built, as dense/row_ops.cc does for dense/.
#include "sharding/internal/shard_kernels.h"

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"

namespace tessera::internal {
namespace {

// A hand-made kCuda context without the compute stream would launch the twins on the legacy
// stream, out of order with the shards' other work (the dense and embedding twins refuse it too).
[[maybe_unused]] absl::Status NoComputeStream(const char* op) {
  return absl::FailedPreconditionError(
      absl::StrCat(op, ": the CUDA DeviceContext has no compute stream; create it with "
                       "CudaContext::Create (core/cuda_context.h)"));
}

}  // namespace

absl::Status PackSegments(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                          char* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("PackSegments");
  }
  if (ctx.is_cuda()) return PackSegmentsCuda(ctx, segs, count, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("PackSegments");
#endif
  return PackSegmentsCpu(ctx, segs, count, dst);
}

absl::Status UnpackIds(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                       int64_t row_begin, int64_t* rows) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("UnpackIds");
  }
  if (ctx.is_cuda()) return UnpackIdsCuda(ctx, ids, count, row_begin, rows);
#else
  if (ctx.is_cuda()) return NoCudaPath("UnpackIds");
#endif
  return UnpackIdsCpu(ctx, ids, count, row_begin, rows);
}

absl::Status UnpackBags(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                        const int32_t* positions, int64_t num_positions, int64_t offset_base,
                        int64_t unique_base, int64_t* offsets, int64_t* indices) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("UnpackBags");
  }
  if (ctx.is_cuda())
    return UnpackBagsCuda(ctx, lengths, num_bags, positions, num_positions, offset_base,
                          unique_base, offsets, indices);
#else
  if (ctx.is_cuda()) return NoCudaPath("UnpackBags");
#endif
  return UnpackBagsCpu(ctx, lengths, num_bags, positions, num_positions, offset_base, unique_base,
                       offsets, indices);
}

absl::Status MapIndices(const DeviceContext& ctx, const int64_t* table, int64_t count,
                        int64_t* indices) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("MapIndices");
  }
  if (ctx.is_cuda()) return MapIndicesCuda(ctx, table, count, indices);
#else
  if (ctx.is_cuda()) return NoCudaPath("MapIndices");
#endif
  return MapIndicesCpu(ctx, table, count, indices);
}

absl::Status FillFloats(const DeviceContext& ctx, float value, int64_t count, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("FillFloats");
  }
  if (ctx.is_cuda()) return FillFloatsCuda(ctx, value, count, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("FillFloats");
#endif
  return FillFloatsCpu(ctx, value, count, dst);
}

absl::Status AddPartials(const DeviceContext& ctx, const float* src, int64_t rows, int64_t width,
                         float* dst, int64_t dst_stride, bool first) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("AddPartials");
  }
  if (ctx.is_cuda()) return AddPartialsCuda(ctx, src, rows, width, dst, dst_stride, first);
#else
  if (ctx.is_cuda()) return NoCudaPath("AddPartials");
#endif
  return AddPartialsCpu(ctx, src, rows, width, dst, dst_stride, first);
}

absl::Status ScaleBagsByLength(const DeviceContext& ctx, const int64_t* offsets, int64_t num_bags,
                               int64_t dim, float* out, int64_t out_stride) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ScaleBagsByLength");
  }
  if (ctx.is_cuda()) return ScaleBagsByLengthCuda(ctx, offsets, num_bags, dim, out, out_stride);
#else
  if (ctx.is_cuda()) return NoCudaPath("ScaleBagsByLength");
#endif
  return ScaleBagsByLengthCpu(ctx, offsets, num_bags, dim, out, out_stride);
}

absl::Status PackGradSlice(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                           const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                           float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("PackGradSlice");
  }
  if (ctx.is_cuda())
    return PackGradSliceCuda(ctx, grad, grad_stride, mean_offsets, num_bags, width, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("PackGradSlice");
#endif
  return PackGradSliceCpu(ctx, grad, grad_stride, mean_offsets, num_bags, width, dst);
}

absl::Status FloatsTo16(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                        int64_t count, uint16_t* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("FloatsTo16");
  }
  if (ctx.is_cuda()) return FloatsTo16Cuda(ctx, dtype, src, count, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("FloatsTo16");
#endif
  return FloatsTo16Cpu(ctx, dtype, src, count, dst);
}

absl::Status FloatsFrom16(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                          int64_t count, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("FloatsFrom16");
  }
  if (ctx.is_cuda()) return FloatsFrom16Cuda(ctx, dtype, src, count, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("FloatsFrom16");
#endif
  return FloatsFrom16Cpu(ctx, dtype, src, count, dst);
}

absl::Status GatherRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                        int64_t count, int64_t width, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("GatherRows");
  }
  if (ctx.is_cuda()) return GatherRowsCuda(ctx, src, slots, count, width, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("GatherRows");
#endif
  return GatherRowsCpu(ctx, src, slots, count, width, dst);
}

absl::Status ScatterRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                         int64_t count, int64_t width, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ScatterRows");
  }
  if (ctx.is_cuda()) return ScatterRowsCuda(ctx, src, slots, count, width, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("ScatterRows");
#endif
  return ScatterRowsCpu(ctx, src, slots, count, width, dst);
}

absl::Status ScatterToUnion(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                            const int64_t* union_rows, int64_t union_count, const float* src,
                            int64_t width, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ScatterToUnion");
  }
  if (ctx.is_cuda())
    return ScatterToUnionCuda(ctx, rows, count, union_rows, union_count, src, width, dst);
#else
  if (ctx.is_cuda()) return NoCudaPath("ScatterToUnion");
#endif
  return ScatterToUnionCpu(ctx, rows, count, union_rows, union_count, src, width, dst);
}

absl::Status ApplyDelayedAverage(const DeviceContext& ctx, const float* avg, const float* snapshot,
                                 const int64_t* slots, int64_t count, int64_t state_dim,
                                 float* state) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ApplyDelayedAverage");
  }
  if (ctx.is_cuda())
    return ApplyDelayedAverageCuda(ctx, avg, snapshot, slots, count, state_dim, state);
#else
  if (ctx.is_cuda()) return NoCudaPath("ApplyDelayedAverage");
#endif
  return ApplyDelayedAverageCpu(ctx, avg, snapshot, slots, count, state_dim, state);
}

absl::Status ScaleFloats(const DeviceContext& ctx, float scale, int64_t count, float* x) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ScaleFloats");
  }
  if (ctx.is_cuda()) return ScaleFloatsCuda(ctx, scale, count, x);
#else
  if (ctx.is_cuda()) return NoCudaPath("ScaleFloats");
#endif
  return ScaleFloatsCpu(ctx, scale, count, x);
}

absl::Status RowSquaredSums(const DeviceContext& ctx, const float* grads, int64_t count,
                            int64_t width, float* out) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("RowSquaredSums");
  }
  if (ctx.is_cuda()) return RowSquaredSumsCuda(ctx, grads, count, width, out);
#else
  if (ctx.is_cuda()) return NoCudaPath("RowSquaredSums");
#endif
  return RowSquaredSumsCpu(ctx, grads, count, width, out);
}

absl::Status ColumnSplitAdagrad(const DeviceContext& ctx, const RowOptimizerOptions& opt, float lr,
                                const float* total_sq, float dim, const int64_t* slots,
                                int64_t count, int64_t width, const float* grads, float* weights,
                                float* state) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda() && ctx.compute_stream == nullptr) {
    return NoComputeStream("ColumnSplitAdagrad");
  }
  if (ctx.is_cuda())
    return ColumnSplitAdagradCuda(ctx, opt, lr, total_sq, dim, slots, count, width, grads, weights,
                                  state);
#else
  if (ctx.is_cuda()) return NoCudaPath("ColumnSplitAdagrad");
#endif
  return ColumnSplitAdagradCpu(ctx, opt, lr, total_sq, dim, slots, count, width, grads, weights,
                               state);
}

}  // namespace tessera::internal
