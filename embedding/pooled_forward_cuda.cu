// CUDA twin of pooled_lookup.h's forward (contracts in embedding/pooled_lookup_cuda.h).
//
// A group of T lanes per bag (T a power of two, T * 4 >= dim, at most 32): lane l owns columns
// [4l, 4l + 4) (+ 4T, ...) and walks the bag's ids in order, loading its float4 of each row (a
// warp reads 512 contiguous bytes of a dim-128 row at once). Sums stay in registers; the bag's
// order of terms equals the CPU twin's. PoolFusedKernel runs the same per-bag code for several
// features (tables of one dim) in one launch: CudaEmbeddingCollection's forward.
#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "embedding/internal/lookup_cuda_common.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/pooled_lookup_cuda.h"

namespace tessera {
namespace {

using embedding_internal::lookup_cuda::Aligned16;
using embedding_internal::lookup_cuda::BitWidth;
using embedding_internal::lookup_cuda::CheckContext;
using embedding_internal::lookup_cuda::Key;
using embedding_internal::lookup_cuda::kNoBad;
using embedding_internal::lookup_cuda::kThreads;
using embedding_internal::lookup_cuda::LanesLog2;
using embedding_internal::lookup_cuda::ReportSlots;

// One bag's pooled sum, this lane's columns: the ids [jb, je) in order (the CPU twin's order).
template <bool kVec4>
__device__ __forceinline__ void PoolBag(const float* __restrict__ weights, int64_t dim,
                                        const int64_t* __restrict__ indices,
                                        const float* __restrict__ per_id_weights, int64_t jb,
                                        int64_t je, PoolingMode pooling, float* out, int lane,
                                        int lanes) {
  const float scale =
      (pooling == PoolingMode::kMean && je > jb) ? 1.0f / static_cast<float>(je - jb) : 1.0f;
  if constexpr (kVec4) {
    for (int64_t c = 4 * lane; c < dim; c += 4 * lanes) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int64_t j = jb; j < je; ++j) {
        const float4 r = __ldg(reinterpret_cast<const float4*>(weights + indices[j] * dim + c));
        const float s = per_id_weights != nullptr ? per_id_weights[j] : 1.0f;
        acc.x += s * r.x;
        acc.y += s * r.y;
        acc.z += s * r.z;
        acc.w += s * r.w;
      }
      *reinterpret_cast<float4*>(out + c) =
          make_float4(acc.x * scale, acc.y * scale, acc.z * scale, acc.w * scale);
    }
  } else {
    for (int64_t c = lane; c < dim; c += lanes) {
      float acc = 0.0f;
#pragma unroll 4
      for (int64_t j = jb; j < je; ++j) {
        const float s = per_id_weights != nullptr ? per_id_weights[j] : 1.0f;
        acc += s * __ldg(weights + indices[j] * dim + c);
      }
      out[c] = acc * scale;
    }
  }
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) PoolKernel(PooledLookupArgs a, int lanes_log2) {
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t groups = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> lanes_log2;
  for (int64_t bag = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> lanes_log2;
       bag < a.num_bags; bag += groups) {
    PoolBag<kVec4>(static_cast<const float*>(a.weights), a.dim, a.indices, a.per_id_weights, a.offsets[bag],
                   a.offsets[bag + 1], a.pooling, a.out + bag * a.out_stride, lane, lanes);
  }
}

// Several features in one launch: group g is bag g % num_bags of the launch's feature
// g / num_bags. __grid_constant__: the per-feature arrays are read from the parameter space
// with a computed index, without a per-thread copy of the struct.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
    PoolFusedKernel(const __grid_constant__ FusedLookupArgs a, int lanes_log2) {
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t groups = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> lanes_log2;
  const int64_t total = a.num_bags * a.num_features;
  for (int64_t g = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> lanes_log2;
       g < total; g += groups) {
    const int k = static_cast<int>(g / a.num_bags);
    const int64_t bag = g - static_cast<int64_t>(k) * a.num_bags;
    const int64_t o = static_cast<int64_t>(a.feature[k]) * a.num_bags + bag;
    PoolBag<kVec4>(a.weights[k], a.dim, a.indices, a.per_id_weights, a.offsets[o],
                   a.offsets[o + 1], a.pooling[k], a.out + bag * a.out_stride + a.out_column[k],
                   lane, lanes);
  }
}

__global__ void CheckIndicesKernel(const int64_t* __restrict__ indices, int64_t begin, int64_t end,
                                   int64_t num_slots, int64_t* counters) {
  int64_t bad = kNoBad;
  for (int64_t j = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < end;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = indices[j];
    if ((s < 0 || s >= num_slots) && j < bad) bad = j;
  }
  ReportSlots(0, bad, counters);
}

}  // namespace

absl::Status PooledLookupForwardCuda(const DeviceContext& ctx, const PooledLookupArgs& a) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "PooledLookupForward"));
  constexpr const char* kOp = "PooledLookupForward";
  TESSERA_RETURN_IF_ERROR(embedding_internal::CheckForwardArgs(kOp, a));
  TESSERA_RETURN_IF_ERROR(embedding_internal::CheckFp32ForCuda(kOp, a.weight_dtype));
  if (a.num_bags == 0) return absl::OkStatus();
  // The ids' range [ends[0], ends[1]) is read from the device only when needed: to check slots,
  // or to accept null indices/weights, which the CPU twin allows when every bag is empty (a
  // shard that received no id this step).
  int64_t ends[2] = {0, 0};
  const bool null_data = a.indices == nullptr || a.weights == nullptr;
  if (a.num_slots >= 0 || null_data) {
    TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &ends[0], a.offsets, sizeof(int64_t)));
    TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &ends[1], a.offsets + a.num_bags, sizeof(int64_t)));
  }
  if (null_data && ends[1] > ends[0]) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": null indices or weights (device "
                                                   "pointers) for ",
                                                   ends[1] - ends[0], " ids"));
  }
  if (a.num_slots >= 0) {
    TESSERA_ASSIGN_OR_RETURN(void* c, CudaMallocAsync(ctx, 3 * sizeof(int64_t)));
    int64_t* counters = static_cast<int64_t*>(c);
    static const int64_t kInit[3] = {0, 0, kNoBad};
    absl::Status st = CudaCopyToDevice(ctx, counters, kInit, sizeof(kInit));
    int64_t host[3] = {0, 0, kNoBad};
    if (st.ok() && ends[1] > ends[0]) {
      CheckIndicesKernel<<<GridFor(ends[1] - ends[0], kThreads), kThreads, 0, ComputeStream(ctx)>>>(
          a.indices, ends[0], ends[1], a.num_slots, counters);
      st = CudaLaunchStatus("CheckIndicesKernel");
      if (st.ok()) st = CudaCopyToHost(ctx, host, counters, sizeof(host));
    }
    TESSERA_RETURN_IF_ERROR(CudaFreeAsync(ctx, counters));
    TESSERA_RETURN_IF_ERROR(st);
    if (host[2] != kNoBad) {
      int64_t v = 0;
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &v, a.indices + host[2], sizeof(v)));
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": index ", v, " at ", host[2], " outside [0, ", a.num_slots, ")"));
    }
  }
  const bool vec4 =
      a.dim % 4 == 0 && a.out_stride % 4 == 0 && Aligned16(a.weights) && Aligned16(a.out);
  const int lanes_log2 = LanesLog2(a.dim, vec4 ? 4 : 1);
  const int64_t threads = a.num_bags << lanes_log2;
  if (vec4) {
    PoolKernel<true>
        <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(a, lanes_log2);
  } else {
    PoolKernel<false>
        <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(a, lanes_log2);
  }
  return CudaLaunchStatus("PoolKernel");
}

absl::Status PooledLookupForwardFusedCuda(const DeviceContext& ctx, const FusedLookupArgs& a) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "PooledLookupForwardFused"));
  constexpr const char* kOp = "PooledLookupForwardFused";
  if (a.dim <= 0 || a.out_stride < a.dim || a.num_bags < 0 || a.num_features < 0 ||
      a.num_features > kMaxFusedFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": dim ", a.dim, ", out_stride ",
                                                   a.out_stride, ", num_bags ", a.num_bags,
                                                   ", num_features ", a.num_features));
  }
  if (a.num_bags == 0 || a.num_features == 0) return absl::OkStatus();
  if (a.offsets == nullptr || a.out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": null offsets or out"));
  }
  bool vec4 = a.dim % 4 == 0 && a.out_stride % 4 == 0 && Aligned16(a.out);
  for (int k = 0; k < a.num_features; ++k) {
    if (a.weights[k] == nullptr || a.feature[k] < 0 || a.out_column[k] < 0 ||
        a.out_column[k] + a.dim > a.out_stride) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": feature ", a.feature[k],
                                                     " has null weights or output column ",
                                                     a.out_column[k], " outside the row"));
    }
    vec4 = vec4 && a.out_column[k] % 4 == 0 && Aligned16(a.weights[k]);
  }
  // Null indices are fine where every bag of the launch is empty, as in PooledLookupForwardCuda
  // (the offsets are read only then).
  for (int k = 0; a.indices == nullptr && k < a.num_features; ++k) {
    int64_t ends[2] = {0, 0};
    const int64_t o = static_cast<int64_t>(a.feature[k]) * a.num_bags;
    TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &ends[0], a.offsets + o, sizeof(int64_t)));
    TESSERA_RETURN_IF_ERROR(
        CudaCopyToHost(ctx, &ends[1], a.offsets + o + a.num_bags, sizeof(int64_t)));
    if (ends[1] > ends[0]) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": null indices for ", ends[1] - ends[0],
                                                     " ids of feature ", a.feature[k]));
    }
  }
  const int lanes_log2 = LanesLog2(a.dim, vec4 ? 4 : 1);
  const int64_t threads = (a.num_bags * a.num_features) << lanes_log2;
  if (vec4) {
    PoolFusedKernel<true>
        <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(a, lanes_log2);
  } else {
    PoolFusedKernel<false>
        <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(a, lanes_log2);
  }
  return CudaLaunchStatus("PoolFusedKernel");
}

}  // namespace tessera
