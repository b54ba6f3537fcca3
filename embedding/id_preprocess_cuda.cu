// CUDA id preprocessing of the input dist (contracts in embedding/pooled_lookup_cuda.h):
// deduplication (DedupIdsCuda) and bucketisation by owner (BucketizeIdsCuda), on the backward's
// key-sort machinery (cuda_workspace_access.cuh): a key per id, (value << position_bits) |
// position, with value the id itself or its bucket; a stable CUB radix sort over the value bits;
// run starts scanned into unique ids (dedup) or bucket offsets found at owner changes (bucketise).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "embedding/internal/cuda_workspace_access.cuh"
#include "embedding/internal/lookup_cuda_common.h"
#include "embedding/pooled_lookup_cuda.h"

namespace tessera {
namespace {

using embedding_internal::lookup_cuda::BitWidth;
using embedding_internal::lookup_cuda::CheckContext;
using embedding_internal::lookup_cuda::Key;
using embedding_internal::lookup_cuda::kNoBad;
using embedding_internal::lookup_cuda::kThreads;
using embedding_internal::lookup_cuda::ReportSlots;

// keys[i] = (value(ids[i]) << pos_bits) | i, value = the id itself or its bucket.
__global__ void IdKeysKernel(const int64_t* __restrict__ ids, int64_t n, int pos_bits, bool check,
                             int num_buckets, int64_t rows_per_bucket, bool modulo,
                             Key* __restrict__ keys, int64_t* counters) {
  int64_t max_v = 0, bad = kNoBad;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t v = ids[i];
    if (num_buckets > 0) {
      v = modulo ? v % num_buckets : v / rows_per_bucket;
      v = min(max(v, int64_t{0}), static_cast<int64_t>(num_buckets - 1));
    } else if (check) {
      if (v < 0) {
        bad = min(bad, i);
        v = 0;
      }
      max_v = max(max_v, v);
    }
    keys[i] = (static_cast<Key>(v) << pos_bits) | static_cast<Key>(i);
  }
  if (check) ReportSlots(max_v, bad, counters);
}

__global__ void DedupScatterKernel(const Key* __restrict__ keys, const int* __restrict__ heads,
                                   const int* __restrict__ run_ids, int64_t n, int pos_bits,
                                   int64_t* __restrict__ unique, int64_t* __restrict__ inverse,
                                   int64_t* __restrict__ num_unique) {
  const Key mask = (Key{1} << pos_bits) - 1;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t u = run_ids[i] - 1;
    inverse[keys[i] & mask] = u;
    if (heads[i]) unique[u] = static_cast<int64_t>(keys[i] >> pos_bits);
    if (i == n - 1) *num_unique = run_ids[i];
  }
}

__global__ void BucketScatterKernel(const Key* __restrict__ keys, const int64_t* __restrict__ ids,
                                    int64_t n, int pos_bits, int num_buckets,
                                    int64_t rows_per_bucket, bool modulo,
                                    int64_t* __restrict__ local_ids,
                                    int64_t* __restrict__ positions,
                                    int64_t* __restrict__ bucket_offsets) {
  const Key mask = (Key{1} << pos_bits) - 1;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pos = static_cast<int64_t>(keys[k] & mask);
    const int64_t owner = static_cast<int64_t>(keys[k] >> pos_bits);
    const int64_t id = ids[pos];
    positions[k] = pos;
    local_ids[k] = modulo ? id / num_buckets : id - owner * rows_per_bucket;
    // Bucket offsets: bucket b starts at the first k whose owner is >= b.
    const int64_t prev = k == 0 ? -1 : static_cast<int64_t>(keys[k - 1] >> pos_bits);
    for (int64_t b = prev + 1; b <= owner; ++b) bucket_offsets[b] = k;
    if (k == n - 1) {
      for (int64_t b = owner + 1; b <= num_buckets; ++b) bucket_offsets[b] = n;
    }
  }
}

}  // namespace

absl::Status CudaWorkspaceAccess::Dedup(const DeviceContext& ctx, const int64_t* ids, int64_t n,
                                        int id_bits, CudaEmbeddingWorkspace* ws, int64_t* unique,
                                        int64_t* inverse, int64_t* num_unique) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "DedupIdsCuda"));
  constexpr const char* kOp = "DedupIdsCuda";
  if (ws == nullptr || num_unique == nullptr || n < 0 || n >= (int64_t{1} << 31) ||
      (n > 0 && (ids == nullptr || unique == nullptr || inverse == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": null pointer or n = ", n, " outside [0, 2^31)"));
  }
  TESSERA_RETURN_IF_ERROR(Reserve(ctx, ws, n, 0));
  TESSERA_RETURN_IF_ERROR(ResetCounters(ctx, ws));
  if (n == 0) return CudaMemsetAsync(ctx, num_unique, 0, sizeof(int64_t));
  const int pos_bits = BitWidth(static_cast<uint64_t>(n - 1));
  const bool check = id_bits <= 0;
  IdKeysKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      ids, n, pos_bits, check, 0, 0, false, ws->keys_, ws->counters_);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("IdKeysKernel");
  if (check) {
    int64_t c[3];
    TESSERA_RETURN_IF_ERROR(ReadCounters(ctx, ws, c));
    if (c[2] != kNoBad) {
      int64_t id = 0;
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &id, ids + c[2], sizeof(id)));
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": ids[", c[2], "] = ", id, " is negative"));
    }
    id_bits = BitWidth(static_cast<uint64_t>(c[1]));
  }
  if (pos_bits + id_bits > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ids of ", id_bits, " bits and ", n, " ids exceed a 64-bit key"));
  }
  TESSERA_RETURN_IF_ERROR(SortKeys(ctx, ws, n, pos_bits, pos_bits + id_bits));
  TESSERA_RETURN_IF_ERROR(Runs(ctx, ws, n, pos_bits));
  DedupScatterKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      ws->keys_, ws->heads_, ws->run_ids_, n, pos_bits, unique, inverse, num_unique);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("DedupScatterKernel");
  return absl::OkStatus();
}

absl::Status CudaWorkspaceAccess::Bucketize(const DeviceContext& ctx, const BucketizeArgs& a,
                                            CudaEmbeddingWorkspace* ws) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "BucketizeIdsCuda"));
  constexpr const char* kOp = "BucketizeIdsCuda";
  if (ws == nullptr || a.bucket_offsets == nullptr || a.num_buckets < 1 || a.n < 0 ||
      a.n >= (int64_t{1} << 31) || (!a.modulo && a.rows_per_bucket < 1) ||
      (a.n > 0 && (a.ids == nullptr || a.local_ids == nullptr || a.positions == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": null pointer, n = ", a.n, ", num_buckets = ", a.num_buckets,
                     " or rows_per_bucket = ", a.rows_per_bucket, " out of range"));
  }
  TESSERA_RETURN_IF_ERROR(Reserve(ctx, ws, a.n, 0));
  if (a.n == 0) {
    return CudaMemsetAsync(ctx, a.bucket_offsets, 0, sizeof(int64_t) * (a.num_buckets + 1));
  }
  const int pos_bits = BitWidth(static_cast<uint64_t>(a.n - 1));
  const int owner_bits = BitWidth(static_cast<uint64_t>(a.num_buckets - 1));
  if (pos_bits + owner_bits > 64) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": too many ids and buckets"));
  }
  IdKeysKernel<<<GridFor(a.n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      a.ids, a.n, pos_bits, false, a.num_buckets, a.rows_per_bucket, a.modulo, ws->keys_,
      ws->counters_);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("IdKeysKernel");
  TESSERA_RETURN_IF_ERROR(SortKeys(ctx, ws, a.n, pos_bits, pos_bits + owner_bits));
  BucketScatterKernel<<<GridFor(a.n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      ws->keys_, a.ids, a.n, pos_bits, a.num_buckets, a.rows_per_bucket, a.modulo, a.local_ids,
      a.positions, a.bucket_offsets);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("BucketScatterKernel");
  return absl::OkStatus();
}

absl::Status DedupIdsCuda(const DeviceContext& ctx, const int64_t* ids, int64_t n, int id_bits,
                          CudaEmbeddingWorkspace* ws, int64_t* unique, int64_t* inverse,
                          int64_t* num_unique) {
  return CudaWorkspaceAccess::Dedup(ctx, ids, n, id_bits, ws, unique, inverse, num_unique);
}

absl::Status BucketizeIdsCuda(const DeviceContext& ctx, const BucketizeArgs& args,
                              CudaEmbeddingWorkspace* ws) {
  return CudaWorkspaceAccess::Bucketize(ctx, args, ws);
}

}  // namespace tessera
