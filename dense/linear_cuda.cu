// CUDA twin of Linear (contract in dense/mlp.h and dense/internal/kernels.h): cuBLAS for the
// three products (row-major through the transposition trick, dense/internal/blas_cuda.h), one
// fused bias + activation pass over y, and one fused pass for the ReLU mask and the bias
// gradient (a deterministic column sum, dense/internal/column_sums_cuda.h). dense_dtype bf16: the
// same with the three products' operands rounded to bf16 on the device and multiplied by
// cublasGemmEx (bf16 inputs, fp32 accumulation): the twin of LinearForwardBf16Cpu.
#include <cuda_bf16.h>

#include "dense/internal/blas_cuda.h"
#include "dense/internal/column_sums_cuda.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

// y[r, c] = act(y[r, c] + b[c]). Grid-stride over the flat [rows * cols] array: consecutive
// threads take consecutive elements (coalesced); b is read through the cache. `v < 0 ? 0 : v`
// keeps NaN visible as the CPU twin does.
__global__ void BiasActKernel(float* __restrict__ y, const float* __restrict__ b, int64_t n,
                              int64_t cols, bool relu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i] + __ldg(b + i % cols);
    y[i] = relu ? (v < 0.0f ? 0.0f : v) : v;
  }
}

// One chunk of kColumnChunkRows rows x 32 columns per block (32, 8): applies the ReLU mask to dy
// (when y is non-null) and sums the chunk's columns in double (see column_sums_cuda.h).
__global__ void MaskColumnChunkKernel(float* __restrict__ dy, const float* __restrict__ y,
                                      int64_t rows, int64_t cols, double* __restrict__ partial) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColumnTileCols) + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColumnChunkRows;
  const int64_t r1 = min(rows, r0 + kColumnChunkRows);
  double acc = 0.0;
  if (col < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRowLanes) {
      float v = dy[r * cols + col];
      if (y != nullptr) {
        v = y[r * cols + col] > 0.0f ? v : 0.0f;
        dy[r * cols + col] = v;
      }
      acc += static_cast<double>(v);
    }
  }
  StoreChunkPartial(acc, col, cols, partial);
}

// out[i] = x[i] rounded to bf16, to nearest even (NaN stays NaN), as the CPU twin's FloatToBf16.
__global__ void ToBf16Kernel(const float* __restrict__ x, int64_t n,
                             __nv_bfloat16* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(x[i]);
  }
}

// *buf (device bf16) rounded from x[0, n); grows *buf to n elements when short.
absl::Status ToBf16(const DeviceContext& ctx, const float* x, int64_t n, Buffer* buf) {
  if (buf->numel() < n) {
    TESSERA_ASSIGN_OR_RETURN(*buf, Buffer::Allocate(Device::kCuda, DType::kBF16, {n}));
  }
  ToBf16Kernel<<<GridFor(n, 256), 256, 0, ComputeStream(ctx)>>>(
      x, n, static_cast<__nv_bfloat16*>(buf->raw()));
  return CudaLaunchStatus("ToBf16Kernel");
}

}  // namespace

absl::Status LinearForwardBf16Cuda(const DeviceContext& ctx, const float* x, const float* w,
                                   const float* b, int64_t batch, int64_t in, int64_t out,
                                   Activation act, float* y, Bf16OperandsCuda* s) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "LinearForward(bf16)", "dense/linear_cuda.cu"));
  TESSERA_RETURN_IF_ERROR(ToBf16(ctx, x, batch * in, &s->x));
  TESSERA_RETURN_IF_ERROR(ToBf16(ctx, w, out * in, &s->w));
  TESSERA_RETURN_IF_ERROR(
      CudaGemmBf16(ctx, false, true, batch, out, in, s->x.raw(), in, s->w.raw(), in, y, out));
  const int64_t n = batch * out;
  BiasActKernel<<<GridFor(n, 256), 256, 0, ComputeStream(ctx)>>>(y, b, n, out,
                                                                 act == Activation::kRelu);
  return CudaLaunchStatus("BiasActKernel");
}

absl::Status LinearBackwardBf16Cuda(const DeviceContext& ctx, const float* y, float* dy,
                                    int64_t batch, int64_t in, int64_t out, Activation act,
                                    float* dw, float* db, float* dx, Bf16OperandsCuda* s) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "LinearBackward(bf16)", "dense/linear_cuda.cu"));
  if (s->x.numel() < batch * in || s->w.numel() < out * in) {
    return absl::FailedPreconditionError("LinearBackward(bf16): no bf16 forward operands");
  }
  const float* mask = act == Activation::kRelu ? y : nullptr;
  TESSERA_RETURN_IF_ERROR(
      DeterministicColumnSums(ctx, batch, out, db, [&](dim3 grid, dim3 block, double* partial) {
        MaskColumnChunkKernel<<<grid, block, 0, ComputeStream(ctx)>>>(dy, mask, batch, out,
                                                                      partial);
      }));
  TESSERA_RETURN_IF_ERROR(ToBf16(ctx, dy, batch * out, &s->dy));
  TESSERA_RETURN_IF_ERROR(
      CudaGemmBf16(ctx, true, false, out, in, batch, s->dy.raw(), out, s->x.raw(), in, dw, in));
  if (dx != nullptr) {
    TESSERA_RETURN_IF_ERROR(CudaGemmBf16(ctx, false, false, batch, in, out, s->dy.raw(), out,
                                         s->w.raw(), in, dx, in));
  }
  return absl::OkStatus();
}

absl::Status LinearForwardCuda(const DeviceContext& ctx, const float* x, const float* w,
                               const float* b, int64_t batch, int64_t in, int64_t out,
                               Activation act, float* y) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "LinearForward", "dense/linear_cuda.cu"));
  TESSERA_RETURN_IF_ERROR(
      CudaSgemm(ctx, false, true, batch, out, in, 1.0f, x, in, w, in, 0.0f, y, out));
  const int64_t n = batch * out;
  BiasActKernel<<<GridFor(n, 256), 256, 0, ComputeStream(ctx)>>>(y, b, n, out,
                                                                 act == Activation::kRelu);
  return CudaLaunchStatus("BiasActKernel");
}

absl::Status LinearBackwardCuda(const DeviceContext& ctx, const float* x, const float* w,
                                const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                                Activation act, float* dw, float* db, float* dx) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "LinearBackward", "dense/linear_cuda.cu"));
  const float* mask = act == Activation::kRelu ? y : nullptr;
  TESSERA_RETURN_IF_ERROR(
      DeterministicColumnSums(ctx, batch, out, db, [&](dim3 grid, dim3 block, double* partial) {
        MaskColumnChunkKernel<<<grid, block, 0, ComputeStream(ctx)>>>(dy, mask, batch, out,
                                                                      partial);
      }));
  TESSERA_RETURN_IF_ERROR(
      CudaSgemm(ctx, true, false, out, in, batch, 1.0f, dy, out, x, in, 0.0f, dw, in));
  if (dx != nullptr) {
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, false, false, batch, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in));
  }
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
