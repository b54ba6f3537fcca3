// Dispatch of the dot interaction to its CPU or CUDA twin (dense/internal/kernels.h); the bf16
// entry points have the CPU twin only.
#include "dense/interaction.h"

#include "core/status.h"
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"

namespace tessera {
namespace {

absl::Status CheckShape(const char* op, int64_t batch, int64_t num_embeddings, int64_t dim) {
  using dense_internal::CheckSize;
  TESSERA_RETURN_IF_ERROR(CheckSize(op, "batch", batch));
  TESSERA_RETURN_IF_ERROR(CheckSize(op, "num_embeddings", num_embeddings));
  TESSERA_RETURN_IF_ERROR(CheckSize(op, "dim", dim));
  TESSERA_RETURN_IF_ERROR(
      CheckSize(op, "batch * output width", batch * DotInteractionOutputDim(num_embeddings, dim)));
  return CheckSize(op, "batch * num_embeddings * dim", batch * num_embeddings * dim);
}

// The forward's arguments (emb fp32 or bf16).
absl::Status CheckForward(const char* op, const float* bottom, const void* emb, int64_t batch,
                          int64_t num_embeddings, int64_t dim, const float* out) {
  using dense_internal::CheckNotNull;
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "bottom", bottom));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "emb", emb));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "out", out));
  return CheckShape(op, batch, num_embeddings, dim);
}

// The backward's arguments (emb and d_emb fp32 or bf16).
absl::Status CheckBackward(const char* op, const float* bottom, const void* emb,
                           const float* d_out, int64_t batch, int64_t num_embeddings, int64_t dim,
                           const float* d_bottom, const void* d_emb) {
  using dense_internal::CheckNotNull;
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "bottom", bottom));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "emb", emb));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "d_out", d_out));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "d_bottom", d_bottom));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(op, "d_emb", d_emb));
  return CheckShape(op, batch, num_embeddings, dim);
}

}  // namespace

absl::Status DotInteractionForward(const DeviceContext& ctx, const float* bottom,
                                   const float* emb, int64_t batch, int64_t num_embeddings,
                                   int64_t dim, float* out) {
  constexpr char kOp[] = "DotInteractionForward";
  TESSERA_RETURN_IF_ERROR(CheckForward(kOp, bottom, emb, batch, num_embeddings, dim, out));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::DotInteractionForwardCuda(ctx, bottom, emb, batch, num_embeddings, dim,
                                                     out);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/interaction_cuda.cu");
#endif
  return dense_internal::DotInteractionForwardCpu(ctx, bottom, emb, batch, num_embeddings, dim,
                                                  out);
}

absl::Status DotInteractionBackward(const DeviceContext& ctx, const float* bottom,
                                    const float* emb, const float* d_out, int64_t batch,
                                    int64_t num_embeddings, int64_t dim, float* d_bottom,
                                    float* d_emb) {
  constexpr char kOp[] = "DotInteractionBackward";
  TESSERA_RETURN_IF_ERROR(
      CheckBackward(kOp, bottom, emb, d_out, batch, num_embeddings, dim, d_bottom, d_emb));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::DotInteractionBackwardCuda(ctx, bottom, emb, d_out, batch,
                                                      num_embeddings, dim, d_bottom, d_emb);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/interaction_cuda.cu");
#endif
  return dense_internal::DotInteractionBackwardCpu(ctx, bottom, emb, d_out, batch,
                                                   num_embeddings, dim, d_bottom, d_emb);
}

absl::Status DotInteractionForwardBf16(const DeviceContext& ctx, const float* bottom,
                                       const uint16_t* emb, int64_t batch, int64_t num_embeddings,
                                       int64_t dim, float* out) {
  constexpr char kOp[] = "DotInteractionForwardBf16";
  TESSERA_RETURN_IF_ERROR(CheckForward(kOp, bottom, emb, batch, num_embeddings, dim, out));
  if (ctx.is_cuda()) return dense_internal::NoBf16CudaTwin(kOp);
  return dense_internal::DotInteractionForwardBf16Cpu(ctx, bottom, emb, batch, num_embeddings,
                                                      dim, out);
}

absl::Status DotInteractionBackwardBf16(const DeviceContext& ctx, const float* bottom,
                                        const uint16_t* emb, const float* d_out, int64_t batch,
                                        int64_t num_embeddings, int64_t dim, float* d_bottom,
                                        uint16_t* d_emb) {
  constexpr char kOp[] = "DotInteractionBackwardBf16";
  TESSERA_RETURN_IF_ERROR(
      CheckBackward(kOp, bottom, emb, d_out, batch, num_embeddings, dim, d_bottom, d_emb));
  if (ctx.is_cuda()) return dense_internal::NoBf16CudaTwin(kOp);
  return dense_internal::DotInteractionBackwardBf16Cpu(ctx, bottom, emb, d_out, batch,
                                                       num_embeddings, dim, d_bottom, d_emb);
}

}  // namespace tessera
