// DCNv2 cross network, as the MLPerf DLRM-DCNv2 reference (TorchRec's CrossNet / LowRankCrossNet):
//   full:     x_{l+1} = x_0 * (W_l x_l + b_l) + x_l            W_l [in, in]
//   low rank: x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l      V_l [r, in], U_l [in, r]
// (* elementwise). Parameter names: full "cross.<l>.weight" [in, in], "cross.<l>.bias" [in];
// low rank "cross.<l>.V.weight" [r, in], "cross.<l>.U.weight" [in, r], "cross.<l>.bias" [in].
// Not thread-safe; buffers grow to the largest batch seen; x0 must stay alive until Backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  CrossNetwork(std::string name, const CrossNetworkOptions& options, const DeviceContext& ctx);
  // Weights ~ N(0, sqrt(2 / (fan_in + fan_out))) (Xavier normal, TorchRec's default), bias zero.
  void Init(uint64_t seed);
  // x0 [batch, in_dim] -> y [batch, in_dim] (owned by the network).
  absl::Status Forward(const float* x0, int64_t batch, const float** y);
  // dy [batch, in_dim] (may be overwritten) -> dx0 [batch, in_dim]; writes parameter grads.
  absl::Status Backward(float* dy, float* dx0);
  std::vector<Parameter*> parameters();
  int64_t dim() const { return options_.in_dim; }

 private:
  std::string name_;
  CrossNetworkOptions options_;
  DeviceContext ctx_;
  std::vector<Parameter> params_;
  const float* x0_ = nullptr;
  int64_t batch_ = 0;
  std::vector<Buffer> xs_;     // x_0 .. x_L activations
  std::vector<Buffer> inner_;  // per layer: W x_l + b (and V x_l for low rank)
  Buffer scratch_;
};

}  // namespace tessera
