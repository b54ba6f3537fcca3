// CUDA twin of the dense optimizer steps: one thread per element (grid-stride), each applying
// the shared rule of dense/internal/optimizer_rules.h, so the CPU and CUDA twins run the same
// formula (up to the compiler's fused multiply-adds). Elementwise: any launch gives the same bits.
#include "core/cuda_status_cuda.h"
#include "dense/internal/blas_cuda.h"
#include "dense/internal/kernels.h"
#include "dense/internal/optimizer_rules.h"

namespace tessera::dense_internal {
namespace {

constexpr int kThreads = 256;

__global__ void SgdKernel(DenseStepScalars s, int64_t n, float* __restrict__ w,
                          const float* __restrict__ g) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    SgdUpdate(s, &w[i], g[i]);
  }
}

__global__ void AdagradKernel(DenseStepScalars s, int64_t n, float* __restrict__ w,
                              const float* __restrict__ g, float* __restrict__ sum) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    AdagradUpdate(s, &w[i], g[i], &sum[i]);
  }
}

__global__ void AdamKernel(DenseStepScalars s, int64_t n, float* __restrict__ w,
                           const float* __restrict__ g, float* __restrict__ m,
                           float* __restrict__ v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    AdamUpdate(s, &w[i], g[i], &m[i], &v[i]);
  }
}

}  // namespace

absl::Status SgdStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                         const float* g) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "DenseOptimizer::Step", "dense/optimizer_cuda.cu"));
  if (n <= 0) return absl::OkStatus();
  SgdKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(s, n, w, g);
  return CudaLaunchStatus("SgdKernel");
}

absl::Status AdagradStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n,
                             float* w, const float* g, float* sum) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "DenseOptimizer::Step", "dense/optimizer_cuda.cu"));
  if (n <= 0) return absl::OkStatus();
  AdagradKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(s, n, w, g, sum);
  return CudaLaunchStatus("AdagradKernel");
}

absl::Status AdamStepCuda(const DeviceContext& ctx, const DenseStepScalars& s, int64_t n, float* w,
                          const float* g, float* m, float* v) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "DenseOptimizer::Step", "dense/optimizer_cuda.cu"));
  if (n <= 0) return absl::OkStatus();
  AdamKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(s, n, w, g, m, v);
  return CudaLaunchStatus("AdamKernel");
}

}  // namespace tessera::dense_internal
