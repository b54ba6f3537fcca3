// Helpers shared by the embedding CUDA kernels (pooled_forward_cuda.cu, pooled_lookup_cuda.cu):
// launch width, lane counts, alignment, the context check, and the warp reductions that report
// slot ranges to the host. CUDA sources only (device code).
#pragma once

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/device.h"

namespace tessera::embedding_internal::lookup_cuda {

constexpr int kThreads = 256;
constexpr int64_t kNoBad = std::numeric_limits<int64_t>::max();
using Key = unsigned long long;

inline int BitWidth(uint64_t x) {
  int b = 0;
  while (x != 0) ++b, x >>= 1;
  return b;
}

// log2 of the lanes per bag/row: the power of two covering dim / vec, at most 32.
inline int LanesLog2(int64_t dim, int vec) {
  const int64_t need = (dim + vec - 1) / vec;
  int l = 0;
  while (l < 5 && (int64_t{1} << l) < need) ++l;
  return l;
}

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// FailedPrecondition unless ctx came from a CudaContext (a hand-made kCuda DeviceContext has no
// stream and would launch on the legacy default stream, unordered with everything else).
inline absl::Status CheckContext(const DeviceContext& ctx, const char* op) {
  if (ctx.is_cuda() && ctx.compute_stream != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      op,
      " (embedding/pooled_*_cuda.cu): the CUDA DeviceContext has no compute stream; "
      "create it with CudaContext::Create (core/cuda_context.h)"));
}

__device__ __forceinline__ int64_t WarpMax(int64_t v) {
  for (int o = 16; o > 0; o /= 2)
    v = max(v, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, v, o)));
  return v;
}
__device__ __forceinline__ int64_t WarpMin(int64_t v) {
  for (int o = 16; o > 0; o /= 2)
    v = min(v, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, v, o)));
  return v;
}

// Folds a thread's max slot and first bad position into counters[1] and counters[2]. Every
// thread of the block must call it (warp shuffles).
__device__ __forceinline__ void ReportSlots(int64_t max_slot, int64_t bad, int64_t* counters) {
  max_slot = WarpMax(max_slot);
  bad = WarpMin(bad);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(reinterpret_cast<long long*>(counters + 1), static_cast<long long>(max_slot));
    atomicMin(reinterpret_cast<long long*>(counters + 2), static_cast<long long>(bad));
  }
}

}  // namespace tessera::embedding_internal::lookup_cuda
