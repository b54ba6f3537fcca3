// DenseArch: wiring of bottom MLP, interaction (dot or cross network) and top MLP, forward and
// hand-written backward (embeddings in fp32, or bf16 for the bf16 hand-off). All arithmetic
// happens in the layers' and ops' twins; this file only validates, owns buffers and calls them
// in order.
#include "dense/dense_arch.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/status.h"
#include "dense/interaction.h"
#include "dense/internal/common.h"
#include "dense/internal/dnnl_gemm.h"
#include "dense/internal/kernels.h"

namespace tessera {
namespace {

absl::Status CheckSizes(const char* field, const std::vector<int64_t>& sizes) {
  if (sizes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DenseArchOptions.", field, " is empty: it needs at least one layer"));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("DenseArchOptions.", field, "[", i,
                                                     "] = ", sizes[i], " must be >= 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DenseArch::Validate(const DenseArchOptions& o) {
  auto bad = [](const char* field, int64_t value, const std::string& rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("DenseArchOptions.", field, " = ", value, " ", rule));
  };
  if (o.num_dense < 1) return bad("num_dense", o.num_dense, "must be >= 1");
  if (o.num_embeddings < 1) return bad("num_embeddings", o.num_embeddings, "must be >= 1");
  if (o.embedding_dim < 1) return bad("embedding_dim", o.embedding_dim, "must be >= 1");
  TESSERA_RETURN_IF_ERROR(CheckSizes("bottom_mlp", o.bottom_mlp));
  TESSERA_RETURN_IF_ERROR(CheckSizes("top_mlp", o.top_mlp));
  if (o.top_mlp.back() != 1) {
    return bad("top_mlp.back()", o.top_mlp.back(), "must be 1 (the logit)");
  }
  if (o.interaction == InteractionType::kDot) {
    if (o.bottom_mlp.back() != o.embedding_dim) {
      return bad("bottom_mlp.back()", o.bottom_mlp.back(),
                 absl::StrCat("must equal embedding_dim = ", o.embedding_dim,
                              " for the dot interaction"));
    }
  } else {
    CrossNetworkOptions c;
    c.in_dim = o.bottom_mlp.back() + o.num_embeddings * o.embedding_dim;
    c.num_layers = o.dcn_num_layers;
    c.low_rank = o.dcn_low_rank;
    if (o.dcn_num_layers < 1) return bad("dcn_num_layers", o.dcn_num_layers, "must be >= 1");
    if (o.dcn_low_rank < 0) return bad("dcn_low_rank", o.dcn_low_rank, "must be >= 0");
    TESSERA_RETURN_IF_ERROR(CrossNetwork::Validate(c));
  }
  return absl::OkStatus();
}

absl::StatusOr<DenseArchFootprint> DenseArch::Footprint(const DenseArchOptions& o) {
  TESSERA_RETURN_IF_ERROR(Validate(o));
  constexpr int64_t kMax = kMaxFootprint;
  const char* field = "";      // the part being counted
  const char* bad = nullptr;   // the part whose count overflowed first
  bool over = false;
  // a * b + c, saturating at kMax (then `over` names the field).
  auto mad = [&](int64_t a, int64_t b, int64_t c) {
    if (over) return kMax;
    if (a >= kMax || b >= kMax || c >= kMax || (b != 0 && a > (kMax - c) / b)) {
      over = true;
      bad = field;
      return kMax;
    }
    return a * b + c;
  };
  DenseArchFootprint f;
  auto mlp = [&](const char* name, int64_t in, const std::vector<int64_t>& sizes) {
    field = name;
    DenseArchFootprint::Part part;
    for (int64_t out : sizes) {
      part.params = mad(out, in + 1, part.params);  // weight [out, in] + bias [out]
      part.activations_per_sample = mad(2, out, part.activations_per_sample);  // y and dy
      in = out;
    }
    return part;
  };
  f.bottom_mlp = mlp("bottom_mlp", o.num_dense, o.bottom_mlp);
  const int64_t inter = o.interaction == InteractionType::kDot
                            ? DotInteractionOutputDim(o.num_embeddings, o.embedding_dim)
                            : mad(o.num_embeddings, o.embedding_dim, o.bottom_mlp.back());
  if (o.interaction == InteractionType::kDcn) {
    field = "dcn";
    const int64_t d = inter, r = o.dcn_low_rank;
    const int64_t per_layer = r == 0 ? mad(d, d, d) : mad(mad(2, d, 0), r, d);
    f.cross.params = mad(per_layer, o.dcn_num_layers, 0);
    // x, inner, low per layer, and the scratch gradients
    f.cross.activations_per_sample = mad(mad(2, d, mad(2, r, 0)), o.dcn_num_layers + 1, 0);
  }
  f.top_mlp = mlp("top_mlp", inter, o.top_mlp);
  field = "interaction";
  // interaction out, its gradient, the cross gradient, the bottom's
  f.interaction.activations_per_sample = mad(4, inter, 0);
  if (!over && (f.params() >= kMax || f.activations_per_sample() >= kMax)) {
    over = true;
    bad = "bottom_mlp, top_mlp";
  }
  if (over)
    return absl::InvalidArgumentError(absl::StrCat(
        "DenseArchOptions.", bad, ": the layer sizes give more than 2^56 elements"));
  return f;
}

absl::StatusOr<std::unique_ptr<DenseArch>> DenseArch::Create(const DenseArchOptions& options,
                                                             const DeviceContext& ctx) {
  TESSERA_RETURN_IF_ERROR(Validate(options));
  if (ctx.is_cuda() && !CudaCompiled()) {
    return absl::UnimplementedError(
        "DenseArch: a CUDA DeviceContext in a build without the CUDA path (configure with "
        "-DTESSERA_CUDA=ON on a machine with the CUDA toolkit)");
  }
  if (ctx.is_cuda() && (ctx.compute_stream == nullptr || ctx.cublas_handle == nullptr)) {
    return absl::FailedPreconditionError(
        "DenseArch: the CUDA DeviceContext has no compute stream or cuBLAS handle; create it "
        "with CudaContext::Create (core/cuda_context.h)");
  }
  // bf16 on CUDA takes cuBLAS (dense/linear_cuda.cu); on the CPU it needs oneDNN.
  if (options.dense_dtype == DenseDtype::kBf16 && !ctx.is_cuda() &&
      !dense_internal::DnnlGemmAvailable()) {
    return absl::UnimplementedError(
        "DenseArch: dense_dtype bf16 on the CPU needs oneDNN; this build has none (install "
        "libdnnl-dev and reconfigure), or train on a GPU (device: cuda)");
  }
  std::unique_ptr<DenseArch> arch(new DenseArch());
  arch->options_ = options;
  arch->ctx_ = ctx;
  TESSERA_ASSIGN_OR_RETURN(arch->bottom_, Mlp::Create("bottom_mlp", options.num_dense,
                                                      options.bottom_mlp, /*relu_last=*/true, ctx,
                                                       options.dense_dtype));
  if (options.interaction == InteractionType::kDcn) {
    CrossNetworkOptions c;
    c.in_dim = options.bottom_mlp.back() + options.num_embeddings * options.embedding_dim;
    c.num_layers = options.dcn_num_layers;
    c.low_rank = options.dcn_low_rank;
    TESSERA_ASSIGN_OR_RETURN(arch->cross_, CrossNetwork::Create("cross", c, ctx));
  }
  TESSERA_ASSIGN_OR_RETURN(arch->top_, Mlp::Create("top_mlp", arch->interaction_dim(),
                                                   options.top_mlp, /*relu_last=*/false, ctx,
                                                    options.dense_dtype));
  return arch;
}

int64_t DenseArch::interaction_dim() const {
  if (options_.interaction == InteractionType::kDot) {
    return DotInteractionOutputDim(options_.num_embeddings, options_.embedding_dim);
  }
  return options_.bottom_mlp.back() + options_.num_embeddings * options_.embedding_dim;
}

void DenseArch::Init(uint64_t seed) {
  bottom_->Init(seed);
  if (cross_ != nullptr) cross_->Init(seed);
  top_->Init(seed);
}

std::vector<Parameter*> DenseArch::parameters() {
  std::vector<Parameter*> out = bottom_->parameters();
  if (cross_ != nullptr) {
    for (Parameter* p : cross_->parameters()) out.push_back(p);
  }
  for (Parameter* p : top_->parameters()) out.push_back(p);
  return out;
}

absl::Status DenseArch::Forward(const float* dense, const float* emb, int64_t batch,
                                const float** logits) {
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull("DenseArch::Forward", "emb", emb));
  return ForwardWith("DenseArch::Forward", dense, emb, nullptr, batch, logits);
}

absl::Status DenseArch::ForwardBf16(const float* dense, const uint16_t* emb, int64_t batch,
                                    const float** logits) {
  constexpr char kOp[] = "DenseArch::ForwardBf16";
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(kOp, "emb", emb));
  if (ctx_.is_cuda()) return dense_internal::NoBf16CudaTwin(kOp);
  return ForwardWith(kOp, dense, nullptr, emb, batch, logits);
}

absl::Status DenseArch::ForwardWith(const char* op, const float* dense, const float* emb,
                                    const uint16_t* emb16, int64_t batch, const float** logits) {
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(op, "dense", dense));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(op, "logits", logits));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckSize(op, "batch", batch));
  const Device dev = ctx_.device;
  const int64_t nf = options_.num_embeddings, d = options_.embedding_dim;
  const int64_t bottom_dim = bottom_->out_dim(), inter = interaction_dim();
  // Every buffer of the step grows here, so Backward never allocates.
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, inter, &interaction_out_));
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, inter, &d_interaction_));
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, 1, &d_top_));
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, bottom_dim, &d_bottom_));
  if (cross_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, inter, &d_cross_));
  }

  const float* bottom_out = nullptr;
  TESSERA_RETURN_IF_ERROR(bottom_->Forward(dense, batch, &bottom_out));
  const float* top_in = interaction_out_.data<float>();
  if (cross_ == nullptr) {
    TESSERA_RETURN_IF_ERROR(
        emb16 != nullptr
            ? DotInteractionForwardBf16(ctx_, bottom_out, emb16, batch, nf, d,
                                        interaction_out_.data<float>())
            : DotInteractionForward(ctx_, bottom_out, emb, batch, nf, d,
                                    interaction_out_.data<float>()));
  } else {
    TESSERA_RETURN_IF_ERROR(
        emb16 != nullptr
            ? dense_internal::ConcatColumnsBf16(ctx_, bottom_out, bottom_dim, emb16, nf * d,
                                                batch, interaction_out_.data<float>())
            : dense_internal::ConcatColumns(ctx_, bottom_out, bottom_dim, emb, nf * d, batch,
                                            interaction_out_.data<float>()));
    TESSERA_RETURN_IF_ERROR(cross_->Forward(interaction_out_.data<float>(), batch, &top_in));
  }
  TESSERA_RETURN_IF_ERROR(top_->Forward(top_in, batch, logits));
  dense_ = dense;
  emb_ = emb;
  emb16_ = emb16;
  bottom_out_ = bottom_out;
  batch_ = batch;
  return absl::OkStatus();
}

void DenseArch::set_grad_ready_callback(GradReadyCallback ready) {
  bottom_->set_grad_ready_callback(ready);
  top_->set_grad_ready_callback(ready);
  if (cross_ != nullptr) cross_->set_grad_ready_callback(ready);
}

absl::Status DenseArch::Backward(const float* d_logits, float* d_emb) {
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull("DenseArch::Backward", "d_emb", d_emb));
  return BackwardWith("DenseArch::Backward", d_logits, d_emb, nullptr);
}

absl::Status DenseArch::BackwardBf16(const float* d_logits, uint16_t* d_emb) {
  constexpr char kOp[] = "DenseArch::BackwardBf16";
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(kOp, "d_emb", d_emb));
  return BackwardWith(kOp, d_logits, nullptr, d_emb);
}

absl::Status DenseArch::BackwardWith(const char* op, const float* d_logits, float* d_emb,
                                     uint16_t* d_emb16) {
  if (batch_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(op, ": Backward before Forward"));
  }
  if ((d_emb16 != nullptr) != (emb16_ != nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": the last forward took ", emb16_ != nullptr ? "bf16" : "fp32",
        " embeddings, so the backward writes d_emb in that dtype (call ",
        emb16_ != nullptr ? "BackwardBf16" : "Backward", ")"));
  }
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(op, "d_logits", d_logits));
  const int64_t nf = options_.num_embeddings, d = options_.embedding_dim;
  // The top MLP overwrites its dy in place; d_logits is the caller's.
  TESSERA_RETURN_IF_ERROR(
      dense_internal::CopyFloats(ctx_, d_logits, batch_, d_top_.data<float>()));
  TESSERA_RETURN_IF_ERROR(top_->Backward(d_top_.data<float>(), d_interaction_.data<float>()));
  if (cross_ == nullptr) {
    TESSERA_RETURN_IF_ERROR(
        d_emb16 != nullptr
            ? DotInteractionBackwardBf16(ctx_, bottom_out_, emb16_, d_interaction_.data<float>(),
                                         batch_, nf, d, d_bottom_.data<float>(), d_emb16)
            : DotInteractionBackward(ctx_, bottom_out_, emb_, d_interaction_.data<float>(),
                                     batch_, nf, d, d_bottom_.data<float>(), d_emb));
  } else {
    TESSERA_RETURN_IF_ERROR(cross_->Backward(d_interaction_.data<float>(), d_cross_.data<float>()));
    TESSERA_RETURN_IF_ERROR(
        d_emb16 != nullptr
            ? dense_internal::SplitColumnsBf16(ctx_, d_cross_.data<float>(), bottom_->out_dim(),
                                               nf * d, batch_, d_bottom_.data<float>(), d_emb16)
            : dense_internal::SplitColumns(ctx_, d_cross_.data<float>(), bottom_->out_dim(),
                                           nf * d, batch_, d_bottom_.data<float>(), d_emb));
  }
  return bottom_->Backward(d_bottom_.data<float>(), nullptr);
}

}  // namespace tessera
