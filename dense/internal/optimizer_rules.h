// The dense optimizers' per-element update rules, one definition for the CPU twin and the CUDA
// kernels (TESSERA_HD), PyTorch's formulas (torch.optim, single-tensor path, no momentum /
// lr_decay / amsgrad / maximize), weight decay added to the gradient (L2, not decoupled):
//   g' = g + wd w
//   SGD      w -= lr g'
//   AdaGrad  s += g' g';  w -= lr g' / (sqrt(s) + eps)
//   Adam     m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g' g';
//            w -= step_size m / (sqrt(v) / bc2_sqrt + eps)
//            with step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), t the 1-based step
//            (both computed in double on the host, as PyTorch does in Python floats).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace tessera::dense_internal {

struct DenseStepScalars {
  float lr = 0.0f;
  float weight_decay = 0.0f;
  float eps = 0.0f;
  float beta1 = 0.0f;
  float beta2 = 0.0f;
  float step_size = 0.0f;  // Adam: lr / (1 - beta1^t)
  float bc2_sqrt = 1.0f;   // Adam: sqrt(1 - beta2^t)
};

TESSERA_HD_INLINE void SgdUpdate(const DenseStepScalars& s, float* w, float g) {
  const float gd = g + s.weight_decay * *w;
  *w -= s.lr * gd;
}

TESSERA_HD_INLINE void AdagradUpdate(const DenseStepScalars& s, float* w, float g, float* sum) {
  const float gd = g + s.weight_decay * *w;
  *sum += gd * gd;
  *w -= s.lr * (gd / (sqrtf(*sum) + s.eps));
}

TESSERA_HD_INLINE void AdamUpdate(const DenseStepScalars& s, float* w, float g, float* m,
                                  float* v) {
  const float gd = g + s.weight_decay * *w;
  *m = s.beta1 * *m + (1.0f - s.beta1) * gd;
  *v = s.beta2 * *v + (1.0f - s.beta2) * (gd * gd);
  *w -= s.step_size * (*m / (sqrtf(*v) / s.bc2_sqrt + s.eps));
}

}  // namespace tessera::dense_internal
