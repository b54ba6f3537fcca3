// Linear and Mlp: parameter and buffer management around the Linear kernels, and the dispatch
// between their CPU and CUDA twins.
#include "dense/mlp.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"

namespace tessera {

using dense_internal::CheckNotNull;
using dense_internal::CheckSize;

absl::Status LinearForward(const DeviceContext& ctx, const float* x, const float* w,
                           const float* b, int64_t batch, int64_t in, int64_t out, Activation act,
                           float* y) {
  constexpr char kOp[] = "LinearForward";
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "x", x));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "w", w));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "b", b));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "y", y));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "batch", batch));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "in", in));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "out", out));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) return dense_internal::LinearForwardCuda(ctx, x, w, b, batch, in, out, act, y);
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/linear_cuda.cu");
#endif
  return dense_internal::LinearForwardCpu(ctx, x, w, b, batch, in, out, act, y);
}

absl::Status LinearBackward(const DeviceContext& ctx, const float* x, const float* w,
                            const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                            Activation act, float* dw, float* db, float* dx) {
  constexpr char kOp[] = "LinearBackward";
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "x", x));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "w", w));
  if (act != Activation::kNone) TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "y", y));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "dy", dy));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "dw", dw));
  TESSERA_RETURN_IF_ERROR(CheckNotNull(kOp, "db", db));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "batch", batch));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "in", in));
  TESSERA_RETURN_IF_ERROR(CheckSize(kOp, "out", out));
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::LinearBackwardCuda(ctx, x, w, y, dy, batch, in, out, act, dw, db, dx);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin(kOp, "dense/linear_cuda.cu");
#endif
  return dense_internal::LinearBackwardCpu(ctx, x, w, y, dy, batch, in, out, act, dw, db, dx);
}

Linear::Linear(Unallocated, std::string name, int64_t in, int64_t out, Activation act,
               const DeviceContext& ctx, DenseDtype dtype)
    : name_(std::move(name)), ctx_(ctx), in_(in), out_(out), act_(act), dtype_(dtype) {}

Linear::Linear(std::string name, int64_t in, int64_t out, Activation act,
               const DeviceContext& ctx, DenseDtype dtype)
    : Linear(Unallocated{}, std::move(name), in, out, act, ctx, dtype) {
  TESSERA_CHECK_OK(AllocateParameters()) << name_;
}

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(std::string name, int64_t in, int64_t out,
                                                       Activation act, const DeviceContext& ctx,
                                                       DenseDtype dtype) {
  std::unique_ptr<Linear> l(new Linear(Unallocated{}, std::move(name), in, out, act, ctx, dtype));
  TESSERA_RETURN_IF_ERROR(l->AllocateParameters());
  return l;
}

absl::Status Linear::AllocateParameters() {
  if (in_ < 1 || out_ < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": in ", in_, ", out ", out_, " must both be >= 1"));
  // Layers with fewer than 8 outputs (the logit layer) stay fp32: a negligible share of the
  // flops, and oneDNN 2.6's bf16 matmul for their input gradient (an outer product, K = out)
  // was off by more than the two bf16 roundings (tests/dense/linear_bf16_test.cc). The CUDA
  // twin keeps the same rule, so both devices run the same layers in bf16.
  if (dtype_ == DenseDtype::kBf16 && out_ < 8) dtype_ = DenseDtype::kFp32;
  if (dtype_ == DenseDtype::kBf16 && ctx_.is_cuda()) {
    bf16_cuda_ = std::make_unique<dense_internal::Bf16OperandsCuda>();
  } else if (dtype_ == DenseDtype::kBf16) {
    bf16_ = std::make_unique<dense_internal::Bf16Operands>();
  }
  TESSERA_ASSIGN_OR_RETURN(weight_,
                           MakeParameter(absl::StrCat(name_, ".weight"), {out_, in_}, ctx_.device));
  TESSERA_ASSIGN_OR_RETURN(bias_, MakeParameter(absl::StrCat(name_, ".bias"), {out_}, ctx_.device));
  return absl::OkStatus();
}

Linear::~Linear() = default;

void Linear::Init(uint64_t seed) {
  dense_internal::InitNormal(seed, std::sqrt(2.0f / static_cast<float>(in_ + out_)), &weight_);
  dense_internal::InitNormal(seed, std::sqrt(1.0f / static_cast<float>(out_)), &bias_);
}

absl::Status Linear::Forward(const float* x, int64_t batch, const float** y) {
  return ForwardImpl(x, nullptr, batch, y);
}

absl::Status Linear::ForwardBf16Input(const uint16_t* x16, int64_t batch, const float** y) {
  if (bf16_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": bf16 input to an fp32 layer"));
  }
  TESSERA_RETURN_IF_ERROR(CheckNotNull(name_, "x16", x16));
  return ForwardImpl(nullptr, x16, batch, y);
}

void Linear::set_bf16_output(bool on) {
  if (bf16_ != nullptr) bf16_->bf16_out = on;
}

const uint16_t* Linear::bf16_output() const {
  return bf16_ != nullptr && bf16_->bf16_out ? bf16_->y.data() : nullptr;
}

uint16_t* Linear::bf16_grad_input() {
  if (bf16_ == nullptr || !bf16_->bf16_out) return nullptr;
  if (static_cast<int64_t>(bf16_->dy.size()) < batch_ * out_) bf16_->dy.resize(batch_ * out_);
  return bf16_->dy.data();
}

absl::Status Linear::ForwardImpl(const float* x, const uint16_t* x16, int64_t batch,
                                 const float** y) {
  TESSERA_RETURN_IF_ERROR(CheckNotNull(name_, "y (output pointer)", y));
  TESSERA_RETURN_IF_ERROR(CheckSize(name_, "batch", batch));
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(ctx_.device, batch, out_, &y_));
  if (bf16_cuda_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(CheckNotNull(name_, "x", x));
#if TESSERA_HAVE_CUDA
    TESSERA_RETURN_IF_ERROR(dense_internal::LinearForwardBf16Cuda(
        ctx_, x, weight_.value.data<float>(), bias_.value.data<float>(), batch, in_, out_, act_,
        y_.data<float>(), bf16_cuda_.get()));
#else
    return dense_internal::NoCudaTwin("LinearForward(bf16)", "dense/linear_cuda.cu");
#endif
  } else if (bf16_ != nullptr) {
    if (x16 == nullptr) TESSERA_RETURN_IF_ERROR(CheckNotNull(name_, "x", x));
    TESSERA_RETURN_IF_ERROR(dense_internal::LinearForwardBf16Cpu(
        x, x16, weight_.value.data<float>(), bias_.value.data<float>(), batch, in_, out_, act_,
        y_.data<float>(), bf16_.get()));
  } else {
    TESSERA_RETURN_IF_ERROR(LinearForward(ctx_, x, weight_.value.data<float>(),
                                          bias_.value.data<float>(), batch, in_, out_, act_,
                                          y_.data<float>()));
  }
  x_ = x != nullptr ? x : reinterpret_cast<const float*>(x16);  // non-null: Forward happened
  batch_ = batch;
  *y = bf16_output() != nullptr ? nullptr : y_.data<float>();
  return absl::OkStatus();
}

absl::Status Linear::Backward(float* dy, float* dx) { return BackwardBf16(dy, dx, nullptr); }

absl::Status Linear::BackwardBf16(float* dy, float* dx, uint16_t* dx16) {
  if ((dy == nullptr && bf16_grad_input() == nullptr) || (dx16 != nullptr && bf16_ == nullptr)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": a bf16 gradient hand-off needs a CPU bf16 layer with bf16 output"));
  }
  if (x_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": Backward before Forward"));
  }
  if (bf16_cuda_ != nullptr) {
    TESSERA_RETURN_IF_ERROR(CheckNotNull(name_, "dy", dy));
#if TESSERA_HAVE_CUDA
    return dense_internal::LinearBackwardBf16Cuda(ctx_, y_.data<float>(), dy, batch_, in_, out_,
                                                  act_, weight_.grad.data<float>(),
                                                  bias_.grad.data<float>(), dx, bf16_cuda_.get());
#else
    return dense_internal::NoCudaTwin("LinearBackward(bf16)", "dense/linear_cuda.cu");
#endif
  }
  if (bf16_ != nullptr) {
    return dense_internal::LinearBackwardBf16Cpu(y_.data<float>(), dy, batch_, in_, out_, act_,
                                                 weight_.grad.data<float>(),
                                                 bias_.grad.data<float>(), dx, dx16, bf16_.get());
  }
  return LinearBackward(ctx_, x_, weight_.value.data<float>(), y_.data<float>(), dy, batch_, in_,
                        out_, act_, weight_.grad.data<float>(), bias_.grad.data<float>(), dx);
}

Mlp::Mlp(std::string name, int64_t in, const std::vector<int64_t>& sizes, bool relu_last,
         const DeviceContext& ctx, DenseDtype dtype) {
  TESSERA_CHECK_OK(Build(name, in, sizes, relu_last, ctx, dtype)) << name;
}

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(std::string name, int64_t in,
                                                 const std::vector<int64_t>& sizes,
                                                 bool relu_last, const DeviceContext& ctx,
                                                 DenseDtype dtype) {
  std::unique_ptr<Mlp> m(new Mlp());
  TESSERA_RETURN_IF_ERROR(m->Build(name, in, sizes, relu_last, ctx, dtype));
  return m;
}

absl::Status Mlp::Build(const std::string& name, int64_t in, const std::vector<int64_t>& sizes,
                        bool relu_last, const DeviceContext& ctx, DenseDtype dtype) {
  if (sizes.empty())
    return absl::InvalidArgumentError(absl::StrCat(name, ": an MLP needs at least one layer"));
  int64_t prev = in;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool last = i + 1 == sizes.size();
    const Activation act = (last && !relu_last) ? Activation::kNone : Activation::kRelu;
    TESSERA_ASSIGN_OR_RETURN(auto layer,
                             Linear::Create(absl::StrCat(name, ".", i), prev, sizes[i], act, ctx,
                                             dtype));
    layers_.push_back(std::move(layer));
    prev = sizes[i];
  }
  grads_.resize(sizes.size() - 1);
  return absl::OkStatus();
}

void Mlp::Init(uint64_t seed) {
  for (auto& layer : layers_) layer->Init(seed);
}

absl::Status Mlp::Forward(const float* x, int64_t batch, const float** y) {
  const Device device = layers_[0]->weight().value.device();
  // Grow the gradient buffers here, so Backward never allocates.
  for (size_t i = 0; i < grads_.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(
        dense_internal::EnsureFloats(device, batch, layers_[i]->out(), &grads_[i]));
  }
  // Between two bf16 layers the activation stays bf16 (written by the first one's matmul).
  const float* h = x;
  const uint16_t* h16 = nullptr;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Linear& layer = *layers_[i];
    layer.set_bf16_output(layer.dtype() == DenseDtype::kBf16 && i + 1 < layers_.size() &&
                          layers_[i + 1]->dtype() == DenseDtype::kBf16);
    if (h16 != nullptr) {
      TESSERA_RETURN_IF_ERROR(layer.ForwardBf16Input(h16, batch, &h));
    } else {
      TESSERA_RETURN_IF_ERROR(layer.Forward(h, batch, &h));
    }
    h16 = layer.bf16_output();
  }
  *y = h;
  return absl::OkStatus();
}

absl::Status Mlp::Backward(float* dy, float* dx) {
  const int n = static_cast<int>(layers_.size());
  for (int i = n - 1; i >= 0; --i) {
    // Between two bf16 layers the gradient is bf16 (the layer above wrote it; see Forward).
    const bool dy16 = i + 1 < n && layers_[i]->bf16_output() != nullptr;
    uint16_t* dx16 = i > 0 ? layers_[i - 1]->bf16_grad_input() : nullptr;
    float* layer_dy = i + 1 == n ? dy : dy16 ? nullptr : grads_[i].data<float>();
    float* layer_dx = i == 0 ? dx : dx16 != nullptr ? nullptr : grads_[i - 1].data<float>();
    TESSERA_RETURN_IF_ERROR(layers_[i]->BackwardBf16(layer_dy, layer_dx, dx16));
    if (ready_) {
      TESSERA_RETURN_IF_ERROR(ready_(layers_[i]->weight()));
      TESSERA_RETURN_IF_ERROR(ready_(layers_[i]->bias()));
    }
  }
  return absl::OkStatus();
}

int64_t Mlp::in_dim() const { return layers_.front()->in(); }
int64_t Mlp::out_dim() const { return layers_.back()->out(); }

std::vector<Parameter*> Mlp::parameters() {
  std::vector<Parameter*> out;
  for (auto& layer : layers_) {
    out.push_back(&layer->weight());
    out.push_back(&layer->bias());
  }
  return out;
}

}  // namespace tessera
