// CrossNetwork: parameters and activation buffers around the cross-layer kernels, and the
// dispatch between their CPU and CUDA twins.
#include "dense/cross_network.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "dense/internal/common.h"
#include "dense/internal/kernels.h"

namespace tessera {

using dense_internal::CrossLayerGrads;
using dense_internal::CrossLayerParams;

namespace {

constexpr char kCudaFile[] = "dense/cross_network_cuda.cu";

absl::Status CrossLayerForward(const DeviceContext& ctx, const CrossLayerParams& p,
                               const float* x0, const float* xl, int64_t batch, float* inner,
                               float* low, float* x_next) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::CrossLayerForwardCuda(ctx, p, x0, xl, batch, inner, low, x_next);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin("CrossLayerForward", kCudaFile);
#endif
  return dense_internal::CrossLayerForwardCpu(ctx, p, x0, xl, batch, inner, low, x_next);
}

absl::Status CrossLayerBackward(const DeviceContext& ctx, const CrossLayerParams& p,
                                const float* x0, const float* xl, const float* inner,
                                const float* low, int64_t batch, float* g, bool assign_dx0,
                                float* dx0, float* d_inner, float* d_low,
                                const CrossLayerGrads& grads) {
#if TESSERA_HAVE_CUDA
  if (ctx.is_cuda()) {
    return dense_internal::CrossLayerBackwardCuda(ctx, p, x0, xl, inner, low, batch, g, assign_dx0,
                                                  dx0, d_inner, d_low, grads);
  }
#else
  if (ctx.is_cuda()) return dense_internal::NoCudaTwin("CrossLayerBackward", kCudaFile);
#endif
  return dense_internal::CrossLayerBackwardCpu(ctx, p, x0, xl, inner, low, batch, g, assign_dx0,
                                               dx0, d_inner, d_low, grads);
}

}  // namespace

absl::Status CrossNetwork::Validate(const CrossNetworkOptions& options) {
  if (options.in_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossNetworkOptions.in_dim = ", options.in_dim, " must be >= 1"));
  }
  if (options.num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossNetworkOptions.num_layers = ", options.num_layers, " must be >= 1"));
  }
  if (options.low_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CrossNetworkOptions.low_rank = ",
                                                   options.low_rank, " must be >= 0"));
  }
  return absl::OkStatus();
}

CrossNetwork::CrossNetwork(std::string name, const CrossNetworkOptions& options,
                           const DeviceContext& ctx)
    : CrossNetwork(Unallocated{}, std::move(name), options, ctx) {
  TESSERA_CHECK_OK(Build()) << name_;
}

absl::StatusOr<std::unique_ptr<CrossNetwork>> CrossNetwork::Create(
    std::string name, const CrossNetworkOptions& options, const DeviceContext& ctx) {
  std::unique_ptr<CrossNetwork> net(new CrossNetwork(Unallocated{}, std::move(name), options, ctx));
  TESSERA_RETURN_IF_ERROR(net->Build());
  return net;
}

absl::Status CrossNetwork::Build() {
  TESSERA_RETURN_IF_ERROR(Validate(options_));
  const int64_t d = options_.in_dim, r = options_.low_rank;
  auto add = [&](std::string name, std::vector<int64_t> shape) -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(Parameter p, MakeParameter(std::move(name), std::move(shape),
                                                        ctx_.device));
    params_.push_back(std::move(p));
    return absl::OkStatus();
  };
  for (int l = 0; l < options_.num_layers; ++l) {
    const std::string prefix = absl::StrCat(name_, ".", l, ".");
    if (r == 0) {
      TESSERA_RETURN_IF_ERROR(add(prefix + "weight", {d, d}));
    } else {
      TESSERA_RETURN_IF_ERROR(add(prefix + "V.weight", {r, d}));
      TESSERA_RETURN_IF_ERROR(add(prefix + "U.weight", {d, r}));
    }
    TESSERA_RETURN_IF_ERROR(add(prefix + "bias", {d}));
  }
  xs_.resize(options_.num_layers + 1);
  inner_.resize(options_.num_layers);
  low_.resize(options_.num_layers);
  return absl::OkStatus();
}

void CrossNetwork::Init(uint64_t seed) {
  const float d = static_cast<float>(options_.in_dim);
  const float r = static_cast<float>(options_.low_rank);
  const float std_full = std::sqrt(2.0f / (d + d));
  const float std_low = std::sqrt(2.0f / (d + r));  // V [r, d] and U [d, r] alike
  for (Parameter& p : params_) {
    const bool is_bias = p.value.shape().size() == 1;
    dense_internal::InitNormal(seed, is_bias ? 0.0f : (r == 0 ? std_full : std_low), &p);
  }
}

std::vector<Parameter*> CrossNetwork::parameters() {
  std::vector<Parameter*> out;
  for (Parameter& p : params_) out.push_back(&p);
  return out;
}

absl::Status CrossNetwork::Forward(const float* x0, int64_t batch, const float** y) {
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(name_, "x0", x0));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(name_, "y (output pointer)", y));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckSize(name_, "batch", batch));
  const int64_t d = options_.in_dim, r = options_.low_rank;
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckSize(name_, "batch * in_dim", batch * d));
  const Device dev = ctx_.device;
  const int layers = options_.num_layers;
  for (int l = 0; l < layers; ++l) {
    TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, d, &xs_[l + 1]));
    TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, d, &inner_[l]));
    if (r > 0) TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, r, &low_[l]));
  }
  TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, d, &scratch_));
  if (r > 0) TESSERA_RETURN_IF_ERROR(dense_internal::EnsureFloats(dev, batch, r, &d_low_));

  const int per_layer = r == 0 ? 2 : 3;
  for (int l = 0; l < layers; ++l) {
    CrossLayerParams p;
    p.dim = d;
    p.rank = r;
    Parameter* lp = &params_[l * per_layer];
    if (r == 0) {
      p.w = lp[0].value.data<float>();
    } else {
      p.v = lp[0].value.data<float>();
      p.u = lp[1].value.data<float>();
    }
    p.b = lp[per_layer - 1].value.data<float>();
    const float* xl = l == 0 ? x0 : xs_[l].data<float>();
    TESSERA_RETURN_IF_ERROR(CrossLayerForward(ctx_, p, x0, xl, batch, inner_[l].data<float>(),
                                              r > 0 ? low_[l].data<float>() : nullptr,
                                              xs_[l + 1].data<float>()));
  }
  x0_ = x0;
  batch_ = batch;
  *y = xs_[layers].data<float>();
  return absl::OkStatus();
}

absl::Status CrossNetwork::Backward(float* dy, float* dx0) {
  if (x0_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": Backward before Forward"));
  }
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(name_, "dy", dy));
  TESSERA_RETURN_IF_ERROR(dense_internal::CheckNotNull(name_, "dx0", dx0));
  const int64_t d = options_.in_dim, r = options_.low_rank;
  const int layers = options_.num_layers;
  const int per_layer = r == 0 ? 2 : 3;
  float* g = dy;  // dL/dx_{l+1}, updated in place to dL/dx_l by each layer
  for (int l = layers - 1; l >= 0; --l) {
    CrossLayerParams p;
    CrossLayerGrads grads;
    p.dim = d;
    p.rank = r;
    Parameter* lp = &params_[l * per_layer];
    if (r == 0) {
      p.w = lp[0].value.data<float>();
      grads.dw = lp[0].grad.data<float>();
    } else {
      p.v = lp[0].value.data<float>();
      p.u = lp[1].value.data<float>();
      grads.dv = lp[0].grad.data<float>();
      grads.du = lp[1].grad.data<float>();
    }
    p.b = lp[per_layer - 1].value.data<float>();
    grads.db = lp[per_layer - 1].grad.data<float>();
    const float* xl = l == 0 ? x0_ : xs_[l].data<float>();
    TESSERA_RETURN_IF_ERROR(CrossLayerBackward(
        ctx_, p, x0_, xl, inner_[l].data<float>(), r > 0 ? low_[l].data<float>() : nullptr,
        batch_, g, /*assign_dx0=*/l == layers - 1, dx0, scratch_.data<float>(),
        r > 0 ? d_low_.data<float>() : nullptr, grads));
    if (ready_) {
      for (int k = 0; k < per_layer; ++k) TESSERA_RETURN_IF_ERROR(ready_(lp[k]));
    }
  }
  // x_0 is also the first layer's x_l: add that path.
  return dense_internal::AddInPlace(ctx_, g, batch_ * d, dx0);
}

}  // namespace tessera
