// The row update of embedding/row_optimizer.h split over the lanes of one CUDA warp, so the
// update kernel reads and writes a row coalesced (lanes over columns) instead of one thread
// walking the whole row. Pure functions (TESSERA_HD), so the CPU tests check the split against
// ApplyRowUpdate without a GPU (tests/embedding/row_update_lanes_test.cc).
//
// Order of terms: RowSumOfSquares keeps kSumLanes = 16 partials, partial l taking the columns
// k = l (mod 16) in increasing k, then adds them pairwise (width 8, 4, 2, 1). Lane l < 16 of the
// warp computes partial l with RowSumOfSquaresPartial (the same terms in the same order) and the
// warp combines them with shuffles in the same tree, so the sum has RowSumOfSquares' bits (up to
// the compiler's fused multiply-adds, as before). Every other step of the update is per column
// and does not depend on which lane runs it.
#pragma once

#include <cstdint>

#include "core/hd.h"
#include "embedding/row_optimizer.h"

namespace tessera::embedding_internal {

constexpr int kSumLanes = 16;

// Partial `lane` (0 <= lane < kSumLanes) of RowSumOfSquares(g, dim).
TESSERA_HD_INLINE float RowSumOfSquaresPartial(const float* g, int64_t dim, int lane) {
  float p = 0.0f;
  for (int64_t k = lane; k < dim; k += kSumLanes) p += g[k] * g[k];
  return p;
}

// RowSumOfSquares' final tree over the kSumLanes partials (part is overwritten); what the
// warp's shuffles compute, written out for the CPU check.
TESSERA_HD_INLINE float CombineSumLanes(float* part) {
  for (int width = kSumLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  }
  return part[0];
}

// Row-wise AdaGrad's accumulator step (RowWiseAdagradStep's first two lines): the new
// accumulator and the step's scale, given the old accumulator and the row's sum of squares.
struct AdagradScale {
  float v;
  float scale;
};
TESSERA_HD_INLINE AdagradScale RowWiseAdagradScale(const RowOptimizerOptions& o, float lr,
                                                   float v_old, float sum_sq, int64_t dim) {
  const float v = v_old + sum_sq / static_cast<float>(dim);
  return {v, lr / (sqrtf(v / o.adagrad_divisor) + o.eps)};
}

// Column k of the row's update, for SGD and Adam (bc1, bc2: Adam's bias corrections,
// 1 - beta^step) and for row-wise AdaGrad given its scale.
TESSERA_HD_INLINE void SgdColumn(float lr, const float* g, float* w, int64_t k) {
  w[k] -= lr * g[k];
}
TESSERA_HD_INLINE void AdagradColumn(float scale, const float* g, float* w, int64_t k) {
  w[k] -= scale * g[k];
}
TESSERA_HD_INLINE void AdamColumn(const RowOptimizerOptions& o, float lr, float bc1, float bc2,
                                  int64_t dim, const float* g, float* w, float* s, int64_t k) {
  float* m = s;
  float* u = s + dim;
  m[k] = o.beta1 * m[k] + (1.0f - o.beta1) * g[k];
  u[k] = o.beta2 * u[k] + (1.0f - o.beta2) * g[k] * g[k];
  w[k] -= lr * (m[k] / bc1) / (sqrtf(u[k] / bc2) + o.eps);
}

}  // namespace tessera::embedding_internal
