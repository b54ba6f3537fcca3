// Feature interactions between the bottom MLP's output and the pooled embeddings.
//
// DLRM dot interaction (facebookresearch/dlrm, self-interaction off): per sample, stack
// Z = [bottom; emb_0; ...; emb_{F-1}] as rows 0..F ((F + 1) x d) and output
//   [bottom, Z_1.Z_0, Z_2.Z_0, Z_2.Z_1, Z_3.Z_0, ...]   (pairs (i, j), j < i, loop `for i: for j<i`)
// of width d + F (F + 1) / 2 (TorchRec's DLRM layout: pair (i, j) sits at d + i (i - 1) / 2 + j).
// Backward: d_bottom = d_out[0, d) + sum_j g_0j Z_j, d_emb_{i-1} = sum_j g_ij Z_j, with g the
// symmetric matrix of pair gradients (zero diagonal).
// The CPU twin computes only the lower triangle, per sample, with 16-lane vector sweeps; samples
// are split across threads, so every output has the same bits for any thread count.
// Entry points are thread-compatible (no shared state); the caller owns all memory.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/device.h"

namespace tessera {

// Output width of the dot interaction for F embeddings of width d.
inline int64_t DotInteractionOutputDim(int64_t num_embeddings, int64_t dim) {
  return dim + num_embeddings * (num_embeddings + 1) / 2;
}

// bottom [batch, d], emb [batch, F * d] (feature-major within a sample), out [batch, out_dim].
// Errors: InvalidArgument for null pointers or sizes < 1 (or beyond 32-bit element counts);
// Unimplemented for kCuda until dense/interaction_cuda.cu lands.
absl::Status DotInteractionForward(const DeviceContext& ctx, const float* bottom,
                                   const float* emb, int64_t batch, int64_t num_embeddings,
                                   int64_t dim, float* out);
// From d_out [batch, out_dim] writes (overwrites) d_bottom [batch, d] and d_emb [batch, F * d].
// Same errors as the forward.
absl::Status DotInteractionBackward(const DeviceContext& ctx, const float* bottom,
                                    const float* emb, const float* d_out, int64_t batch,
                                    int64_t num_embeddings, int64_t dim, float* d_bottom,
                                    float* d_emb);

// The same with bf16 embeddings and a bf16 d_emb (the bf16 hand-off from tables with
// output_dtype bf16): the kernels widen each sample's emb rows as they read them and round its
// d_emb rows (nearest even, core/bf16.h FloatToBf16) as they write them, so out,
// d_bottom and d_emb have the bits of the fp32 entry points fed the widened emb (d_emb then
// rounded), for any thread count. Same errors; Unimplemented for kCuda (CPU only).
absl::Status DotInteractionForwardBf16(const DeviceContext& ctx, const float* bottom,
                                       const uint16_t* emb, int64_t batch, int64_t num_embeddings,
                                       int64_t dim, float* out);
absl::Status DotInteractionBackwardBf16(const DeviceContext& ctx, const float* bottom,
                                        const uint16_t* emb, const float* d_out, int64_t batch,
                                        int64_t num_embeddings, int64_t dim, float* d_bottom,
                                        uint16_t* d_emb);

}  // namespace tessera
