// Linear layers and MLP towers. Linear is y = act(x W^T + b) with W [out, in] (PyTorch layout),
// computed by one sgemm (OpenBLAS or cuBLAS) with bias and activation fused into one pass over y.
// Backward: dW = dz^T x, db = sum_b dz, dx = dz W, with dz = dy masked by the ReLU.
// Layers own parameters and their activation buffers (grown to the largest batch seen); inputs
// passed to Forward must stay alive until Backward. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/buffer.h"
#include "core/device.h"
#include "dense/parameter.h"

namespace tessera {

enum class Activation { kNone, kRelu };

class Linear {
 public:
  // `name` prefixes the parameter names: "<name>.weight", "<name>.bias".
  Linear(std::string name, int64_t in, int64_t out, Activation act, const DeviceContext& ctx);
  // Initialises as facebookresearch/dlrm: W ~ N(0, sqrt(2 / (in + out))), b ~ N(0, sqrt(1 / out)),
  // drawn from CounterRng(seed, hash of name).
  void Init(uint64_t seed);

  // y[batch, out] = act(x[batch, in] W^T + b). Returns y (owned by the layer).
  absl::Status Forward(const float* x, int64_t batch, const float** y);
  // From dy[batch, out] (overwritten with dz), writes weight/bias grads and, when dx is non-null,
  // dx[batch, in]. Uses the x and y of the last Forward.
  absl::Status Backward(float* dy, float* dx);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  DeviceContext ctx_;
  int64_t in_, out_;
  Activation act_;
  Parameter weight_, bias_;
  const float* x_ = nullptr;
  int64_t batch_ = 0;
  Buffer y_;
};

// A stack of Linear layers named "<name>.<i>" (i = 0, 1, ...). ReLU after every layer, except the
// last when `relu_last` is false (DLRM's top MLP ends in the raw logit).
class Mlp {
 public:
  Mlp(std::string name, int64_t in, const std::vector<int64_t>& sizes, bool relu_last,
      const DeviceContext& ctx);
  void Init(uint64_t seed);
  // Returns the last layer's output [batch, out_dim()] (owned by the MLP).
  absl::Status Forward(const float* x, int64_t batch, const float** y);
  // dy [batch, out_dim()] is overwritten; dx [batch, in] written when non-null.
  absl::Status Backward(float* dy, float* dx);
  int64_t in_dim() const;
  int64_t out_dim() const;
  std::vector<Parameter*> parameters();

 private:
  std::vector<std::unique_ptr<Linear>> layers_;
  std::vector<Buffer> grads_;  // dy of each hidden layer
};

}  // namespace tessera
