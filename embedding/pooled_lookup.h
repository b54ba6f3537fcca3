// Pooled embedding lookup (forward) and the fused backward + optimizer update: the two ops of an
// embedding bag. These entry points (pooled_lookup.cc) check their arguments once and dispatch on
// the DeviceContext to the CPU twin (pooled_lookup_cpu.cc) or the CUDA twin (pooled_lookup_cuda.h,
// which takes device pointers). Kernels take plain views; the caller owns memory.
//
// Bags are CSR: bag i holds indices[offsets[i] .. offsets[i + 1]) (offsets are absolute into
// `indices`, so a feature's slice of a KeyedJagged can be passed without rebasing). Indices are
// slots of a RowStore (row r of the table at weights + r * dim values of `weight_dtype`).
//
// 16-bit tables (weight_dtype kF16 / kBf16, embedding/row_dtype.h): the forward widens each row
// to fp32 as it gathers it and pools in fp32; the update widens the row, applies the fp32
// ApplyRowUpdate and writes the row back rounded (RowUpdateArgs::rounding). The CPU twin only:
// a CUDA context returns InvalidArgument for a 16-bit table.
//
// 16-bit outputs (FBGEMM's output_dtype BF16): a 16-bit table may pool into bf16 outputs
// (PooledLookupArgs::out_bf16, each value the fp32 pool rounded to nearest even) and take bf16
// output gradients (BagGradients::grad_bf16, widened to fp32 as they are read: the same bits as
// the fp32 path given those widened values). The update then reads half the gradient bytes.
// CPU twin only.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "embedding/row_dtype.h"
#include "embedding/row_optimizer.h"
#include "embedding/table_config.h"  // PoolingMode

namespace tessera {

struct PooledLookupArgs {
  const void* weights = nullptr;        // [slots, dim] values of weight_dtype
  int64_t dim = 0;
  const int64_t* offsets = nullptr;     // [num_bags + 1]
  const int64_t* indices = nullptr;     // slots
  const float* per_id_weights = nullptr;  // optional, parallel to indices
  int64_t num_bags = 0;
  PoolingMode pooling = PoolingMode::kSum;
  float* out = nullptr;                 // bag i writes out[i * out_stride .. + dim)
  int64_t out_stride = 0;
  // When >= 0, every index is checked to lie in [0, num_slots) first (one extra sequential pass
  // over `indices`). Default: -1 (unchecked; the caller's Resolve already checked).
  int64_t num_slots = -1;
  RowDtype weight_dtype = RowDtype::kF32;  // Default: fp32
  // Instead of `out` (which must then be null): bf16 outputs, bag i at
  // out_bf16[i * out_stride .. + dim). 16-bit weight_dtype only. Default: null (fp32 `out`).
  uint16_t* out_bf16 = nullptr;
};

// out[bag] = pool_{j in bag} w_j * weights[indices[j]] (w_j = 1 without per-id weights); an
// empty bag writes zeros; kMean multiplies the sum by 1 / (bag length). Each bag is summed in
// index order by one thread, so the result does not depend on the thread count.
// Returns InvalidArgument for inconsistent sizes (dim <= 0, out_stride < dim, null pointers,
// decreasing offsets), both or neither of out / out_bf16, out_bf16 with an fp32 table or, with
// num_slots >= 0, an index out of range.
absl::Status PooledLookupForward(const DeviceContext& ctx, const PooledLookupArgs& args);

// The gradient of one feature's bags: bag i's output gradient is grad[i * grad_stride .. + dim).
struct BagGradients {
  const int64_t* offsets = nullptr;
  const int64_t* indices = nullptr;
  const float* per_id_weights = nullptr;
  int64_t num_bags = 0;
  const float* grad = nullptr;
  int64_t grad_stride = 0;
  // Instead of `grad` (then null): bf16 output gradients, bag i at grad_bf16[i * grad_stride ..].
  // The sources of one call are all fp32 or all bf16. Default: null.
  const uint16_t* grad_bf16 = nullptr;
};

// Scratch memory reused across steps (sorting keys, unique rows, summed gradients). Vectors only
// grow, so a steady-state step allocates nothing. One workspace per concurrent caller.
struct EmbeddingWorkspace {
  std::vector<int64_t> keys;           // (slot << bits | bag or position), sorted by slot
  std::vector<int64_t> order;          // start of each unique slot's run in `keys`, + end
  std::vector<int64_t> unique_slots;   // FusedBackwardUpdate's distinct slots
  std::vector<float> row_grads;        // summed gradients (FusedBackwardUpdate: its scratch)
  std::vector<int64_t> scratch;        // the other half of the sort's ping-pong buffer
  std::vector<const void*> grad_rows;  // per bag (or position): the output-gradient row
  std::vector<float> scales;           // per bag (or position): per-id weight / length (kMean)
  std::vector<int64_t> histogram;      // radix-sort counters, per-chunk statistics
};

// Sums the gradient of every slot touched by `sources` (all features that share one table):
// writes the distinct slots in increasing order to `unique_slots` and their summed gradients to
// `row_grads` ([unique, dim]). Id j of bag b contributes w_j * grad[b] (times 1 / length of b
// for kMean). Summation order per slot is fixed (source order, then bag order, then position in
// bag), so results are bit-reproducible for any thread count. `unique_slots` and `row_grads`
// may be ws->unique_slots and ws->row_grads; they are resized (grown only in capacity).
// Returns InvalidArgument for inconsistent sizes or a negative slot.
absl::Status AggregateRowGradients(const DeviceContext& ctx, absl::Span<const BagGradients> sources,
                                   int64_t dim, PoolingMode pooling, EmbeddingWorkspace* ws,
                                   std::vector<int64_t>* unique_slots,
                                   std::vector<float>* row_grads);

struct RowUpdateArgs {
  void* weights = nullptr;   // [slots, dim] values of weight_dtype
  float* state = nullptr;    // [slots, state_dim] floats
  int64_t dim = 0;
  RowOptimizerOptions optimizer;
  float lr = 0.0f;
  int64_t step = 1;          // global 1-based step
  RowDtype weight_dtype = RowDtype::kF32;  // Default: fp32
  // 16-bit tables: how an updated row is rounded back, and the seed of stochastic rounding's
  // random bits (with `step`: row_dtype::StochasticKey). Defaults: stochastic, 0.
  RowRounding rounding = RowRounding::kStochastic;
  uint64_t rounding_seed = 0;
};

// Applies ApplyRowUpdate to each of `slots` with the matching row of `row_grads` ([slots, dim]),
// in parallel over slots. Slots must be distinct (not checked: duplicates would race).
// Returns InvalidArgument for dim <= 0, step < 1, null weights, or null state when the optimizer
// keeps state.
absl::Status ApplyRowUpdates(const DeviceContext& ctx, absl::Span<const int64_t> slots,
                             const float* row_grads, const RowUpdateArgs& args);

// AggregateRowGradients then ApplyRowUpdates: the fused backward of one table, with exactly their
// bits. A full gradient table never exists: on the CPU the slots' gradients are summed into a small
// buffer and applied block by block (ws->unique_slots holds the distinct slots afterwards).
absl::Status FusedBackwardUpdate(const DeviceContext& ctx, absl::Span<const BagGradients> sources,
                                 PoolingMode pooling, const RowUpdateArgs& args,
                                 EmbeddingWorkspace* ws);

}  // namespace tessera
