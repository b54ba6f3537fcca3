// DCNv2 cross network, as the MLPerf DLRM-DCNv2 reference (TorchRec's CrossNet / LowRankCrossNet):
//   full:     x_{l+1} = x_0 * (W_l x_l + b_l) + x_l            W_l [in, in]
//   low rank: x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l      V_l [r, in], U_l [in, r]
// (* elementwise). Parameter names ("cross" is the network's name): full "cross.<l>.weight"
// [in, in], "cross.<l>.bias" [in]; low rank "cross.<l>.V.weight" [r, in], "cross.<l>.U.weight"
// [in, r], "cross.<l>.bias" [in].
// Backward, with g = dL/dx_{l+1}: d_inner = g * x0, db_l = sum_b d_inner, dW_l = d_inner^T x_l
// (low rank: dU_l = d_inner^T (V x_l), d_low = d_inner U_l, dV_l = d_low^T x_l), and
// dL/dx_l = g + d_inner W_l (or + d_low V_l); dx0 collects g * (W_l x_l + b_l) from every layer
// plus dL/dx_0.
// Not thread-safe; buffers grow to the largest batch seen; x0 must stay alive until Backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/buffer.h"
#include "core/device.h"
#include "dense/parameter.h"

namespace tessera {

struct CrossNetworkOptions {
  int64_t in_dim = 0;
  int num_layers = 3;
  // 0 for full-rank layers; otherwise the rank r of the low-rank factorisation. Default: 0.
  int64_t low_rank = 0;
};

class CrossNetwork {
 public:
  // InvalidArgument naming the field unless in_dim >= 1, num_layers >= 1, 0 <= low_rank.
  static absl::Status Validate(const CrossNetworkOptions& options);
  // Validate's errors, or ResourceExhausted naming the parameter and bytes when the parameters
  // cannot be allocated (sizes from input go through here).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CrossNetwork>> Create(
      std::string name, const CrossNetworkOptions& options, const DeviceContext& ctx);
  // As Create, for fixed small sizes (tests): a failure is a bug and aborts.
  CrossNetwork(std::string name, const CrossNetworkOptions& options, const DeviceContext& ctx);
  // Weights ~ N(0, sqrt(2 / (fan_in + fan_out))) (Xavier normal, TorchRec's default), bias zero.
  void Init(uint64_t seed);
  // x0 [batch, in_dim] -> y [batch, in_dim] (owned by the network, valid until the next Forward).
  // Errors: InvalidArgument (null pointers, batch < 1), ResourceExhausted when buffers cannot
  // grow, Unimplemented on kCuda for now.
  absl::Status Forward(const float* x0, int64_t batch, const float** y);
  // dy [batch, in_dim] (overwritten) -> dx0 [batch, in_dim]; writes parameter grads. Uses the x0
  // of the last Forward (FailedPrecondition without one).
  absl::Status Backward(float* dy, float* dx0);
  // Per layer: full "weight", "bias"; low rank "V.weight", "U.weight", "bias".
  std::vector<Parameter*> parameters();
  int64_t dim() const { return options_.in_dim; }
  // Optional: Backward calls `ready` with each layer's parameters (in parameters() order) as
  // soon as that layer's grads are written (last layer first). Empty (default): no calls.
  void set_grad_ready_callback(GradReadyCallback ready) { ready_ = std::move(ready); }

 private:
  struct Unallocated {};
  CrossNetwork(Unallocated, std::string name, const CrossNetworkOptions& options,
               const DeviceContext& ctx)
      : name_(std::move(name)), options_(options), ctx_(ctx) {}
  absl::Status Build();

  GradReadyCallback ready_;
  std::string name_;
  CrossNetworkOptions options_;
  DeviceContext ctx_;
  std::vector<Parameter> params_;
  const float* x0_ = nullptr;
  int64_t batch_ = 0;
  std::vector<Buffer> xs_;     // x_1 .. x_L activations (xs_[0] unused: x_0 is the caller's)
  std::vector<Buffer> inner_;  // per layer: W x_l + b (or U V x_l + b)
  std::vector<Buffer> low_;    // per layer, low rank only: V x_l [batch, r]
  Buffer scratch_;             // d_inner [batch, in_dim] during Backward
  Buffer d_low_;               // low rank: d_low [batch, r]
};

}  // namespace tessera
