// Dispatch of sharding/internal/shard_kernels.h to its twins: the only place that knows which
// twins are built. No CUDA twin exists yet, so a kCuda context gets Unimplemented; adding one
// means defining <Op>Cuda in shard_kernels_cuda.cu and calling it here under TESSERA_HAVE_CUDA,
// as dense/row_ops.cc does.
#include "absl/strings/str_cat.h"
#include "sharding/internal/shard_kernels.h"

namespace tessera::internal {
namespace {

absl::Status NoCudaTwin(const char* op) {
  return absl::UnimplementedError(absl::StrCat(
      "sharding kernel ", op, ": no CUDA twin yet (sharding/internal/shard_kernels_cuda.cu)"));
}

}  // namespace

absl::Status PackSegments(const DeviceContext& ctx, const ByteSegment* segs, int64_t count,
                          char* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("PackSegments");
  return PackSegmentsCpu(ctx, segs, count, dst);
}

absl::Status UnpackIds(const DeviceContext& ctx, const int64_t* ids, int64_t count,
                       int64_t row_begin, int64_t* rows) {
  if (ctx.is_cuda()) return NoCudaTwin("UnpackIds");
  return UnpackIdsCpu(ctx, ids, count, row_begin, rows);
}

absl::Status UnpackBags(const DeviceContext& ctx, const int32_t* lengths, int64_t num_bags,
                        const int32_t* positions, int64_t num_positions, int64_t offset_base,
                        int64_t unique_base, int64_t* offsets, int64_t* indices) {
  if (ctx.is_cuda()) return NoCudaTwin("UnpackBags");
  return UnpackBagsCpu(ctx, lengths, num_bags, positions, num_positions, offset_base, unique_base, offsets, indices);
}

absl::Status MapIndices(const DeviceContext& ctx, const int64_t* table, int64_t count,
                        int64_t* indices) {
  if (ctx.is_cuda()) return NoCudaTwin("MapIndices");
  return MapIndicesCpu(ctx, table, count, indices);
}

absl::Status FillFloats(const DeviceContext& ctx, float value, int64_t count, float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("FillFloats");
  return FillFloatsCpu(ctx, value, count, dst);
}

absl::Status AddPartials(const DeviceContext& ctx, const float* src, int64_t rows, int64_t width,
                         float* dst, int64_t dst_stride) {
  if (ctx.is_cuda()) return NoCudaTwin("AddPartials");
  return AddPartialsCpu(ctx, src, rows, width, dst, dst_stride);
}

absl::Status ScaleBagsByLength(const DeviceContext& ctx, const int64_t* offsets, int64_t num_bags,
                               int64_t dim, float* out, int64_t out_stride) {
  if (ctx.is_cuda()) return NoCudaTwin("ScaleBagsByLength");
  return ScaleBagsByLengthCpu(ctx, offsets, num_bags, dim, out, out_stride);
}

absl::Status PackGradSlice(const DeviceContext& ctx, const float* grad, int64_t grad_stride,
                           const int64_t* mean_offsets, int64_t num_bags, int64_t width,
                           float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("PackGradSlice");
  return PackGradSliceCpu(ctx, grad, grad_stride, mean_offsets, num_bags, width, dst);
}

absl::Status FloatsTo16(const DeviceContext& ctx, PayloadDType dtype, const float* src,
                        int64_t count, uint16_t* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("FloatsTo16");
  return FloatsTo16Cpu(ctx, dtype, src, count, dst);
}

absl::Status FloatsFrom16(const DeviceContext& ctx, PayloadDType dtype, const uint16_t* src,
                          int64_t count, float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("FloatsFrom16");
  return FloatsFrom16Cpu(ctx, dtype, src, count, dst);
}

absl::Status GatherRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                        int64_t count, int64_t width, float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("GatherRows");
  return GatherRowsCpu(ctx, src, slots, count, width, dst);
}

absl::Status ScatterRows(const DeviceContext& ctx, const float* src, const int64_t* slots,
                         int64_t count, int64_t width, float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("ScatterRows");
  return ScatterRowsCpu(ctx, src, slots, count, width, dst);
}

absl::Status ScatterToUnion(const DeviceContext& ctx, const int64_t* rows, int64_t count,
                            const int64_t* union_rows, int64_t union_count, const float* src,
                            int64_t width, float* dst) {
  if (ctx.is_cuda()) return NoCudaTwin("ScatterToUnion");
  return ScatterToUnionCpu(ctx, rows, count, union_rows, union_count, src, width, dst);
}

absl::Status ApplyDelayedAverage(const DeviceContext& ctx, const float* avg,
                                 const float* snapshot, const int64_t* slots, int64_t count,
                                 int64_t state_dim, float* state) {
  if (ctx.is_cuda()) return NoCudaTwin("ApplyDelayedAverage");
  return ApplyDelayedAverageCpu(ctx, avg, snapshot, slots, count, state_dim, state);
}

absl::Status RowSquaredSums(const DeviceContext& ctx, const float* grads, int64_t count,
                            int64_t width, float* out) {
  if (ctx.is_cuda()) return NoCudaTwin("RowSquaredSums");
  return RowSquaredSumsCpu(ctx, grads, count, width, out);
}

}  // namespace tessera::internal
