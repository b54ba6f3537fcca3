// Row optimizers: the update rules applied to one embedding row inside the fused backward, once
// per unique row of the batch with that row's summed gradient. One definition, callable from the
// CPU twin and from CUDA kernels (TESSERA_HD), so both paths apply bit-for-bit the same formula.
//
// Per-row optimizer state lives next to the row in the RowStore (state_dim floats per row):
//   kSgd            0 floats      w -= lr * g
//   kRowWiseAdagrad 1 float  v    v += mean(g^2); w -= lr * g / (sqrt(v / c) + eps)
//   kAdam           2*dim floats  m, u (lazy Adam: only rows in the batch update their moments)
//                                 m = b1 m + (1-b1) g; u = b2 u + (1-b2) g^2;
//                                 w -= lr * (m / (1-b1^t)) / (sqrt(u / (1-b2^t)) + eps)
// where c = `adagrad_divisor` (1 normally; M replicas in the 2D `average` replica sync) and t is
// the global 1-based step.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/enum_names.h"
#include "core/hd.h"

namespace tessera {

enum class RowOptimizerType { kSgd, kRowWiseAdagrad, kAdam };
inline constexpr EnumName<RowOptimizerType> kRowOptimizerTypeNames[] = {
    {RowOptimizerType::kSgd, "sgd"},
    {RowOptimizerType::kRowWiseAdagrad, "rowwise_adagrad"},
    {RowOptimizerType::kAdam, "adam"}};
// "sgd" / "rowwise_adagrad" / "adam" (optimizer.embedding.type); Parse: InvalidArgument otherwise.
inline const char* RowOptimizerTypeName(RowOptimizerType t) {
  return NameIn(kRowOptimizerTypeNames, t);
}
inline absl::StatusOr<RowOptimizerType> ParseRowOptimizerType(const std::string& name) {
  return ParseIn(kRowOptimizerTypeNames, name, "embedding optimizer type");
}

struct RowOptimizerOptions {
  RowOptimizerType type = RowOptimizerType::kRowWiseAdagrad;
  // Added to the denominator. Default: 1e-8 (FBGEMM's default for row-wise AdaGrad).
  float eps = 1e-8f;
  // Adam moment decays. Default: 0.9 and 0.999.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // Row-wise AdaGrad divides its accumulator by this in the step (v / c). Default: 1.
  float adagrad_divisor = 1.0f;
  // Initial value of the row-wise AdaGrad accumulator. Default: 0.
  float adagrad_initial = 0.0f;
};

// Floats of optimizer state per row for `type` and row width `dim`.
TESSERA_HD_INLINE int64_t RowStateDim(RowOptimizerType type, int64_t dim) {
  switch (type) {
    case RowOptimizerType::kSgd: return 0;
    case RowOptimizerType::kRowWiseAdagrad: return 1;
    case RowOptimizerType::kAdam: return 2 * dim;
  }
  return 0;
}

// Sum of g[k]^2 over k in [0, dim), in a fixed order that compilers vectorise: 16 interleaved
// partial sums (partial l takes k = l mod 16), combined pairwise at the end. A plain sequential
// sum is one dependent add per element (~4 cycles each), which made row-wise AdaGrad's update
// at dim 128 cost more than the row's memory traffic. The order does not depend on the ISA or
// the thread count, and CUDA code calling this gets the same order.
TESSERA_HD_INLINE float RowSumOfSquares(const float* g, int64_t dim) {
  constexpr int kLanes = 16;
  float part[kLanes];
  for (int l = 0; l < kLanes; ++l) part[l] = 0.0f;
  int64_t k = 0;
  for (; k + kLanes <= dim; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += g[k + l] * g[k + l];
  }
  for (int l = 0; k + l < dim; ++l) part[l] += g[k + l] * g[k + l];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  }
  return part[0];
}

// Row-wise AdaGrad given the row's mean squared gradient: v += mean_sq, then every one of the
// `width` columns in `w` steps by lr * g / (sqrt(v / c) + eps). ApplyRowUpdate uses it for whole
// rows; a column shard of a row (sharding/) passes the mean over the full row, so the shards of
// one row apply exactly the update the whole row would get.
TESSERA_HD_INLINE void RowWiseAdagradStep(const RowOptimizerOptions& o, float lr, float mean_sq,
                                          int64_t width, const float* g, float* w, float* v) {
  v[0] += mean_sq;
  float scale = lr / (sqrtf(v[0] / o.adagrad_divisor) + o.eps);
  for (int64_t k = 0; k < width; ++k) w[k] -= scale * g[k];
}

// Applies one update to row `w` (dim floats) with state `s` (RowStateDim floats) and summed
// gradient `g`. `lr` is the learning rate of this step, `step` the global 1-based step.
TESSERA_HD_INLINE void ApplyRowUpdate(const RowOptimizerOptions& o, float lr, int64_t step,
                                      int64_t dim, const float* g, float* w, float* s) {
  switch (o.type) {
    case RowOptimizerType::kSgd:
      for (int64_t k = 0; k < dim; ++k) w[k] -= lr * g[k];
      break;
    case RowOptimizerType::kRowWiseAdagrad:
      RowWiseAdagradStep(o, lr, RowSumOfSquares(g, dim) / static_cast<float>(dim), dim, g, w, s);
      break;
    case RowOptimizerType::kAdam: {
      float* m = s;
      float* u = s + dim;
      float bc1 = 1.0f - powf(o.beta1, static_cast<float>(step));
      float bc2 = 1.0f - powf(o.beta2, static_cast<float>(step));
      for (int64_t k = 0; k < dim; ++k) {
        m[k] = o.beta1 * m[k] + (1.0f - o.beta1) * g[k];
        u[k] = o.beta2 * u[k] + (1.0f - o.beta2) * g[k] * g[k];
        w[k] -= lr * (m[k] / bc1) / (sqrtf(u[k] / bc2) + o.eps);
      }
      break;
    }
  }
}

}  // namespace tessera
