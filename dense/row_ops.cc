// Dispatch of the row plumbing (dense/internal/kernels.h) to its CPU or CUDA twin.
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {
constexpr char kCudaFile[] = "dense/row_ops_cuda.cu";
}  // namespace

absl::Status ConcatColumns(const DeviceContext& ctx, const float* a, int64_t a_cols,
                           const float* c, int64_t c_cols, int64_t batch, float* out) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return ConcatColumnsCuda(ctx, a, a_cols, c, c_cols, batch, out);
#else
  if (ctx.is_cuda()) return NoCudaTwin("ConcatColumns", kCudaFile);
#endif
  return ConcatColumnsCpu(ctx, a, a_cols, c, c_cols, batch, out);
}

absl::Status SplitColumns(const DeviceContext& ctx, const float* in, int64_t a_cols,
                          int64_t c_cols, int64_t batch, float* a, float* c) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return SplitColumnsCuda(ctx, in, a_cols, c_cols, batch, a, c);
#else
  if (ctx.is_cuda()) return NoCudaTwin("SplitColumns", kCudaFile);
#endif
  return SplitColumnsCpu(ctx, in, a_cols, c_cols, batch, a, c);
}

absl::Status ConcatColumnsBf16(const DeviceContext& ctx, const float* a, int64_t a_cols,
                               const uint16_t* c, int64_t c_cols, int64_t batch, float* out) {
  if (ctx.is_cuda()) return NoBf16CudaTwin("ConcatColumnsBf16");
  return ConcatColumnsBf16Cpu(ctx, a, a_cols, c, c_cols, batch, out);
}

absl::Status SplitColumnsBf16(const DeviceContext& ctx, const float* in, int64_t a_cols,
                              int64_t c_cols, int64_t batch, float* a, uint16_t* c) {
  if (ctx.is_cuda()) return NoBf16CudaTwin("SplitColumnsBf16");
  return SplitColumnsBf16Cpu(ctx, in, a_cols, c_cols, batch, a, c);
}

absl::Status AddInPlace(const DeviceContext& ctx, const float* x, int64_t n, float* y) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return AddInPlaceCuda(ctx, x, n, y);
#else
  if (ctx.is_cuda()) return NoCudaTwin("AddInPlace", kCudaFile);
#endif
  return AddInPlaceCpu(ctx, x, n, y);
}

absl::Status CopyFloats(const DeviceContext& ctx, const float* src, int64_t n, float* dst) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return CopyFloatsCuda(ctx, src, n, dst);
#else
  if (ctx.is_cuda()) return NoCudaTwin("CopyFloats", kCudaFile);
#endif
  return CopyFloatsCpu(ctx, src, n, dst);
}

}  // namespace tessera::dense_internal
