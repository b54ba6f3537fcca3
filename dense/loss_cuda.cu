// CUDA twin of BCE with logits (contract in dense/loss.h). Each block of kBlock threads takes
// kBlock consecutive samples (one per thread; the same fixed blocks as the CPU twin), computes
// each sample's loss in double, writes its gradient, and reduces the block's losses by a fixed
// shared-memory tree. The per-block sums come back to the host and are added in block order, so
// the loss has the same bits on every run (it differs from the CPU twin's sequential block sum
// only by double rounding). A label outside [0, 1] is reported, after the gradient is written,
// as the CPU twin does: each block records its first bad index.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "dense/internal/blas_cuda.h"
#include "dense/internal/kernels.h"

namespace tessera::dense_internal {
namespace {

constexpr int kBlock = 1024;

struct BlockResult {
  double loss;
  long long first_bad_label;  // -1 when none
};

// Launched with kBlock (1024) threads: the bound makes the compiler keep registers within
// 65536 / 1024 = 64 per thread, without which the launch may fail with "too many resources".
__global__ void __launch_bounds__(kBlock) BceKernel(const float* __restrict__ logits, const float* __restrict__ labels,
                          int64_t batch, double inv_batch, float* __restrict__ d_logits,
                          BlockResult* __restrict__ results) {
  __shared__ double sums[kBlock];
  __shared__ long long bad[kBlock];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  double loss = 0.0;
  long long bad_i = -1;
  if (i < batch) {
    const double z = logits[i], y = labels[i];
    if (!(y >= 0.0 && y <= 1.0)) bad_i = i;
    const double e = exp(-fabs(z));
    loss = fmax(z, 0.0) - z * y + log1p(e);
    if (d_logits != nullptr) {
      const double sig = z >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      d_logits[i] = static_cast<float>((sig - y) * inv_batch);
    }
  }
  sums[threadIdx.x] = loss;
  bad[threadIdx.x] = bad_i;
  __syncthreads();
  for (int width = kBlock / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      sums[threadIdx.x] += sums[threadIdx.x + width];
      const long long other = bad[threadIdx.x + width];
      if (other >= 0 && (bad[threadIdx.x] < 0 || other < bad[threadIdx.x])) {
        bad[threadIdx.x] = other;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) results[blockIdx.x] = BlockResult{sums[0], bad[0]};
}

}  // namespace

absl::StatusOr<double> BceWithLogitsCuda(const DeviceContext& ctx, const float* logits,
                                         const float* labels, int64_t batch, float* d_logits) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "BceWithLogits", "dense/loss_cuda.cu"));
  // A mean over no sample (and a launch of 0 blocks) has no meaning; the entry point already
  // wants batch >= 1 (CheckSize).
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("BceWithLogits: batch ", batch, " < 1"));
  }
  const int64_t blocks = (batch + kBlock - 1) / kBlock;
  TESSERA_ASSIGN_OR_RETURN(void* scratch, CudaMallocAsync(ctx, sizeof(BlockResult) * blocks));
  BlockResult* results = static_cast<BlockResult*>(scratch);
  BceKernel<<<static_cast<unsigned>(blocks), kBlock, 0, ComputeStream(ctx)>>>(
      logits, labels, batch, 1.0 / static_cast<double>(batch), d_logits, results);
  absl::Status st = CudaLaunchStatus("BceKernel");
  std::vector<BlockResult> host(static_cast<size_t>(blocks));
  if (st.ok()) st = CudaCopyToHost(ctx, host.data(), results, sizeof(BlockResult) * blocks);
  TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx, scratch));
  TESSERA_RETURN_IF_ERROR(st);
  double total = 0.0;
  for (const BlockResult& r : host) {
    if (r.first_bad_label >= 0) {
      float label = 0.0f;
      TESSERA_RETURN_IF_ERROR(
          CudaCopyToHost(ctx, &label, labels + r.first_bad_label, sizeof(float)));
      return absl::InvalidArgumentError(absl::StrCat("BceWithLogits: labels[", r.first_bad_label,
                                                     "] = ", label, " is outside [0, 1]"));
    }
    total += r.loss;
  }
  return total / static_cast<double>(batch);
}

namespace {
__global__ void ScaleKernel(float* __restrict__ d, int64_t n, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    d[i] *= scale;
  }
}
}  // namespace

absl::Status ScaleGradientCuda(const DeviceContext& ctx, float* d, int64_t n, float scale) {
  TESSERA_RETURN_IF_ERROR(CheckCudaContext(ctx, "ScaleGradient", "dense/loss_cuda.cu"));
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  ScaleKernel<<<static_cast<unsigned>(blocks), 256, 0, ComputeStream(ctx)>>>(d, n, scale);
  return CudaLaunchStatus("ScaleKernel");
}

}  // namespace tessera::dense_internal
