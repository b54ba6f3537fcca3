// CUDA twin of the DLRM dot interaction (contract in dense/interaction.h).
//
// Forward: Z [batch, P, d] (P = F + 1) is the per-sample concatenation [bottom; emb], built by
// one strided 2-D copy; S = Z Z^T [batch, P, P] is one cublasSgemmStridedBatched; a gather kernel
// (one thread per output element, consecutive threads on consecutive outputs of a sample) copies
// bottom and the strict lower triangle of S into TorchRec's layout.
// Backward: a scatter kernel (one thread per element of G) builds the symmetric pair-gradient
// matrix G [batch, P, P] (zero diagonal) from d_out; dZ = G Z is one batched GEMM; a split kernel
// writes d_bottom = dZ_0 + d_out[0, d) and d_emb = dZ_1..F.
// Scratch (Z, S or G, dZ) is stream-ordered (cudaMallocAsync): about batch * P * (2d + P) floats.
#include <cmath>

#include "core/cuda_context.h"
#include "dense/interaction.h"
#include "dense/internal/blas_cuda.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

// Pair index t = i (i - 1) / 2 + j (j < i) -> i. The float estimate is corrected by integer
// checks, so it is exact for any t below 2^31.
__device__ __forceinline__ int64_t PairRow(int64_t t) {
  int64_t i = static_cast<int64_t>((1.0 + sqrt(1.0 + 8.0 * static_cast<double>(t))) * 0.5);
  while (i * (i - 1) / 2 > t) --i;
  while ((i + 1) * i / 2 <= t) ++i;
  return i;
}

__global__ void GatherTriangleKernel(const float* __restrict__ bottom, const float* __restrict__ s,
                                     int64_t batch, int64_t p, int64_t d, int64_t out_dim,
                                     float* __restrict__ out) {
  const int64_t n = batch * out_dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / out_dim, c = e - b * out_dim;
    if (c < d) {
      out[e] = bottom[b * d + c];
    } else {
      const int64_t t = c - d;
      const int64_t i = PairRow(t);
      const int64_t j = t - i * (i - 1) / 2;
      out[e] = s[(b * p + i) * p + j];
    }
  }
}

__global__ void ScatterPairGradKernel(const float* __restrict__ d_out, int64_t batch, int64_t p,
                                      int64_t d, int64_t out_dim, float* __restrict__ g) {
  const int64_t n = batch * p * p;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / (p * p), r = e - b * p * p;
    const int64_t i = r / p, j = r - i * p;
    float v = 0.0f;
    if (i > j) v = d_out[b * out_dim + d + i * (i - 1) / 2 + j];
    if (j > i) v = d_out[b * out_dim + d + j * (j - 1) / 2 + i];
    g[e] = v;
  }
}

__global__ void SplitGradKernel(const float* __restrict__ dz, const float* __restrict__ d_out,
                                int64_t batch, int64_t p, int64_t d, int64_t out_dim,
                                float* __restrict__ d_bottom, float* __restrict__ d_emb) {
  const int64_t w = p * d, n = batch * w;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / w, c = e - b * w;
    if (c < d) {
      d_bottom[b * d + c] = dz[e] + d_out[b * out_dim + c];
    } else {
      d_emb[b * (w - d) + (c - d)] = dz[e];
    }
  }
}

}  // namespace

absl::Status DotInteractionForwardCuda(const DeviceContext& ctx, const float* bottom,
                                       const float* emb, int64_t batch, int64_t num_embeddings,
                                       int64_t dim, float* out) {
  TESSERA_RETURN_IF_ERROR(
      CheckCudaContext(ctx, "DotInteractionForward", "dense/interaction_cuda.cu"));
  const int64_t p = num_embeddings + 1, d = dim;
  const int64_t out_dim = DotInteractionOutputDim(num_embeddings, dim);
  const size_t z_floats = static_cast<size_t>(batch * p * d);
  const size_t s_floats = static_cast<size_t>(batch * p * p);
  TESSERA_ASSIGN_OR_RETURN(void* scratch,
                           CudaMallocAsync(ctx, sizeof(float) * (z_floats + s_floats)));
  float* z = static_cast<float*>(scratch);
  float* s = z + z_floats;
  absl::Status st = ConcatColumnsCuda(ctx, bottom, d, emb, num_embeddings * d, batch, z);
  if (st.ok()) {
    st = CudaSgemmStridedBatched(ctx, false, true, p, p, d, 1.0f, z, d, p * d, z, d, p * d, 0.0f, s,
                                 p, p * p, batch);
  }
  if (st.ok()) {
    GatherTriangleKernel<<<GridFor(batch * out_dim, 256), 256, 0, ComputeStream(ctx)>>>(
        bottom, s, batch, p, d, out_dim, out);
    st = CudaLaunchStatus("GatherTriangleKernel");
  }
  TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx, scratch));
  return st;
}

absl::Status DotInteractionBackwardCuda(const DeviceContext& ctx, const float* bottom,
                                        const float* emb, const float* d_out, int64_t batch,
                                        int64_t num_embeddings, int64_t dim, float* d_bottom,
                                        float* d_emb) {
  TESSERA_RETURN_IF_ERROR(
      CheckCudaContext(ctx, "DotInteractionBackward", "dense/interaction_cuda.cu"));
  const int64_t p = num_embeddings + 1, d = dim;
  const int64_t out_dim = DotInteractionOutputDim(num_embeddings, dim);
  const size_t z_floats = static_cast<size_t>(batch * p * d);
  const size_t g_floats = static_cast<size_t>(batch * p * p);
  TESSERA_ASSIGN_OR_RETURN(void* scratch,
                           CudaMallocAsync(ctx, sizeof(float) * (2 * z_floats + g_floats)));
  float* z = static_cast<float*>(scratch);
  float* dz = z + z_floats;
  float* g = dz + z_floats;
  absl::Status st = ConcatColumnsCuda(ctx, bottom, d, emb, num_embeddings * d, batch, z);
  if (st.ok()) {
    ScatterPairGradKernel<<<GridFor(batch * p * p, 256), 256, 0, ComputeStream(ctx)>>>(
        d_out, batch, p, d, out_dim, g);
    st = CudaLaunchStatus("ScatterPairGradKernel");
  }
  if (st.ok()) {
    st = CudaSgemmStridedBatched(ctx, false, false, p, d, p, 1.0f, g, p, p * p, z, d, p * d, 0.0f,
                                 dz, d, p * d, batch);
  }
  if (st.ok()) {
    SplitGradKernel<<<GridFor(batch * p * d, 256), 256, 0, ComputeStream(ctx)>>>(
        dz, d_out, batch, p, d, out_dim, d_bottom, d_emb);
    st = CudaLaunchStatus("SplitGradKernel");
  }
  TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx, scratch));
  return st;
}

}  // namespace tessera::dense_internal
