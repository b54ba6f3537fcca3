// CPU twin of pooled_lookup.h (declared in embedding/internal/pooled_lookup_kernels.h; the
// entry points in pooled_lookup.cc check arguments and dispatch).
//
// Forward: bags are split into contiguous chunks, one per thread; each bag is summed in index
// order into a local accumulator (kept in vector registers for the common dims, which are
// instantiated as templates), while the rows a few ids ahead are prefetched. Random row gathers
// are latency-bound, so the prefetch is what brings the loop near the memory system's limit
// (../shared/MACHINE.md: about 2x on this hardware).
//
// Backward: every id becomes a key (slot << bits | its bag, or its position with per-id
// weights); a stable radix sort on the slot bits groups equal slots while keeping positions in
// order, so each slot's gradient is summed in (source, bag, position) order by one thread: no
// float atomics, the same bits for any thread count. The optimizer then runs in parallel over the
// distinct slots. FusedBackwardUpdate sums each run and updates its row in registers where
// embedding/internal/fused_update_avx512.cc can (AVX-512, dims 16-128, SGD and row-wise
// AdaGrad); elsewhere it alternates the two over blocks of ~32 runs whose sums stay in an
// L1-sized buffer (the same SumRunsCpu and UpdateRowsCpu as the unfused path). All three give
// the same bits.
//
// 16-bit tables (weight_dtype fp16 / bf16) take the same loops' structure in
// embedding/internal/pooled_lookup_16bit.cc: the forward's per-bag gather and UpdateRowsCpu's
// per-row update dispatch there; the sort and segment sums are shared. Their bf16 outputs
// (out_bf16) are written there too; bf16 output gradients (grad_bf16) are widened to fp32 where
// each gradient row is read (SumRuns, SumAndUpdateRunsCpu), the same bits as fp32 gradients
// holding the widened values.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/parallel.h"
#include "core/status.h"
#include "embedding/internal/cpu_parallel.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/internal/radix_sort.h"
#include "embedding/pooled_lookup.h"

namespace tessera::embedding_internal {
namespace {

// Smallest parallel chunks worth a second thread (each bag, entry or row costs ~10-100 ns) when
// the pool sleeps between regions; ScaledMinChunk makes them smaller when it spins
// (core/parallel.h).
constexpr int64_t kForwardMinBags = 64;
constexpr int64_t kKeyMinBags = 256;
constexpr int64_t kRunMinEntries = 16384;
constexpr int64_t kSumMinEntries = 1024;
constexpr int64_t kUpdateMinRows = 128;
// Summed rows per block of the fused backward: 16 KiB, a third of L1 (32 rows of dim 128).
constexpr int64_t kFusedBlockBytes = 16384;

// ---------------------------------------------------------------------------------------------
// Forward.

// Pools bags [b0, b1). kDim > 0 fixes the row width at compile time; 0 reads args.dim.
template <int kDim>
TESSERA_ALWAYS_INLINE void PoolBags(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  const int64_t dim = kDim > 0 ? kDim : a.dim;
  const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
  const int64_t ahead = PrefetchRowsAhead(row_bytes);
  const float* weights = static_cast<const float*>(a.weights);
  const int64_t* idx = a.indices;
  const float* pw = a.per_id_weights;
  const int64_t j_last = a.offsets[b1];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t jb = a.offsets[b], je = a.offsets[b + 1];
    float* __restrict out = a.out + b * a.out_stride;
    const float scale =
        (a.pooling == PoolingMode::kMean && je > jb) ? 1.0f / static_cast<float>(je - jb) : 1.0f;
    if constexpr (kDim > 0) {
      float acc[kDim];
      for (int k = 0; k < kDim; ++k) acc[k] = 0.0f;
      for (int64_t j = jb; j < je; ++j) {
        if (j + ahead < j_last) PrefetchBytes(weights + idx[j + ahead] * dim, row_bytes, false);
        const float* __restrict row = weights + idx[j] * dim;
        const float s = pw != nullptr ? pw[j] : 1.0f;
        for (int k = 0; k < kDim; ++k) acc[k] += s * row[k];
      }
      for (int k = 0; k < kDim; ++k) out[k] = acc[k] * scale;
    } else {
      for (int64_t k = 0; k < dim; ++k) out[k] = 0.0f;
      for (int64_t j = jb; j < je; ++j) {
        if (j + ahead < j_last) PrefetchBytes(weights + idx[j + ahead] * dim, row_bytes, false);
        const float* __restrict row = weights + idx[j] * dim;
        const float s = pw != nullptr ? pw[j] : 1.0f;
        for (int64_t k = 0; k < dim; ++k) out[k] += s * row[k];
      }
      for (int64_t k = 0; k < dim; ++k) out[k] *= scale;
    }
  }
}

TESSERA_TARGET_CLONES
void PoolBagsCpu(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  switch (a.dim) {
    case 8:
      PoolBags<8>(a, b0, b1);
      return;
    case 16:
      PoolBags<16>(a, b0, b1);
      return;
    case 32:
      PoolBags<32>(a, b0, b1);
      return;
    case 64:
      PoolBags<64>(a, b0, b1);
      return;
    case 128:
      PoolBags<128>(a, b0, b1);
      return;
    default:
      PoolBags<0>(a, b0, b1);
      return;
  }
}

}  // namespace

void PooledLookupForwardCpu(const PooledLookupArgs& a) {
  if (a.weight_dtype != RowDtype::kF32) {
    ParallelFor(a.num_bags, kForwardMinBags,
                [&a](int64_t b0, int64_t b1, int) { PoolBags16Cpu(a, b0, b1); });
    return;
  }
  ParallelFor(a.num_bags, kForwardMinBags,
              [&a](int64_t b0, int64_t b1, int) { PoolBagsCpu(a, b0, b1); });
}

namespace {

// ---------------------------------------------------------------------------------------------
// Backward: gradient aggregation.

// Sums the runs [u0, u1): out[(u - u0) * dim ..] = sum over run u's positions p, in position
// order, of scales[p] * grad_rows[p]. The gradient rows are scattered over the output gradient
// (one per bag), so they are prefetched two stages ahead: first the per-position pointer, then
// the row; prefetches run on up to the end of run pf_end - 1 (pf_end >= u1), so that a caller
// summing a long range in blocks keeps the pipeline full across its block boundaries.
template <int kDim, bool kBf16>
TESSERA_ALWAYS_INLINE void SumRuns(const SumRunsArgs& a, int64_t u0, int64_t u1, int64_t pf_end,
                                   float* row_grads) {
  const int64_t dim = kDim > 0 ? kDim : a.dim;
  const int64_t row_bytes = dim * static_cast<int64_t>(kBf16 ? 2 : sizeof(float));
  const int64_t ahead = PrefetchRowsAhead(row_bytes);
  const int64_t e_last = a.run_starts[pf_end];
  const int64_t mask = a.pos_mask;
  for (int64_t u = u0; u < u1; ++u) {
    float* __restrict out = row_grads + (u - u0) * dim;
    for (int64_t k = 0; k < dim; ++k) out[k] = 0.0f;
    const int64_t eb = a.run_starts[u], ee = a.run_starts[u + 1];
    for (int64_t e = eb; e < ee; ++e) {
      if (e + 2 * ahead < e_last) {
        const int64_t p2 = a.keys[e + 2 * ahead] & mask;
        __builtin_prefetch(a.grad_rows + p2, 0, 3);
        __builtin_prefetch(a.scales + p2, 0, 3);
      }
      if (e + ahead < e_last)
        PrefetchBytes(a.grad_rows[a.keys[e + ahead] & mask], row_bytes, false);
      const int64_t p = a.keys[e] & mask;
      const float s = a.scales[p];
      if constexpr (kBf16) {
        const uint16_t* __restrict g = static_cast<const uint16_t*>(a.grad_rows[p]);
        for (int64_t k = 0; k < dim; ++k) out[k] += s * row_dtype::Bf16ToFloat(g[k]);
      } else {
        const float* __restrict g = static_cast<const float*>(a.grad_rows[p]);
        for (int64_t k = 0; k < dim; ++k) out[k] += s * g[k];
      }
    }
  }
}

template <bool kBf16>
TESSERA_ALWAYS_INLINE void SumRunsDims(const SumRunsArgs& a, int64_t u0, int64_t u1,
                                       int64_t pf_end, float* row_grads) {
  switch (a.dim) {
    case 16:
      SumRuns<16, kBf16>(a, u0, u1, pf_end, row_grads);
      return;
    case 32:
      SumRuns<32, kBf16>(a, u0, u1, pf_end, row_grads);
      return;
    case 64:
      SumRuns<64, kBf16>(a, u0, u1, pf_end, row_grads);
      return;
    case 128:
      SumRuns<128, kBf16>(a, u0, u1, pf_end, row_grads);
      return;
    default:
      SumRuns<0, kBf16>(a, u0, u1, pf_end, row_grads);
      return;
  }
}

TESSERA_TARGET_CLONES
void SumRunsCpu(const SumRunsArgs& a, int64_t u0, int64_t u1, int64_t pf_end, float* row_grads) {
  if (a.bf16_grads) {
    SumRunsDims<true>(a, u0, u1, pf_end, row_grads);
  } else {
    SumRunsDims<false>(a, u0, u1, pf_end, row_grads);
  }
}

template <typename T>
void GrowTo(std::vector<T>* v, int64_t n) {
  if (static_cast<int64_t>(v->size()) < n) v->resize(n);
}

// Steps 1-3 of the backward: sorts the ids of `sources` into runs of equal slots. Writes the
// distinct slots (increasing) to `unique_slots` and returns, in *runs, the views that sum each
// run (its dim left 0). n == 0 (no ids) leaves unique_slots empty.
absl::Status GroupSlotsCpu(absl::Span<const BagGradients> sources, PoolingMode pooling,
                           EmbeddingWorkspace* ws, std::vector<int64_t>* unique_slots,
                           SumRunsArgs* runs) {
  constexpr const char* kOp = "AggregateRowGradients";
  int64_t n = 0;
  for (const BagGradients& src : sources) {
    if (src.num_bags == 0) continue;
    n += src.offsets[src.num_bags] - src.offsets[0];
  }
  unique_slots->clear();
  *runs = SumRunsArgs{};
  if (n == 0) return absl::OkStatus();

  // 1. One key per id, in (source, bag, position) order. Its low bits index the gradient row
  // and scale of the id: per bag when no source has per-id weights (every id of a bag has the
  // bag's row and 1 / length; a few KiB that stay in L1 while the runs are summed), else per
  // position. Either way the stable sort below keeps each run in position order, so the terms
  // and their order (and the bits) do not depend on the choice.
  bool by_bag = true, bf16_grads = false;
  int64_t bags = 0;
  for (const BagGradients& src : sources) {
    by_bag = by_bag && src.per_id_weights == nullptr;
    bags += src.num_bags;
    if (src.num_bags > 0) bf16_grads = src.grad_bf16 != nullptr;  // one kind (checked)
  }
  const int64_t entries = by_bag ? bags : n;
  const int pos_bits = BitWidth(entries - 1);
  const int64_t max_packable = std::numeric_limits<int64_t>::max() >> pos_bits;
  GrowTo(&ws->keys, n);
  GrowTo(&ws->scratch, n);
  GrowTo(&ws->grad_rows, entries);
  GrowTo(&ws->scales, entries);
  int64_t* keys = ws->keys.data();
  const void** grad_rows = ws->grad_rows.data();
  float* scales = ws->scales.data();
  int64_t max_slot = 0, base = 0, bag_base = 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    const BagGradients& src = sources[s];
    if (src.num_bags == 0) continue;
    const int64_t pos0 = base - src.offsets[0];  // position of indices[j] is pos0 + j
    const int chunks = NumChunks(src.num_bags, ScaledMinChunk(kKeyMinBags));
    GrowTo(&ws->histogram, 3 * chunks);
    int64_t* stats = ws->histogram.data();  // per chunk: max slot, first bad j, its slot
    auto fill = [&](int c) {
      int64_t b0, b1;
      ChunkRange(src.num_bags, chunks, c, &b0, &b1);
      int64_t mx = 0, bad_j = -1, bad_slot = 0;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t jb = src.offsets[b], je = src.offsets[b + 1];
        const float inv =
            (pooling == PoolingMode::kMean && je > jb) ? 1.0f / static_cast<float>(je - jb) : 1.0f;
        const void* g = bf16_grads ? static_cast<const void*>(src.grad_bf16 + b * src.grad_stride)
                                   : static_cast<const void*>(src.grad + b * src.grad_stride);
        const int64_t gb = bag_base + b;
        if (by_bag) {
          grad_rows[gb] = g;
          scales[gb] = 1.0f * inv;
        }
        for (int64_t j = jb; j < je; ++j) {
          int64_t slot = src.indices[j];
          if (slot < 0 || slot > max_packable) {
            if (bad_j < 0) bad_j = j, bad_slot = slot;
            slot = 0;
          }
          mx = std::max(mx, slot);
          const int64_t p = pos0 + j;
          if (by_bag) {
            keys[p] = (slot << pos_bits) | gb;
          } else {
            keys[p] = (slot << pos_bits) | p;
            grad_rows[p] = g;
            scales[p] = (src.per_id_weights != nullptr ? src.per_id_weights[j] : 1.0f) * inv;
          }
        }
      }
      stats[3 * c] = mx;
      stats[3 * c + 1] = bad_j;
      stats[3 * c + 2] = bad_slot;
    };
    RunChunks(chunks, fill);
    for (int c = 0; c < chunks; ++c) {
      if (stats[3 * c + 1] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": source ", s, " index ", stats[3 * c + 1], " holds slot ", stats[3 * c + 2],
            stats[3 * c + 2] < 0 ? " (negative)" : " (too large to sort with this many ids)"));
      }
      max_slot = std::max(max_slot, stats[3 * c]);
    }
    base += src.offsets[src.num_bags] - src.offsets[0];
    bag_base += src.num_bags;
  }

  // 2. Group equal slots, positions staying in order within each group.
  int64_t* sorted = RadixSortBits(keys, ws->scratch.data(), n, pos_bits,
                                  pos_bits + BitWidth(max_slot), &ws->histogram);
  if (sorted != keys) std::swap(ws->keys, ws->scratch);
  keys = ws->keys.data();

  // 3. Runs of equal slots: count run starts per chunk, prefix, then write slots and starts.
  const int run_chunks = NumChunks(n, ScaledMinChunk(kRunMinEntries));
  GrowTo(&ws->histogram, run_chunks + 1);
  int64_t* run_count = ws->histogram.data();
  auto count_runs = [&](int c) {
    int64_t b, e;
    ChunkRange(n, run_chunks, c, &b, &e);
    int64_t count = 0;
    for (int64_t i = b; i < e; ++i) {
      count += (i == 0 || (keys[i] >> pos_bits) != (keys[i - 1] >> pos_bits)) ? 1 : 0;
    }
    run_count[c] = count;
  };
  RunChunks(run_chunks, count_runs);
  int64_t unique = 0;
  for (int c = 0; c < run_chunks; ++c) {
    const int64_t v = run_count[c];
    run_count[c] = unique;
    unique += v;
  }
  unique_slots->resize(unique);
  ws->order.resize(unique + 1);
  int64_t* slots_out = unique_slots->data();
  int64_t* run_starts = ws->order.data();
  auto write_runs = [&](int c) {
    int64_t b, e;
    ChunkRange(n, run_chunks, c, &b, &e);
    int64_t u = run_count[c];
    for (int64_t i = b; i < e; ++i) {
      if (i == 0 || (keys[i] >> pos_bits) != (keys[i - 1] >> pos_bits)) {
        slots_out[u] = keys[i] >> pos_bits;
        run_starts[u] = i;
        ++u;
      }
    }
  };
  RunChunks(run_chunks, write_runs);
  run_starts[unique] = n;
  *runs = SumRunsArgs{keys, run_starts, grad_rows, scales, (int64_t{1} << pos_bits) - 1, 0,
                      bf16_grads};
  return absl::OkStatus();
}

// The chunks of ForRunChunks.
int RunChunkCount(const SumRunsArgs& runs, int64_t unique) {
  return NumChunks(runs.run_starts[unique], ScaledMinChunk(kSumMinEntries));
}
// Calls fn(c, u0, u1) for chunk c in [0, RunChunkCount) of the runs, in parallel: the chunks split
// the entries evenly and snap to run starts, so a hot row with a long run does not leave the
// other threads idle for long.
template <typename Fn>
void ForRunChunks(const SumRunsArgs& runs, int64_t unique, Fn&& fn) {
  const int64_t n = runs.run_starts[unique];
  const int64_t* run_starts = runs.run_starts;
  const int chunks = RunChunkCount(runs, unique);
  auto chunk = [&](int c) {
    int64_t eb, ee;
    ChunkRange(n, chunks, c, &eb, &ee);
    const int64_t u0 = std::lower_bound(run_starts, run_starts + unique, eb) - run_starts;
    const int64_t u1 = std::lower_bound(run_starts, run_starts + unique, ee) - run_starts;
    if (u0 < u1) fn(c, u0, u1);
  };
  RunChunks(chunks, chunk);
}

}  // namespace

absl::Status AggregateRowGradientsCpu(absl::Span<const BagGradients> sources, int64_t dim,
                                      PoolingMode pooling, EmbeddingWorkspace* ws,
                                      std::vector<int64_t>* unique_slots,
                                      std::vector<float>* row_grads) {
  SumRunsArgs runs;
  row_grads->clear();
  TESSERA_RETURN_IF_ERROR(GroupSlotsCpu(sources, pooling, ws, unique_slots, &runs));
  const int64_t unique = static_cast<int64_t>(unique_slots->size());
  if (unique == 0) return absl::OkStatus();
  // 4. Sum each run.
  row_grads->resize(unique * dim);
  runs.dim = dim;
  float* sums = row_grads->data();
  ForRunChunks(runs, unique, [&](int, int64_t u0, int64_t u1) {
    SumRunsCpu(runs, u0, u1, u1, sums + u0 * dim);
  });
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Backward: the optimizer update.

namespace {

// Updates rows [u0, u1) of `slots` with the gradients row_grads[(u - u0) * dim ..], prefetching
// the weights and state of rows further ahead (up to slot pf_end - 1, pf_end >= u1) with write
// intent (they are read, then written).
TESSERA_TARGET_CLONES
void UpdateRowsF32Cpu(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a,
                      int64_t u0, int64_t u1, int64_t pf_end) {
  float* weights = static_cast<float*>(a.weights);
  const int64_t dim = a.dim;
  const int64_t sd = RowStateDim(a.optimizer.type, dim);
  const int64_t ahead = PrefetchRowsAhead((dim + sd) * static_cast<int64_t>(sizeof(float)));
  for (int64_t u = u0; u < u1; ++u) {
    if (u + ahead < pf_end) {
      const int64_t next = slots[u + ahead];
      PrefetchBytes(weights + next * dim, dim * sizeof(float), true);
      if (sd > 0) PrefetchBytes(a.state + next * sd, sd * sizeof(float), true);
    }
    const int64_t slot = slots[u];
    ApplyRowUpdate(a.optimizer, a.lr, a.step, dim, row_grads + (u - u0) * dim,
                   weights + slot * dim, sd > 0 ? a.state + slot * sd : nullptr);
  }
}

void UpdateRowsCpu(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a, int64_t u0,
                   int64_t u1, int64_t pf_end) {
  if (a.weight_dtype == RowDtype::kF32) {
    UpdateRowsF32Cpu(slots, row_grads, a, u0, u1, pf_end);
  } else {
    UpdateRows16Cpu(slots, row_grads, a, u0, u1, pf_end);
  }
}

}  // namespace

void ApplyRowUpdatesCpu(absl::Span<const int64_t> slots, const float* row_grads,
                        const RowUpdateArgs& args) {
  if (slots.empty()) return;
  // One captured reference keeps the closure inside std::function (no allocation per step).
  struct Job {
    const int64_t* slots;
    const float* row_grads;
    const RowUpdateArgs* args;
  } job{slots.data(), row_grads, &args};
  ParallelFor(static_cast<int64_t>(slots.size()), ScaledMinChunk(kUpdateMinRows),
              [&job](int64_t u0, int64_t u1, int) {
                UpdateRowsCpu(job.slots, job.row_grads + u0 * job.args->dim, *job.args, u0, u1,
                              u1);
              });
}

absl::Status FusedBackwardUpdateCpu(absl::Span<const BagGradients> sources, PoolingMode pooling,
                                    const RowUpdateArgs& args, EmbeddingWorkspace* ws) {
  SumRunsArgs runs;
  TESSERA_RETURN_IF_ERROR(GroupSlotsCpu(sources, pooling, ws, &ws->unique_slots, &runs));
  const int64_t unique = static_cast<int64_t>(ws->unique_slots.size());
  if (unique == 0) return absl::OkStatus();
  const int64_t dim = args.dim;
  runs.dim = dim;
  const int64_t* slots = ws->unique_slots.data();
  if (CanSumAndUpdateInRegisters(args)) {
    // One pass per run, nothing summed to memory (embedding/internal/fused_update_avx512.cc),
    // with the bits of the blocks below.
    ForRunChunks(runs, unique, [&](int, int64_t u0, int64_t u1) {
      SumAndUpdateRunsCpu(runs, slots, args, u0, u1);
    });
    return absl::OkStatus();
  }
  // Each chunk sums a block of runs into its own small buffer, which stays in L1, and updates
  // those rows at once: the same two functions as AggregateRowGradients + ApplyRowUpdates (so
  // the same bits), without the round trip of all summed rows through memory.
  const int64_t block = std::max<int64_t>(1, kFusedBlockBytes / (dim * sizeof(float)));
  GrowTo(&ws->row_grads, RunChunkCount(runs, unique) * block * dim);
  float* scratch = ws->row_grads.data();
  ForRunChunks(runs, unique, [&](int c, int64_t u0, int64_t u1) {
    float* sums = scratch + c * block * dim;
    for (int64_t b0 = u0; b0 < u1; b0 += block) {
      const int64_t b1 = std::min(u1, b0 + block);
      SumRunsCpu(runs, b0, b1, u1, sums);
      UpdateRowsCpu(slots, sums, args, b0, b1, u1);
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::embedding_internal
