// Dispatch of BCE with logits to its CPU or CUDA twin.
#include "dense/loss.h"

#include "core/status.h"
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"

namespace tessera {

absl::StatusOr<double> BceWithLogits(const DeviceContext& ctx, const float* logits,
                                     const float* labels, int64_t batch, float* d_logits) {
  constexpr char kOp[] = "BceWithLogits";
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(kOp, "logits", logits));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(kOp, "labels", labels));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckSize(kOp, "batch", batch));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::BceWithLogitsCuda(ctx, logits, labels, batch, d_logits);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/loss_cuda.cu");
#endif
  return dense_internal::BceWithLogitsCpu(ctx, logits, labels, batch, d_logits);
}

absl::Status ScaleGradient(const DeviceContext& ctx, float* d_logits, int64_t batch, float scale) {
  constexpr char kOp[] = "ScaleGradient";
  if (batch < 0) return absl::InvalidArgumentError("ScaleGradient: batch < 0");
  if (batch == 0) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(kOp, "d_logits", d_logits));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return dense_internal::ScaleGradientCuda(ctx, d_logits, batch, scale);
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/loss_cuda.cu");
#endif
  return dense_internal::ScaleGradientCpu(d_logits, batch, scale);
}

}  // namespace tessera
