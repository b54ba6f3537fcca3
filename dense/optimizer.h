// Dense optimizers (data-parallel parameters): SGD, AdaGrad, Adam, PyTorch's formulas:
//   SGD      w -= lr (g + wd w)
//   AdaGrad  s += g^2; w -= lr g / (sqrt(s) + eps)
//   Adam     m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
// State tensors are exposed (named "<param>.<state>") for checkpoints. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "dense/parameter.h"

namespace tessera {

enum class DenseOptimizerType { kSgd, kAdagrad, kAdam };

struct DenseOptimizerOptions {
  DenseOptimizerType type = DenseOptimizerType::kSgd;
  float eps = 1e-8f;                 // Default: 1e-8 (Adam), AdaGrad uses 1e-10 in PyTorch
  float beta1 = 0.9f;                // Default: 0.9
  float beta2 = 0.999f;              // Default: 0.999
  float weight_decay = 0.0f;         // Default: 0
  float adagrad_initial = 0.0f;      // Default: 0
};

class DenseOptimizer {
 public:
  virtual ~DenseOptimizer() = default;
  // One step over all parameters with learning rate `lr`; the step counter advances by one.
  virtual absl::Status Step(float lr) = 0;
  // Optimizer state tensors (empty for SGD), named "<param name>.<state name>".
  virtual std::vector<Parameter*> state() = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
};

absl::StatusOr<std::unique_ptr<DenseOptimizer>> CreateDenseOptimizer(
    const DenseOptimizerOptions& options, std::vector<Parameter*> params,
    const DeviceContext& ctx);

}  // namespace tessera
