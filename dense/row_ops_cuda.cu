// CUDA twin of the row plumbing (dense/internal/kernels.h): concatenation and split are strided
// 2-D copies (cudaMemcpy2DAsync moves each row's bytes at copy bandwidth, no kernel needed);
// AddInPlace is a grid-stride elementwise kernel; CopyFloats a device-to-device copy.
#include "core/cuda_status_cuda.h"
#include "dense/internal/blas_cuda.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

__global__ void AddKernel(const float* __restrict__ x, int64_t n, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

absl::Status Copy2D(const DeviceContext& ctx, float* dst, int64_t dst_cols, const float* src,
                    int64_t src_cols, int64_t cols, int64_t rows) {
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  return CudaStatus(
      cudaMemcpy2DAsync(dst, sizeof(float) * dst_cols, src, sizeof(float) * src_cols,
                        sizeof(float) * cols, rows, cudaMemcpyDeviceToDevice, ComputeStream(ctx)),
      "cudaMemcpy2DAsync");
}

}  // namespace

absl::Status ConcatColumnsCuda(const DeviceContext& ctx, const float* a, int64_t a_cols,
                               const float* c, int64_t c_cols, int64_t batch, float* out) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "ConcatColumns", "dense/row_ops_cuda.cu"));
  const int64_t w = a_cols + c_cols;
  TESSERA_RETURN_IF_ERROR(Copy2D(ctx, out, w, a, a_cols, a_cols, batch));
  return Copy2D(ctx, out + a_cols, w, c, c_cols, c_cols, batch);
}

absl::Status SplitColumnsCuda(const DeviceContext& ctx, const float* in, int64_t a_cols,
                              int64_t c_cols, int64_t batch, float* a, float* c) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "SplitColumns", "dense/row_ops_cuda.cu"));
  const int64_t w = a_cols + c_cols;
  TESSERA_RETURN_IF_ERROR(Copy2D(ctx, a, a_cols, in, w, a_cols, batch));
  return Copy2D(ctx, c, c_cols, in + a_cols, w, c_cols, batch);
}

absl::Status AddInPlaceCuda(const DeviceContext& ctx, const float* x, int64_t n, float* y) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "AddInPlace", "dense/row_ops_cuda.cu"));
  if (n <= 0) return absl::OkStatus();
  AddKernel<<<GridFor(n, 256), 256, 0, ComputeStream(ctx)>>>(x, n, y);
  return CudaLaunchStatus("AddKernel");
}

absl::Status CopyFloatsCuda(const DeviceContext& ctx, const float* src, int64_t n, float* dst) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "CopyFloats", "dense/row_ops_cuda.cu"));
  if (n <= 0) return absl::OkStatus();
  return CudaStatus(
      cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, ComputeStream(ctx)),
      "cudaMemcpyAsync(device to device)");
}

}  // namespace tessera::dense_internal
