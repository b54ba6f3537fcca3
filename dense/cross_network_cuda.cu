// CUDA twin of one DCNv2 cross layer (contract in dense/internal/kernels.h): cuBLAS for the
// products (row-major through the transposition trick), one elementwise kernel for
// inner += b, x_next = x0 * inner + x_l, and one fused column kernel for the backward's
// d_inner = g * x0, dx0 (+)= g * inner and the bias gradient (a deterministic column sum,
// dense/internal/column_sums_cuda.h). Same products and the same order of terms as the CPU twin.
#include "dense/internal/blas_cuda.h"
#include "dense/internal/column_sums_cuda.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

// Grid-stride over the flat [rows * dim] arrays (coalesced).
__global__ void CombineKernel(const float* __restrict__ x0, const float* __restrict__ xl,
                              const float* __restrict__ b, int64_t n, int64_t dim,
                              float* __restrict__ inner, float* __restrict__ x_next) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = inner[i] + __ldg(b + i % dim);
    inner[i] = v;
    x_next[i] = x0[i] * v + xl[i];
  }
}

// Block (32, 8) over a chunk of kColumnChunkRows rows x 32 columns (see column_sums_cuda.h).
__global__ void CombineBackwardChunkKernel(const float* __restrict__ x0,
                                           const float* __restrict__ inner,
                                           const float* __restrict__ g, int64_t rows, int64_t dim,
                                           bool assign_dx0, float* __restrict__ dx0,
                                           float* __restrict__ d_inner,
                                           double* __restrict__ partial) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColumnTileCols) + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColumnChunkRows;
  const int64_t r1 = min(rows, r0 + kColumnChunkRows);
  double acc = 0.0;
  if (col < dim) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRowLanes) {
      const int64_t o = r * dim + col;
      const float gv = g[o];
      const float di = gv * x0[o];
      d_inner[o] = di;
      acc += static_cast<double>(di);
      const float t = gv * inner[o];
      dx0[o] = assign_dx0 ? t : dx0[o] + t;
    }
  }
  StoreChunkPartial(acc, col, dim, partial);
}

}  // namespace

absl::Status CrossLayerForwardCuda(const DeviceContext& ctx, const CrossLayerParams& p,
                                   const float* x0, const float* xl, int64_t batch, float* inner,
                                   float* low, float* x_next) {
  TESSERA_RETURN_IF_ERROR(
      CheckCudaContext(ctx, "CrossLayerForward", "dense/cross_network_cuda.cu"));
  const int64_t dim = p.dim;
  if (p.rank == 0) {
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, false, true, batch, dim, dim, 1.0f, xl, dim, p.w, dim, 0.0f, inner, dim));
  } else {
    TESSERA_RETURN_IF_ERROR(CudaSgemm(ctx, false, true, batch, p.rank, dim, 1.0f, xl, dim, p.v, dim,
                                      0.0f, low, p.rank));
    TESSERA_RETURN_IF_ERROR(CudaSgemm(ctx, false, true, batch, dim, p.rank, 1.0f, low, p.rank, p.u,
                                      p.rank, 0.0f, inner, dim));
  }
  const int64_t n = batch * dim;
  CombineKernel<<<GridFor(n, 256), 256, 0, ComputeStream(ctx)>>>(x0, xl, p.b, n, dim, inner,
                                                                 x_next);
  return CudaLaunchStatus("CombineKernel");
}

absl::Status CrossLayerBackwardCuda(const DeviceContext& ctx, const CrossLayerParams& p,
                                    const float* x0, const float* xl, const float* inner,
                                    const float* low, int64_t batch, float* g, bool assign_dx0,
                                    float* dx0, float* d_inner, float* d_low,
                                    const CrossLayerGrads& grads) {
  TESSERA_RETURN_IF_ERROR(
      CheckCudaContext(ctx, "CrossLayerBackward", "dense/cross_network_cuda.cu"));
  const int64_t dim = p.dim;
  TESSERA_RETURN_IF_ERROR(DeterministicColumnSums(
      ctx, batch, dim, grads.db, [&](dim3 grid, dim3 block, double* partial) {
        CombineBackwardChunkKernel<<<grid, block, 0, ComputeStream(ctx)>>>(
            x0, inner, g, batch, dim, assign_dx0, dx0, d_inner, partial);
      }));
  // x_{l+1} = x0 * inner + x_l: g already is the x_l term; add the path through inner.
  if (p.rank == 0) {
    TESSERA_RETURN_IF_ERROR(CudaSgemm(ctx, true, false, dim, dim, batch, 1.0f, d_inner, dim, xl,
                                      dim, 0.0f, grads.dw, dim));
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, false, false, batch, dim, dim, 1.0f, d_inner, dim, p.w, dim, 1.0f, g, dim));
  } else {
    const int64_t r = p.rank;
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, true, false, dim, r, batch, 1.0f, d_inner, dim, low, r, 0.0f, grads.du, r));
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, false, false, batch, r, dim, 1.0f, d_inner, dim, p.u, r, 0.0f, d_low, r));
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, true, false, r, dim, batch, 1.0f, d_low, r, xl, dim, 0.0f, grads.dv, dim));
    TESSERA_RETURN_IF_ERROR(
        CudaSgemm(ctx, false, false, batch, dim, r, 1.0f, d_low, r, p.v, dim, 1.0f, g, dim));
  }
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
