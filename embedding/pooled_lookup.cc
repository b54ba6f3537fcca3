// pooled_lookup.h's entry points: argument checks (once, for both twins) and the dispatch
// between the CPU twin (pooled_lookup_cpu.cc) and the CUDA twin (pooled_lookup_cuda.cu,
// pooled_forward_cuda.cu). This is the only file of the op that knows whether the CUDA path is
// built.
#include "embedding/pooled_lookup.h"

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"  // NoCudaPath: the one message for a build without CUDA
#include "core/status.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#if TESSERA_HAVE_CUDA
#include "embedding/pooled_lookup_cuda.h"
#endif

namespace tessera {
namespace embedding_internal {

absl::Status CheckForwardArgs(const char* op, const PooledLookupArgs& a) {
  if (a.dim <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", a.dim));
  if (a.out_stride < a.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": out_stride ", a.out_stride, " < dim ", a.dim));
  }
  if (a.num_bags < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": num_bags ", a.num_bags));
  }
  if (a.num_bags == 0) return absl::OkStatus();
  if (a.offsets == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null offsets"));
  if ((a.out == nullptr) == (a.out_bf16 == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, a.out == nullptr ? ": null out" : ": both out and out_bf16 given (one output)"));
  }
  if (a.out_bf16 != nullptr && a.weight_dtype == RowDtype::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bf16 outputs (out_bf16) need a 16-bit table; this one stores fp32"));
  }
  return absl::OkStatus();
}

absl::Status CheckHostBags(const char* op, const int64_t* offsets, const int64_t* indices,
                           int64_t num_bags) {
  if (num_bags <= 0) return absl::OkStatus();
  if (offsets[0] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": offsets[0] = ", offsets[0], " < 0"));
  }
  for (int64_t b = 0; b < num_bags; ++b) {
    if (offsets[b + 1] < offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": offsets decrease at bag ", b, " (",
                                                     offsets[b], " then ", offsets[b + 1], ")"));
    }
  }
  if (offsets[num_bags] > offsets[0] && indices == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null indices"));
  }
  return absl::OkStatus();
}

absl::Status CheckForwardHostData(const char* op, const PooledLookupArgs& a) {
  if (a.num_bags <= 0) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(CheckHostBags(op, a.offsets, a.indices, a.num_bags));
  const int64_t jb = a.offsets[0], je = a.offsets[a.num_bags];
  if (je > jb && a.weights == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null weights"));
  }
  if (a.num_slots >= 0) {
    for (int64_t j = jb; j < je; ++j) {
      if (a.indices[j] < 0 || a.indices[j] >= a.num_slots) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": index ", a.indices[j], " at ", j,
                                                       " outside [0, ", a.num_slots, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGradientSources(const char* op, absl::Span<const BagGradients> sources,
                                  int64_t dim) {
  if (dim <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", dim));
  int bf16 = -1;  // whether the sources with bags hold bf16 gradients (-1: none seen yet)
  for (size_t s = 0; s < sources.size(); ++s) {
    const BagGradients& src = sources[s];
    if (src.num_bags < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": source ", s, " num_bags ", src.num_bags));
    }
    if (src.num_bags == 0) continue;
    const bool has_grad = src.grad != nullptr || src.grad_bf16 != nullptr;
    if (src.offsets == nullptr || !has_grad || src.grad_stride < dim) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": source ", s,
                                                     " has null offsets or grad, or grad_stride ",
                                                     src.grad_stride, " < dim ", dim));
    }
    if (src.grad != nullptr && src.grad_bf16 != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": source ", s, " has both grad and grad_bf16 (one gradient)"));
    }
    const int this_bf16 = src.grad_bf16 != nullptr ? 1 : 0;
    if (bf16 >= 0 && bf16 != this_bf16) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": source ", s, " has ", this_bf16 ? "bf16" : "fp32",
          " gradients and an earlier source the other kind (one kind per call)"));
    }
    bf16 = this_bf16;
  }
  return absl::OkStatus();
}

absl::Status CheckNoBf16ForCuda(const char* op, const PooledLookupArgs* forward,
                                absl::Span<const BagGradients> sources) {
  bool bf16 = forward != nullptr && forward->out_bf16 != nullptr;
  for (const BagGradients& src : sources) bf16 = bf16 || src.grad_bf16 != nullptr;
  if (!bf16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": bf16 pooled outputs / gradients are not supported on CUDA yet (use output_dtype "
      "fp32 with device cuda, or run on the CPU)"));
}

absl::Status CheckFp32ForCuda(const char* op, RowDtype dtype) {
  if (dtype == RowDtype::kF32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", RowDtypeName(dtype),
      " embedding storage is not supported on CUDA yet (use storage.dtype fp32 with device "
      "cuda, or run on the CPU)"));
}

absl::Status CheckRowUpdate(const char* op, const RowUpdateArgs& a) {
  if (a.dim <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", a.dim));
  if (a.step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": step ", a.step, " (1-based)"));
  }
  if (a.weights == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null weights"));
  if (RowStateDim(a.optimizer.type, a.dim) > 0 && a.state == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the optimizer keeps per-row state but state is null"));
  }
  return absl::OkStatus();
}

}  // namespace embedding_internal

namespace {

namespace ei = embedding_internal;

// CPU checks of gradient sources: the pointer-free ones, then each source's host offsets.
absl::Status CheckHostSources(const char* op, absl::Span<const BagGradients> sources,
                              int64_t dim) {
  TESSERA_RETURN_IF_ERROR(ei::CheckGradientSources(op, sources, dim));
  for (const BagGradients& src : sources) {
    TESSERA_RETURN_IF_ERROR(ei::CheckHostBags(op, src.offsets, src.indices, src.num_bags));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PooledLookupForward(const DeviceContext& ctx, const PooledLookupArgs& args) {
  constexpr const char* kOp = "PooledLookupForward";
  TESSERA_RETURN_IF_ERROR(ei::CheckForwardArgs(kOp, args));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    TESSERA_RETURN_IF_ERROR(ei::CheckFp32ForCuda(kOp, args.weight_dtype));
    TESSERA_RETURN_IF_ERROR(ei::CheckNoBf16ForCuda(kOp, &args, {}));
    return PooledLookupForwardCuda(ctx, args);
  }
#else
  if (ctx.is_cuda()) return NoCudaPath(kOp);
#endif
  TESSERA_RETURN_IF_ERROR(ei::CheckForwardHostData(kOp, args));
  if (args.num_bags > 0) ei::PooledLookupForwardCpu(args);
  return absl::OkStatus();
}

absl::Status AggregateRowGradients(const DeviceContext& ctx, absl::Span<const BagGradients> sources,
                                   int64_t dim, PoolingMode pooling, EmbeddingWorkspace* ws,
                                   std::vector<int64_t>* unique_slots,
                                   std::vector<float>* row_grads) {
  constexpr const char* kOp = "AggregateRowGradients";
  TESSERA_RETURN_IF_ERROR(ei::CheckGradientSources(kOp, sources, dim));
  if (unique_slots == nullptr || row_grads == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": null output"));
  }
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    TESSERA_RETURN_IF_ERROR(ei::CheckNoBf16ForCuda(kOp, nullptr, sources));
    return ei::AggregateRowGradientsCudaToHost(ctx, sources, dim, pooling, unique_slots,
                                               row_grads);
  }
#else
  if (ctx.is_cuda()) return NoCudaPath(kOp);
#endif
  if (ws == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": null workspace"));
  TESSERA_RETURN_IF_ERROR(CheckHostSources(kOp, sources, dim));
  return ei::AggregateRowGradientsCpu(sources, dim, pooling, ws, unique_slots, row_grads);
}

absl::Status ApplyRowUpdates(const DeviceContext& ctx, absl::Span<const int64_t> slots,
                             const float* row_grads, const RowUpdateArgs& args) {
  constexpr const char* kOp = "ApplyRowUpdates";
  TESSERA_RETURN_IF_ERROR(ei::CheckRowUpdate(kOp, args));
  if (!slots.empty() && row_grads == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": null row_grads"));
  }
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    TESSERA_RETURN_IF_ERROR(ei::CheckFp32ForCuda(kOp, args.weight_dtype));
    return ApplyRowUpdatesCuda(ctx, slots.data(), nullptr, static_cast<int64_t>(slots.size()),
                               row_grads, args);
  }
#else
  if (ctx.is_cuda()) return NoCudaPath(kOp);
#endif
  ei::ApplyRowUpdatesCpu(slots, row_grads, args);
  return absl::OkStatus();
}

absl::Status FusedBackwardUpdate(const DeviceContext& ctx, absl::Span<const BagGradients> sources,
                                 PoolingMode pooling, const RowUpdateArgs& args,
                                 EmbeddingWorkspace* ws) {
  constexpr const char* kOp = "FusedBackwardUpdate";
  // The update is checked first, so a bad argument changes nothing.
  TESSERA_RETURN_IF_ERROR(ei::CheckRowUpdate("ApplyRowUpdates", args));
  TESSERA_RETURN_IF_ERROR(ei::CheckGradientSources("AggregateRowGradients", sources, args.dim));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    TESSERA_RETURN_IF_ERROR(ei::CheckFp32ForCuda(kOp, args.weight_dtype));
    TESSERA_RETURN_IF_ERROR(ei::CheckNoBf16ForCuda(kOp, nullptr, sources));
    return ei::FusedBackwardUpdateCudaOnce(ctx, sources, pooling, args);
  }
#else
  if (ctx.is_cuda()) return NoCudaPath(kOp);
#endif
  if (ws == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": null workspace"));
  TESSERA_RETURN_IF_ERROR(CheckHostSources("AggregateRowGradients", sources, args.dim));
  return ei::FusedBackwardUpdateCpu(sources, pooling, args, ws);
}

}  // namespace tessera
