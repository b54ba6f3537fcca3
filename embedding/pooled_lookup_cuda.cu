// CUDA twin of pooled_lookup.h's backward and the id preprocessing of the input dist
// (contracts in embedding/pooled_lookup_cuda.h; the forward is in pooled_forward_cuda.cu).
//
// Backward: one thread per id writes a key (slot << position_bits | position), its bag's
// gradient row and its scale; a stable CUB radix sort over the slot bits groups equal slots with
// positions in order; run starts are flagged, scanned (CUB) and scattered into unique slots and
// run boundaries; a group of T lanes per unique slot sums its run in order (same order as the CPU
// twin; runs over 256 entries in pieces cut from the run's own start, run_pieces.h); one warp
// per unique slot applies ApplyRowUpdate, lanes over the columns. The number of
// unique slots stays on the device: kernels read it, so the backward queues without waiting for
// the host. Several tables of one dim share one pass (FusedBackwardUpdateTablesCuda): the table
// index sits above the slot bits of the key, and the update kernel decodes it.
// Dedup and bucketisation reuse the key-sort machinery with ids or owner ranks as keys
// (id_preprocess_cuda.cu).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_context.h"
#include "core/cuda_status_cuda.h"
#include "embedding/internal/cuda_workspace_access.cuh"
#include "embedding/internal/lookup_cuda_common.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/internal/row_update_lanes.h"
#include "embedding/internal/run_pieces.h"
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

// ---- Backward --------------------------------------------------------------------------------

struct KeySource {
  const int64_t* offsets;
  const int64_t* indices;
  const float* per_id_weights;
  int64_t num_bags;
  const float* grad;
  int64_t grad_stride;
  int64_t count;      // ids of this source
  int64_t base;       // position of its first id
  int64_t slot_base;  // added to its slots: table t of a multi-table pass starts at t << bits
};

__global__ void __launch_bounds__(kThreads)
    BuildKeysKernel(KeySource src, bool mean, int pos_bits, bool check, Key* keys,
                    const float** grad_rows, float* scales, int64_t* counters) {
  int64_t max_slot = 0, bad = kNoBad;
  const int64_t o0 = src.offsets[0];
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < src.count;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = o0 + q;
    // The bag of id j: the last b with offsets[b] <= j (empty bags are skipped).
    int64_t lo = 0, hi = src.num_bags;  // answer in [lo, hi)
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (src.offsets[mid] <= j)
        lo = mid;
      else
        hi = mid;
    }
    const int64_t bag = lo;
    const int64_t len = src.offsets[bag + 1] - src.offsets[bag];
    int64_t slot = src.indices[j];
    const int64_t p = src.base + q;
    if (check) {
      if (slot < 0) {
        bad = min(bad, p);
        slot = 0;
      }
      max_slot = max(max_slot, slot + src.slot_base);
    }
    keys[p] = (static_cast<Key>(slot + src.slot_base) << pos_bits) | static_cast<Key>(p);
    grad_rows[p] = src.grad + bag * src.grad_stride;
    const float inv = (mean && len > 0) ? 1.0f / static_cast<float>(len) : 1.0f;
    scales[p] = (src.per_id_weights != nullptr ? src.per_id_weights[j] : 1.0f) * inv;
  }
  if (check) ReportSlots(max_slot, bad, counters);
}

__global__ void RunHeadsKernel(const Key* __restrict__ keys, int64_t n, int pos_bits,
                               int* __restrict__ heads) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    heads[i] = (i == 0 || (keys[i] >> pos_bits) != (keys[i - 1] >> pos_bits)) ? 1 : 0;
  }
}

// With run_ids the inclusive scan of heads: writes unique slots, run starts and the count.
__global__ void RunScatterKernel(const Key* __restrict__ keys, const int* __restrict__ heads,
                                 const int* __restrict__ run_ids, int64_t n, int pos_bits,
                                 int64_t* __restrict__ unique_slots,
                                 int64_t* __restrict__ run_starts, int64_t* counters) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (heads[i]) {
      const int64_t u = run_ids[i] - 1;
      unique_slots[u] = static_cast<int64_t>(keys[i] >> pos_bits);
      run_starts[u] = i;
    }
    if (i == n - 1) {
      counters[0] = run_ids[i];
      run_starts[run_ids[i]] = n;
    }
  }
}

// Per entry: the extra pieces of its run at a run's head, 0 elsewhere (embedding/internal/
// run_pieces.h); its inclusive scan numbers every run's pieces after the first.
// In place: heads_then_extra[i] is read, then overwritten by entry i's thread alone.
__global__ void RunExtraPiecesKernel(int* heads_then_extra, const int* __restrict__ run_ids,
                                     const int64_t* __restrict__ run_starts, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Run run_ids[i] - 1 ends where run run_ids[i] starts.
    heads_then_extra[i] =
        heads_then_extra[i]
            ? static_cast<int>(embedding_internal::RunExtraPieces(run_starts[run_ids[i]] - i))
            : 0;
  }
}

// Run sums in bounded pieces (embedding/internal/run_pieces.h): a run [eb, ee) is summed as
//   piece 0 + piece 1 + ...,  piece k = [eb + 256k, min(ee, eb + 256(k+1))), each in entry order,
// cut relative to the run's own start, so its bits depend on its own entries alone (not on its
// slot number or on the tables sharing the pass); every group does at most 256 sequential loads.
// Runs of at most 256 entries (almost all) are summed in plain entry order, as the CPU twin
// does; longer runs differ from it by rounding only. Three passes of one kernel:
//   mode 0  group per unique run: its piece 0 -> row_grads[u]
//   mode 1  group per extra piece (run, k >= 1): that piece -> chunk_partial[its number]
//   mode 2  group per unique run with extra pieces: row_grads[u] += its partials, k in order
constexpr int64_t kChunkEntries = embedding_internal::kRunPieceEntries;

struct SumArgs {
  const Key* keys;
  const int64_t* run_starts;
  const int* run_ids;
  const int* piece_scan;  // inclusive scan of RunExtraPiecesKernel's output
  const float* const* grad_rows;
  const float* scales;
  Key pos_mask;
  int64_t dim;
  int64_t n;
  int64_t max_rows;
  const int64_t* counters;
  int lanes_log2;
  float* row_grads;
  float* chunk_partial;  // [ceil(n / kChunkEntries), dim]: room for every extra piece
};

// out[c] = sum over entries [e0, e1), in order, of scale * gradient row (this lane's columns).
template <bool kVec4>
__device__ __forceinline__ void SumPiece(const SumArgs& a, int64_t e0, int64_t e1, int lane,
                                         int lanes, float* __restrict__ out) {
  if constexpr (kVec4) {
    for (int64_t c = 4 * lane; c < a.dim; c += 4 * lanes) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t p = static_cast<int64_t>(a.keys[e] & a.pos_mask);
        const float4 g = *reinterpret_cast<const float4*>(a.grad_rows[p] + c);
        const float s = a.scales[p];
        acc.x += s * g.x;
        acc.y += s * g.y;
        acc.z += s * g.z;
        acc.w += s * g.w;
      }
      *reinterpret_cast<float4*>(out + c) = acc;
    }
  } else {
    for (int64_t c = lane; c < a.dim; c += lanes) {
      float acc = 0.0f;
#pragma unroll 4
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t p = static_cast<int64_t>(a.keys[e] & a.pos_mask);
        acc += a.scales[p] * a.grad_rows[p][c];
      }
      out[c] = acc;
    }
  }
}

template <bool kVec4>
__global__ void SumRunsKernel(SumArgs a, int mode) {
  namespace ei = embedding_internal;
  const int lanes = 1 << a.lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t groups = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> a.lanes_log2;
  // Mode 1: the extra pieces (at most ceil(n / 256)); modes 0 and 2: the unique runs.
  const int64_t items = mode == 1 ? static_cast<int64_t>(a.piece_scan[a.n - 1])
                                  : min(a.counters[0], a.max_rows);
  for (int64_t item = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> a.lanes_log2;
       item < items; item += groups) {
    if (mode == 0) {
      const ei::EntryRange r = ei::RunPiece(a.run_starts[item], a.run_starts[item + 1], 0);
      SumPiece<kVec4>(a, r.begin, r.end, lane, lanes, a.row_grads + item * a.dim);
    } else if (mode == 1) {
      const ei::ExtraPiece piece = ei::FindExtraPiece(a.piece_scan, a.n, item);
      const int64_t u = a.run_ids[piece.head] - 1;
      const ei::EntryRange r = ei::RunPiece(piece.head, a.run_starts[u + 1], piece.k);
      SumPiece<kVec4>(a, r.begin, r.end, lane, lanes, a.chunk_partial + item * a.dim);
    } else {
      const int64_t eb = a.run_starts[item], ee = a.run_starts[item + 1];
      const int64_t extra = ei::RunExtraPieces(ee - eb);
      if (extra == 0) continue;
      const int64_t first = ei::ExtraPieceNumber(a.piece_scan, eb, extra, 1);
      float* out = a.row_grads + item * a.dim;
      for (int64_t c = lane; c < a.dim; c += lanes) {
        float acc = out[c];
        for (int64_t k = 0; k < extra; ++k) acc += a.chunk_partial[(first + k) * a.dim + c];
        out[c] = acc;
      }
    }
  }
}

// The tables a pass updates: unique "slot" c is row c & (2^shift - 1) of table c >> shift
// (one table: shift 63, so c is the row). At most kMaxFusedFeatures tables.
struct RowTables {
  int shift = 63;
  int num = 1;
  float* weights[kMaxFusedFeatures] = {};
  float* state[kMaxFusedFeatures] = {};
};

// One warp per unique slot, lanes over the columns: each load and store of the row (weights,
// gradient, Adam's moments) is coalesced, 32 consecutive floats per warp instruction (one
// thread per row read 32 rows at 256-512 byte strides per instruction at dim 64-128). The
// rule is ApplyRowUpdate of embedding/row_optimizer.h, split over lanes as
// embedding/internal/row_update_lanes.h states (same terms, same order; row-wise AdaGrad's sum
// of squares in RowSumOfSquares' 16-partial order). Lane 0 alone reads and writes the AdaGrad
// accumulator and broadcasts it, so no lane can read it after another wrote it. Adam's bias
// corrections come from the host (AdamCorrections): the CPU twin's glibc powf bits, not the
// device powf's (an ulp there is ~1.5e-5 relative in the step at t = 2).
struct AdamCorrections {
  float bc1 = 1.0f, bc2 = 1.0f;
};
AdamCorrections HostAdamCorrections(const RowUpdateArgs& a) {
  AdamCorrections c;
  if (a.optimizer.type == RowOptimizerType::kAdam) {
    // The expressions of ApplyRowUpdate (embedding/row_optimizer.h), evaluated on the host.
    c.bc1 = 1.0f - powf(a.optimizer.beta1, static_cast<float>(a.step));
    c.bc2 = 1.0f - powf(a.optimizer.beta2, static_cast<float>(a.step));
  }
  return c;
}

__global__ void __launch_bounds__(kThreads)
    UpdateRowsKernel(const int64_t* __restrict__ slots, const int64_t* __restrict__ num_unique,
                     int64_t max_rows, const float* __restrict__ row_grads, RowUpdateArgs a,
                     AdamCorrections adam, const __grid_constant__ RowTables tables) {
  namespace ei = embedding_internal;
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const int64_t unique = num_unique != nullptr ? min(*num_unique, max_rows) : max_rows;
  const int64_t sd = RowStateDim(a.optimizer.type, a.dim);
  const int64_t dim = a.dim;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  // u is the same for the 32 lanes of a warp (blockDim.x is a multiple of 32): the loop, the
  // switch and the shuffles are warp-uniform.
  for (int64_t u = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; u < unique;
       u += warps) {
    const int64_t c = slots[u];
    const int t = static_cast<int>(static_cast<uint64_t>(c) >> tables.shift);
    const int64_t slot = static_cast<int64_t>(static_cast<uint64_t>(c) &
                                              ((uint64_t{1} << tables.shift) - 1));
    const float* g = row_grads + u * dim;
    float* w = tables.weights[t] + slot * dim;
    float* st = sd > 0 ? tables.state[t] + slot * sd : nullptr;
    switch (a.optimizer.type) {
      case RowOptimizerType::kSgd:
        for (int64_t k = lane; k < dim; k += 32) ei::SgdColumn(a.lr, g, w, k);
        break;
      case RowOptimizerType::kRowWiseAdagrad: {
        float p = lane < ei::kSumLanes ? ei::RowSumOfSquaresPartial(g, dim, lane) : 0.0f;
        // CombineSumLanes' tree: lane l < width adds lane l + width's partial.
        for (int width = ei::kSumLanes / 2; width > 0; width /= 2) {
          p += __shfl_down_sync(kAll, p, width);
        }
        ei::AdagradScale as{0.0f, 0.0f};
        if (lane == 0) as = ei::RowWiseAdagradScale(a.optimizer, a.lr, st[0], p, dim);
        const float scale = __shfl_sync(kAll, as.scale, 0);
        if (lane == 0) st[0] = as.v;
        for (int64_t k = lane; k < dim; k += 32) ei::AdagradColumn(scale, g, w, k);
        break;
      }
      case RowOptimizerType::kAdam: {
        for (int64_t k = lane; k < dim; k += 32) {
          ei::AdamColumn(a.optimizer, a.lr, adam.bc1, adam.bc2, dim, g, w, st, k);
        }
        break;
      }
      default:  // a rule without a lane split: one lane runs it whole
        if (lane == 0) ApplyRowUpdate(a.optimizer, a.lr, a.step, dim, g, w, st);
        break;
    }
  }
}

}  // namespace

// ---- Host side -------------------------------------------------------------------------------

absl::Status CudaWorkspaceAccess::Runs(const DeviceContext& ctx, CudaEmbeddingWorkspace* ws,
                                       int64_t n, int pos_bits) {
  RunHeadsKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(ws->keys_, n, pos_bits,
                                                                            ws->heads_);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("RunHeadsKernel");
  size_t bytes = ws->cap_scan_;
  return CudaStatus(cub::DeviceScan::InclusiveSum(ws->scan_temp_, bytes, ws->heads_, ws->run_ids_,
                                                  static_cast<int>(n), ComputeStream(ctx)),
                    "cub::DeviceScan::InclusiveSum");
}

// ---- Backward --------------------------------------------------------------------------------

absl::Status CudaWorkspaceAccess::Aggregate(const DeviceContext& ctx,
                                            absl::Span<const BagGradients> sources,
                                            absl::Span<const int64_t> num_ids, int64_t dim,
                                            PoolingMode pooling, int slot_bits,
                                            CudaEmbeddingWorkspace* ws,
                                            absl::Span<const PoolingMode> poolings,
                                            absl::Span<const int64_t> slot_bases) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "AggregateRowGradients"));
  constexpr const char* kOp = "AggregateRowGradientsCuda";
  TESSERA_RETURN_IF_ERROR(embedding_internal::CheckGradientSources(kOp, sources, dim));
  if (ws == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": null workspace"));
  if ((!num_ids.empty() && num_ids.size() != sources.size()) ||
      (!poolings.empty() && poolings.size() != sources.size()) ||
      (!slot_bases.empty() && slot_bases.size() != sources.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": ", num_ids.size(), " id counts, ", poolings.size(), " poolings, ",
        slot_bases.size(), " slot bases for ", sources.size(), " sources"));
  }
  // Per-source id counts and first positions (read from the device when not given).
  std::vector<int64_t> counts(sources.size(), 0), bases(sources.size(), 0);
  int64_t n = 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    const BagGradients& src = sources[s];
    if (src.num_bags == 0) continue;
    if (num_ids.empty()) {
      int64_t ends[2] = {0, 0};
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &ends[0], src.offsets, sizeof(int64_t)));
      TESSERA_RETURN_IF_ERROR(
          CudaCopyToHost(ctx, &ends[1], src.offsets + src.num_bags, sizeof(int64_t)));
      counts[s] = ends[1] - ends[0];
    } else {
      counts[s] = num_ids[s];
    }
    if (counts[s] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": source ", s, " has ", counts[s], " ids (offsets decrease)"));
    }
    if (counts[s] > 0 && src.indices == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": source ", s, " has null indices"));
    }
    bases[s] = n;
    n += counts[s];
  }
  if (n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", n, " ids (at most 2^31 - 1)"));
  }
  TESSERA_RETURN_IF_ERROR(CudaWorkspaceAccess::Reserve(ctx, ws, n, dim));
  TESSERA_RETURN_IF_ERROR(ResetCounters(ctx, ws));
  ws->last_num_ids_ = n;
  if (n == 0) return absl::OkStatus();  // counters_[0] == 0: nothing to update

  const int pos_bits = BitWidth(static_cast<uint64_t>(n - 1));
  const bool check = slot_bits <= 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    if (counts[s] == 0) continue;
    const BagGradients& src = sources[s];
    const KeySource ks{src.offsets,   src.indices, src.per_id_weights,
                       src.num_bags,  src.grad,    src.grad_stride,
                       counts[s],     bases[s],    slot_bases.empty() ? 0 : slot_bases[s]};
    const PoolingMode mode = poolings.empty() ? pooling : poolings[s];
    BuildKeysKernel<<<GridFor(counts[s], kThreads), kThreads, 0, ComputeStream(ctx)>>>(
        ks, mode == PoolingMode::kMean, pos_bits, check, ws->keys_, ws->grad_rows_, ws->scales_,
        ws->counters_);
    TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("BuildKeysKernel");
  }
  if (check) {
    int64_t c[3];
    TESSERA_RETURN_IF_ERROR(ReadCounters(ctx, ws, c));
    if (c[2] != kNoBad) {
      size_t s = 0;
      while (s + 1 < sources.size() && (counts[s] == 0 || c[2] >= bases[s] + counts[s])) ++s;
      int64_t o0 = 0, slot = 0;
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &o0, sources[s].offsets, sizeof(o0)));
      const int64_t j = o0 + (c[2] - bases[s]);
      TESSERA_RETURN_IF_ERROR(CudaCopyToHost(ctx, &slot, sources[s].indices + j, sizeof(slot)));
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": source ", s, " index ", j, " holds slot ", slot, " (negative)"));
    }
    slot_bits = BitWidth(static_cast<uint64_t>(c[1]));
  }
  if (pos_bits + slot_bits > 64) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": slots of ", slot_bits, " bits and ", n,
                                                   " ids do not fit a 64-bit sort key"));
  }
  TESSERA_RETURN_IF_ERROR(SortKeys(ctx, ws, n, pos_bits, pos_bits + slot_bits));
  TESSERA_RETURN_IF_ERROR(Runs(ctx, ws, n, pos_bits));
  RunScatterKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      ws->keys_, ws->heads_, ws->run_ids_, n, pos_bits, ws->unique_slots_, ws->run_starts_,
      ws->counters_);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("RunScatterKernel");

  // Number the runs' pieces after the first (embedding/internal/run_pieces.h): their counts at
  // the run heads (over heads_, which nothing reads after the scatter), then a scan.
  RunExtraPiecesKernel<<<GridFor(n, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      ws->heads_, ws->run_ids_, ws->run_starts_, n);
  TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("RunExtraPiecesKernel");
  size_t scan_bytes = ws->cap_scan_;
  TESSERA_RETURN_IF_ERROR(
      CudaStatus(cub::DeviceScan::InclusiveSum(ws->scan_temp_, scan_bytes, ws->heads_,
                                               ws->piece_scan_, static_cast<int>(n),
                                               ComputeStream(ctx)),
                 "cub::DeviceScan::InclusiveSum(pieces)"));

  bool vec4 = dim % 4 == 0;
  for (const BagGradients& src : sources) {
    if (src.num_bags > 0) vec4 = vec4 && src.grad_stride % 4 == 0 && Aligned16(src.grad);
  }
  const int lanes_log2 = LanesLog2(dim, vec4 ? 4 : 1);
  const int64_t chunks = (n + kChunkEntries - 1) / kChunkEntries;
  const SumArgs sa{ws->keys_,
                   ws->run_starts_,
                   ws->run_ids_,
                   ws->piece_scan_,
                   ws->grad_rows_,
                   ws->scales_,
                   (Key{1} << pos_bits) - 1,
                   dim,
                   n,
                   n,
                   ws->counters_,
                   lanes_log2,
                   ws->row_grads_,
                   ws->row_grads_ + n * dim};
  for (int mode = 0; mode < 3; ++mode) {
    // n bounds the unique count (modes 0 and 2), ceil(n / 256) the extra pieces (mode 1).
    const int64_t threads = (mode == 1 ? chunks : n) << lanes_log2;
    if (vec4) {
      SumRunsKernel<true>
          <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(sa, mode);
    } else {
      SumRunsKernel<false>
          <<<GridFor(threads, kThreads), kThreads, 0, ComputeStream(ctx)>>>(sa, mode);
    }
    TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR("SumRunsKernel");
  }
  return absl::OkStatus();
}

// ---- Public entry points ---------------------------------------------------------------------

absl::Status AggregateRowGradientsCuda(const DeviceContext& ctx,
                                       absl::Span<const BagGradients> sources,
                                       absl::Span<const int64_t> num_ids, int64_t dim,
                                       PoolingMode pooling, int slot_bits,
                                       CudaEmbeddingWorkspace* ws) {
  return CudaWorkspaceAccess::Aggregate(ctx, sources, num_ids, dim, pooling, slot_bits, ws);
}

absl::Status ApplyRowUpdatesCuda(const DeviceContext& ctx, const int64_t* slots,
                                 const int64_t* num_unique, int64_t max_rows,
                                 const float* row_grads, const RowUpdateArgs& args) {
  TESSERA_RETURN_IF_ERROR(CheckContext(ctx, "ApplyRowUpdates"));
  constexpr const char* kOp = "ApplyRowUpdates";
  TESSERA_RETURN_IF_ERROR(embedding_internal::CheckRowUpdate(kOp, args));
  TESSERA_RETURN_IF_ERROR(embedding_internal::CheckFp32ForCuda(kOp, args.weight_dtype));
  if (max_rows <= 0) return absl::OkStatus();
  if (slots == nullptr || row_grads == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": null slots or row_grads"));
  }
  RowTables one;
  one.weights[0] = static_cast<float*>(args.weights);
  one.state[0] = args.state;
  // One warp (32 threads) per row.
  UpdateRowsKernel<<<GridFor(max_rows * 32, kThreads), kThreads, 0, ComputeStream(ctx)>>>(
      slots, num_unique, max_rows, row_grads, args, HostAdamCorrections(args), one);
  return CudaLaunchStatus("UpdateRowsKernel");
}

absl::Status FusedBackwardUpdateCuda(const DeviceContext& ctx,
                                     absl::Span<const BagGradients> sources,
                                     absl::Span<const int64_t> num_ids, PoolingMode pooling,
                                     int slot_bits, const RowUpdateArgs& args,
                                     CudaEmbeddingWorkspace* ws) {
  // Validate the update first, so a bad argument changes nothing.
  TESSERA_RETURN_IF_ERROR(ApplyRowUpdatesCuda(ctx, nullptr, nullptr, 0, nullptr, args));
  TESSERA_RETURN_IF_ERROR(
      AggregateRowGradientsCuda(ctx, sources, num_ids, args.dim, pooling, slot_bits, ws));
  // The id count bounds the unique rows; the kernel reads the exact count on the device.
  return ApplyRowUpdatesCuda(ctx, ws->unique_slots(), ws->num_unique(), ws->last_num_ids(),
                             ws->row_grads(), args);
}

absl::Status FusedBackwardUpdateTablesCuda(const DeviceContext& ctx,
                                           absl::Span<const BagGradients> sources,
                                           absl::Span<const int64_t> num_ids,
                                           absl::Span<const TableSourceInfo> info,
                                           const TableGroupUpdate& group,
                                           CudaEmbeddingWorkspace* ws) {
  constexpr const char* kOp = "FusedBackwardUpdateTablesCuda";
  const int table_bits = BitWidth(static_cast<uint64_t>(std::max(group.num_tables, 1) - 1));
  int64_t n = 0;
  for (int64_t c : num_ids) n += c;
  if (group.num_tables < 1 || group.num_tables > kMaxFusedFeatures || group.slot_bits < 1 ||
      num_ids.size() != sources.size() || info.size() != sources.size() ||
      !MultiTableKeysFit(n, group.num_tables, group.slot_bits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": ", group.num_tables, " tables of ", group.slot_bits, " slot bits, ", n, " ids, ",
        sources.size(), " sources (", num_ids.size(), " counts, ", info.size(), " infos)"));
  }
  RowTables tables;
  tables.shift = group.slot_bits;
  tables.num = group.num_tables;
  for (int t = 0; t < group.num_tables; ++t) {
    RowUpdateArgs a = group.args;
    a.weights = group.weights[t];
    a.state = group.state[t];
    // Validate each table's update first, so a bad argument changes nothing.
    TESSERA_RETURN_IF_ERROR(ApplyRowUpdatesCuda(ctx, nullptr, nullptr, 0, nullptr, a));
    tables.weights[t] = group.weights[t];
    tables.state[t] = group.state[t];
  }
  std::vector<PoolingMode> poolings(sources.size());
  std::vector<int64_t> slot_bases(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    if (info[s].table < 0 || info[s].table >= group.num_tables) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": source ", s, " names table ", info[s].table));
    }
    poolings[s] = info[s].pooling;
    slot_bases[s] = static_cast<int64_t>(info[s].table) << group.slot_bits;
  }
  TESSERA_RETURN_IF_ERROR(CudaWorkspaceAccess::Aggregate(
      ctx, sources, num_ids, group.args.dim, PoolingMode::kSum, group.slot_bits + table_bits, ws,
      poolings, slot_bases));
  if (ws->last_num_ids() <= 0) return absl::OkStatus();
  UpdateRowsKernel<<<GridFor(ws->last_num_ids() * 32, kThreads), kThreads, 0,
                     ComputeStream(ctx)>>>(ws->unique_slots(), ws->num_unique(),
                                           ws->last_num_ids(), ws->row_grads(), group.args,
                                           HostAdamCorrections(group.args), tables);
  return CudaLaunchStatus("UpdateRowsKernel");
}

// The dispatching entry points' CUDA halves without a public twin (pooled_lookup.cc).
namespace embedding_internal {

absl::Status AggregateRowGradientsCudaToHost(const DeviceContext& ctx,
                                             absl::Span<const BagGradients> sources, int64_t dim,
                                             PoolingMode pooling,
                                             std::vector<int64_t>* unique_slots,
                                             std::vector<float>* row_grads) {
  if (unique_slots == nullptr || row_grads == nullptr) {
    return absl::InvalidArgumentError("AggregateRowGradients: null output");
  }
  CudaEmbeddingWorkspace ws(ctx);
  TESSERA_RETURN_IF_ERROR(AggregateRowGradientsCuda(ctx, sources, {}, dim, pooling, 0, &ws));
  TESSERA_ASSIGN_OR_RETURN(const int64_t unique, ws.NumUniqueOnHost());
  unique_slots->resize(unique);
  row_grads->resize(unique * dim);
  TESSERA_RETURN_IF_ERROR(
      CudaCopyToHost(ctx, unique_slots->data(), ws.unique_slots(), sizeof(int64_t) * unique));
  return CudaCopyToHost(ctx, row_grads->data(), ws.row_grads(), sizeof(float) * unique * dim);
}

absl::Status FusedBackwardUpdateCudaOnce(const DeviceContext& ctx,
                                         absl::Span<const BagGradients> sources,
                                         PoolingMode pooling, const RowUpdateArgs& args) {
  CudaEmbeddingWorkspace ws(ctx);
  return FusedBackwardUpdateCuda(ctx, sources, {}, pooling, 0, args, &ws);
}

}  // namespace embedding_internal

}  // namespace tessera
