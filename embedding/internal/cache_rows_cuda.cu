// CUDA twins of the row-cache copies (contract in embedding/cache_rows.h). One warp per row,
// lanes over 16-byte words when the rows and both arrays allow it (fp32 rows of dim % 4 == 0),
// 4-byte words or bytes otherwise: a straight copy, so the bits are the CPU twin's.
#include <cstdint>

#include "core/cuda_status_cuda.h"
#include "embedding/internal/cache_rows_kernels.h"

namespace tessera::embedding_internal {
namespace {

template <typename Word, bool kGather>
__global__ void CopyRowsKernel(Word* __restrict__ base, const int64_t* __restrict__ slots,
                               int64_t n, int64_t row_words, Word* __restrict__ packed) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n;
       i += warps) {
    Word* slot = base + slots[i] * row_words;
    Word* row = packed + i * row_words;
    for (int64_t w = lane; w < row_words; w += 32) {
      if (kGather) {
        row[w] = slot[w];
      } else {
        slot[w] = row[w];
      }
    }
  }
}

template <bool kGather>
absl::Status CopyRows(const DeviceContext& ctx, const CacheRowsArgs& a) {
  if (a.n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const unsigned blocks = GridFor(a.n * 32, kThreads);
  const auto addr = reinterpret_cast<uintptr_t>(a.base) | reinterpret_cast<uintptr_t>(a.packed);
  if (a.row_bytes % 16 == 0 && addr % 16 == 0) {
    CopyRowsKernel<int4, kGather><<<blocks, kThreads, 0, ComputeStream(ctx)>>>(
        static_cast<int4*>(a.base), a.slots, a.n, a.row_bytes / 16, static_cast<int4*>(a.packed));
  } else if (a.row_bytes % 4 == 0 && addr % 4 == 0) {
    CopyRowsKernel<uint32_t, kGather><<<blocks, kThreads, 0, ComputeStream(ctx)>>>(
        static_cast<uint32_t*>(a.base), a.slots, a.n, a.row_bytes / 4,
        static_cast<uint32_t*>(a.packed));
  } else {
    CopyRowsKernel<unsigned char, kGather><<<blocks, kThreads, 0, ComputeStream(ctx)>>>(
        static_cast<unsigned char*>(a.base), a.slots, a.n, a.row_bytes,
        static_cast<unsigned char*>(a.packed));
  }
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR(kGather ? "GatherCacheRows" : "ScatterCacheRows");
  return absl::OkStatus();
}

}  // namespace

absl::Status GatherCacheRowsCuda(const DeviceContext& ctx, const CacheRowsArgs& args) {
  return CopyRows<true>(ctx, args);
}

absl::Status ScatterCacheRowsCuda(const DeviceContext& ctx, const CacheRowsArgs& args) {
  return CopyRows<false>(ctx, args);
}

}  // namespace tessera::embedding_internal
