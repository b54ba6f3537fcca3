// The twins behind pooled_lookup.h's entry points, and the argument checks they share (dense's
// twin shape, dense/internal/kernels.h). The dispatching entry points (embedding/pooled_lookup.cc)
// check arguments once, pick a twin by ctx.device, and are the only place that knows whether the
// CUDA path is built. CPU twins live in embedding/pooled_lookup_cpu.cc and assume checked
// arguments; CUDA twins are declared in embedding/pooled_lookup_cuda.h, which device code (the
// CUDA collection, benchmarks) also calls directly, so they run the same pointer-free checks
// below themselves (a few comparisons) before their device-side ones. Private to embedding/.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "embedding/pooled_lookup.h"

namespace tessera::embedding_internal {

// ---- Checks (embedding/pooled_lookup.cc) ---------------------------------------------------
// Each returns InvalidArgument "<op>: ..." naming the offending field and value.

// Forward checks that read no memory behind the pointers: dim > 0, out_stride >= dim,
// num_bags >= 0 and, with num_bags > 0, non-null offsets and out. Valid for host and device
// pointers.
[[nodiscard]] absl::Status CheckForwardArgs(const char* op, const PooledLookupArgs& args);

// One CSR bag list in host memory: offsets[0] >= 0, offsets never decrease, and non-null indices
// when the bags hold ids. num_bags >= 0 and non-null offsets are CheckForwardArgs's or
// CheckGradientSources's job. Reads offsets[0 .. num_bags].
[[nodiscard]] absl::Status CheckHostBags(const char* op, const int64_t* offsets,
                                         const int64_t* indices, int64_t num_bags);

// Forward checks that read host memory (a CPU DeviceContext): CheckHostBags, non-null weights
// when there are ids, and with num_slots >= 0 every index in [0, num_slots).
[[nodiscard]] absl::Status CheckForwardHostData(const char* op, const PooledLookupArgs& args);

// Gradient sources, pointer-free: dim > 0; per source num_bags >= 0 and, with bags, non-null
// offsets and grad and grad_stride >= dim ("source <s> ...").
[[nodiscard]] absl::Status CheckGradientSources(const char* op,
                                                absl::Span<const BagGradients> sources,
                                                int64_t dim);

// InvalidArgument for bf16 outputs (forward->out_bf16, may be null) or bf16 gradients in
// `sources`: the CUDA twins run fp32 outputs only.
[[nodiscard]] absl::Status CheckNoBf16ForCuda(const char* op, const PooledLookupArgs* forward,
                                              absl::Span<const BagGradients> sources);

// InvalidArgument for a 16-bit weight_dtype: the CUDA twins run fp32 tables only.
[[nodiscard]] absl::Status CheckFp32ForCuda(const char* op, RowDtype dtype);

// Row update: dim > 0, step >= 1, non-null weights, non-null state when the optimizer keeps state.
[[nodiscard]] absl::Status CheckRowUpdate(const char* op, const RowUpdateArgs& args);

// ---- CPU twins (embedding/pooled_lookup_cpu.cc): arguments checked by the caller ------------
void PooledLookupForwardCpu(const PooledLookupArgs& args);
// Also returns InvalidArgument for a negative slot (found while building the sort keys).
[[nodiscard]] absl::Status AggregateRowGradientsCpu(absl::Span<const BagGradients> sources,
                                                    int64_t dim, PoolingMode pooling,
                                                    EmbeddingWorkspace* ws,
                                                    std::vector<int64_t>* unique_slots,
                                                    std::vector<float>* row_grads);
// row_grads must be non-null when slots is non-empty.
void ApplyRowUpdatesCpu(absl::Span<const int64_t> slots, const float* row_grads,
                        const RowUpdateArgs& args);
// AggregateRowGradientsCpu then ApplyRowUpdatesCpu, alternating over blocks of runs, with the
// same bits: ws->unique_slots gets the distinct slots; ws->row_grads is scratch (not the sums).
[[nodiscard]] absl::Status FusedBackwardUpdateCpu(absl::Span<const BagGradients> sources,
                                                  PoolingMode pooling, const RowUpdateArgs& args,
                                                  EmbeddingWorkspace* ws);

// ---- 16-bit tables (embedding/internal/pooled_lookup_16bit.cc), called by the twins above
// for weight_dtype kF16 / kBf16: pools bags [b0, b1), updates rows [u0, u1) of `slots` (as
// pooled_lookup_cpu.cc's fp32 loops, prefetching rows up to slot pf_end - 1).
void PoolBags16Cpu(const PooledLookupArgs& args, int64_t b0, int64_t b1);
void UpdateRows16Cpu(const int64_t* slots, const float* row_grads, const RowUpdateArgs& args,
                     int64_t u0, int64_t u1, int64_t pf_end);

// ---- The CPU backward's runs (pooled_lookup_cpu.cc builds them) -----------------------------
// After the sort, run u (one distinct slot) holds the entries [run_starts[u], run_starts[u + 1])
// of `keys`, in position order; entry e's gradient term is scales[p] * grad_rows[p] with
// p = keys[e] & pos_mask (its bag's output gradient, scaled by its per-id weight times 1 / length
// for kMean). p indexes bags when no source has per-id weights, else positions. grad_rows[p]
// points at fp32 values, or at bf16 values when bf16_grads (widened as they are read).
struct SumRunsArgs {
  const int64_t* keys;        // sorted (slot << pos_bits | p)
  const int64_t* run_starts;  // [unique + 1]
  const void* const* grad_rows;
  const float* scales;
  int64_t pos_mask;
  int64_t dim;
  bool bf16_grads;
};

// ---- The fused segment sum + row update in registers (fused_update_avx512.cc) --------------
// Whether SumAndUpdateRunsCpu handles `args`: an AVX-512 CPU, dim 16, 32, 64 or 128, SGD or
// row-wise AdaGrad, any weight dtype.
bool CanSumAndUpdateInRegisters(const RowUpdateArgs& args);
// For each run u in [u0, u1): sums its gradient in registers (SumRunsCpu's order of terms) and
// applies the update to slots[u]'s row and state at once (ApplyRowUpdate's, or the 16-bit
// update's, formulas): the same bits as SumRunsCpu followed by UpdateRowsCpu. The rows of later
// runs are prefetched while earlier runs sum, so the summation overlaps the row misses.
// REQUIRES CanSumAndUpdateInRegisters(args), runs.dim == args.dim.
void SumAndUpdateRunsCpu(const SumRunsArgs& runs, const int64_t* slots, const RowUpdateArgs& args,
                         int64_t u0, int64_t u1);

// ---- CUDA halves without a public twin (embedding/pooled_lookup_cuda.cu) ---------------------
// AggregateRowGradients for a CUDA DeviceContext: device sources, host outputs; waits.
[[nodiscard]] absl::Status AggregateRowGradientsCudaToHost(
    const DeviceContext& ctx, absl::Span<const BagGradients> sources, int64_t dim,
    PoolingMode pooling, std::vector<int64_t>* unique_slots, std::vector<float>* row_grads);
// FusedBackwardUpdate for a CUDA DeviceContext with a workspace of its own (device sources).
[[nodiscard]] absl::Status FusedBackwardUpdateCudaOnce(const DeviceContext& ctx,
                                                       absl::Span<const BagGradients> sources,
                                                       PoolingMode pooling,
                                                       const RowUpdateArgs& args);

}  // namespace tessera::embedding_internal
