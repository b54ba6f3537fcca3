// Linear layers and MLP towers. Linear is y = act(x W^T + b) with W [out, in] (PyTorch layout),
// computed by one GEMM (oneDNN or OpenBLAS on the CPU, cuBLAS on CUDA) with bias and activation
// fused into one pass over y.
// Backward: dW = dz^T x, db = sum_b dz, dx = dz W, with dz = dy masked by the ReLU.
// Layers own parameters and their activation buffers (grown to the largest batch seen); inputs
// passed to Forward must stay alive until Backward. Not thread-safe.
// DenseDtype::kBf16 (CPU: needs oneDNN; CUDA: cuBLAS): the three products take bf16 inputs (x, W
// and dz rounded to nearest even) with fp32 accumulation; parameters, grads and
// everything elementwise stay fp32 (fp32 master weights). Layers with fewer than 8 outputs stay
// fp32. The CUDA twin matches the CPU one up to the fp32 accumulation order
// (tests/cuda/linear_bf16_cuda_test.cc).
// In an Mlp on the CPU the activation between two bf16 layers is kept only in bf16 (the next
// layer's rounded input: the same bits as rounding an fp32 activation), rounded in the bias +
// ReLU pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/enum_names.h"
#include "dense/parameter.h"

namespace tessera {

enum class Activation { kNone, kRelu };
// The GEMM input precision of Linear layers (model.dense_dtype).
enum class DenseDtype { kFp32, kBf16 };
inline constexpr EnumName<DenseDtype> kDenseDtypeNames[] = {{DenseDtype::kFp32, "fp32"},
                                                            {DenseDtype::kBf16, "bf16"}};
// "fp32" / "bf16"; Parse: InvalidArgument naming the value otherwise.
inline const char* DenseDtypeName(DenseDtype d) { return NameIn(kDenseDtypeNames, d); }
inline absl::StatusOr<DenseDtype> ParseDenseDtype(const std::string& name) {
  return ParseIn(kDenseDtypeNames, name, "dense dtype");
}

namespace dense_internal {
struct Bf16Operands;
struct Bf16OperandsCuda;
}  // namespace dense_internal

// The Linear kernels on plain views (memory of ctx.device), for callers that own their buffers.
// y[batch, out] = act(x[batch, in] w[out, in]^T + b[out]).
// Returns InvalidArgument for null pointers or sizes outside [1, 2^31); on kCuda the CUDA twin
// (dense/linear_cuda.cu) runs, or Unimplemented (NoCudaPath) in a build without CUDA.
absl::Status LinearForward(const DeviceContext& ctx, const float* x, const float* w,
                           const float* b, int64_t batch, int64_t in, int64_t out, Activation act,
                           float* y);
// Backward of LinearForward given its x, w and output y: dy[batch, out] is overwritten with
// dz = dy * act'(y); writes dw[out, in] = dz^T x, db[out] = sum over the batch of dz and, when dx
// is non-null, dx[batch, in] = dz w. Same errors as LinearForward.
absl::Status LinearBackward(const DeviceContext& ctx, const float* x, const float* w,
                            const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                            Activation act, float* dw, float* db, float* dx);

class Linear {
 public:
  // `name` prefixes the parameter names: "<name>.weight", "<name>.bias". For sizes from input:
  // InvalidArgument unless in, out >= 1; ResourceExhausted (MakeParameter) when the parameters
  // cannot be allocated.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Linear>> Create(std::string name, int64_t in,
                                                                      int64_t out, Activation act,
                                                                      const DeviceContext& ctx,
                                                                      DenseDtype dtype =
                                                                          DenseDtype::kFp32);
  // As Create, for fixed small sizes (tests): a failure is a bug and aborts.
  Linear(std::string name, int64_t in, int64_t out, Activation act, const DeviceContext& ctx,
         DenseDtype dtype = DenseDtype::kFp32);
  ~Linear();
  // Initialises as facebookresearch/dlrm: W ~ N(0, sqrt(2 / (in + out))), b ~ N(0, sqrt(1 / out)),
  // each tensor drawn from CounterRng(seed, FNV-1a hash of the parameter's name), so the values
  // depend only on (seed, name). Zeroes the grads.
  void Init(uint64_t seed);

  // y[batch, out] = act(x[batch, in] W^T + b). Sets *y to the layer's output buffer, valid until
  // the next Forward. Errors: InvalidArgument (null x or y, batch < 1), ResourceExhausted when the
  // output cannot grow, Unimplemented on kCuda in a build without CUDA.
  absl::Status Forward(const float* x, int64_t batch, const float** y);
  // From dy[batch, out] (overwritten with dz), writes weight/bias grads and, when dx is non-null,
  // dx[batch, in]. Uses the x and y of the last Forward (FailedPrecondition without one).
  absl::Status Backward(float* dy, float* dx);

  // For Mlp: bf16 layers whose output only feeds another bf16 layer. With bf16 output on, Forward
  // leaves *y null and the output is bf16_output() (bf16 [batch, out], valid until the next
  // Forward); ForwardBf16Input takes such an output as its input x16. REQUIRES: dtype() kBf16.
  void set_bf16_output(bool on);
  const uint16_t* bf16_output() const;
  // With bf16 output on: where the next bf16 layer's BackwardBf16 writes this layer's output
  // gradient as bf16 ([batch, out] of the last Forward); null otherwise.
  uint16_t* bf16_grad_input();
  // Backward for Mlp's bf16 stacks: dy null takes the gradient from bf16_grad_input() (written by
  // the next layer); dx16 non-null receives dx rounded to bf16 (the previous layer's
  // bf16_grad_input()) instead of dx. Without either it is Backward(dy, dx).
  absl::Status BackwardBf16(float* dy, float* dx, uint16_t* dx16);
  absl::Status ForwardBf16Input(const uint16_t* x16, int64_t batch, const float** y);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const std::string& name() const { return name_; }
  Activation activation() const { return act_; }
  DenseDtype dtype() const { return dtype_; }  // the one in use (kFp32 for out < 8)

 private:
  struct Unallocated {};
  // Sets the fields; AllocateParameters() then makes weight_ and bias_.
  Linear(Unallocated, std::string name, int64_t in, int64_t out, Activation act,
         const DeviceContext& ctx, DenseDtype dtype);
  absl::Status AllocateParameters();
  absl::Status ForwardImpl(const float* x, const uint16_t* x16, int64_t batch, const float** y);

  std::string name_;
  DeviceContext ctx_;
  int64_t in_, out_;
  Activation act_;
  DenseDtype dtype_;
  Parameter weight_, bias_;
  // kBf16: the last Forward's bf16 x and W, on the CPU (bf16_) or on CUDA (bf16_cuda_).
  std::unique_ptr<dense_internal::Bf16Operands> bf16_;
  std::unique_ptr<dense_internal::Bf16OperandsCuda> bf16_cuda_;
  const float* x_ = nullptr;
  int64_t batch_ = 0;
  Buffer y_;
};

// A stack of Linear layers named "<name>.<i>" (i = 0, 1, ...). ReLU after every layer, except the
// last when `relu_last` is false (DLRM's top MLP ends in the raw logit). REQUIRES: sizes is
// non-empty and every size >= 1 (DenseArch::Create validates configs before building).
class Mlp {
 public:
  // For sizes from input: InvalidArgument for empty sizes or a size < 1, ResourceExhausted naming
  // the parameter and bytes when a layer cannot be allocated.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Mlp>> Create(
      std::string name, int64_t in, const std::vector<int64_t>& sizes, bool relu_last,
      const DeviceContext& ctx, DenseDtype dtype = DenseDtype::kFp32);
  // As Create, for fixed small sizes (tests): a failure is a bug and aborts.
  Mlp(std::string name, int64_t in, const std::vector<int64_t>& sizes, bool relu_last,
      const DeviceContext& ctx, DenseDtype dtype = DenseDtype::kFp32);
  void Init(uint64_t seed);
  // Returns the last layer's output [batch, out_dim()] (owned by the MLP). Errors as Linear.
  absl::Status Forward(const float* x, int64_t batch, const float** y);
  // dy [batch, out_dim()] is overwritten; dx [batch, in] written when non-null.
  absl::Status Backward(float* dy, float* dx);
  int64_t in_dim() const;
  int64_t out_dim() const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Linear& layer(int i) { return *layers_[i]; }
  // Weights and biases, layer by layer: "<name>.0.weight", "<name>.0.bias", "<name>.1.weight", ...
  std::vector<Parameter*> parameters();
  // Optional: Backward calls `ready` with each layer's weight, then bias, as soon as that layer's
  // grads are written (last layer first). Empty (default): no calls.
  void set_grad_ready_callback(GradReadyCallback ready) { ready_ = std::move(ready); }

 private:
  Mlp() = default;
  absl::Status Build(const std::string& name, int64_t in, const std::vector<int64_t>& sizes,
                     bool relu_last, const DeviceContext& ctx, DenseDtype dtype);

  GradReadyCallback ready_;
  std::vector<std::unique_ptr<Linear>> layers_;
  std::vector<Buffer> grads_;  // grads_[i]: dy of layer i (the dx of layer i + 1), i < L - 1
};

}  // namespace tessera
