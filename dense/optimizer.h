// Dense optimizers (data-parallel parameters): SGD, AdaGrad, Adam, PyTorch's formulas:
//   SGD      w -= lr (g + wd w)
//   AdaGrad  s += g^2; w -= lr g / (sqrt(s) + eps)
//   Adam     m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
// with t the 1-based step and, when weight_decay > 0, g replaced by g + wd w for all three (L2, as
// torch.optim; not AdamW). The rules live in dense/internal/optimizer_rules.h, shared by the CPU
// and CUDA twins; each element is updated independently (same bits for any thread count).
// State tensors are exposed for checkpoints, named as PyTorch's state_dict keys:
// "<param>.sum" (AdaGrad), "<param>.exp_avg" and "<param>.exp_avg_sq" (Adam); their grad buffers
// are empty. The optimizer keeps pointers to the parameters, which must outlive it.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/enum_names.h"
#include "dense/parameter.h"

namespace tessera {

enum class DenseOptimizerType { kSgd, kAdagrad, kAdam };
inline constexpr EnumName<DenseOptimizerType> kDenseOptimizerTypeNames[] = {
    {DenseOptimizerType::kSgd, "sgd"},
    {DenseOptimizerType::kAdagrad, "adagrad"},
    {DenseOptimizerType::kAdam, "adam"}};
// "sgd" / "adagrad" / "adam" (optimizer.dense.type); Parse: InvalidArgument naming the value.
inline const char* DenseOptimizerTypeName(DenseOptimizerType t) {
  return NameIn(kDenseOptimizerTypeNames, t);
}
inline absl::StatusOr<DenseOptimizerType> ParseDenseOptimizerType(const std::string& name) {
  return ParseIn(kDenseOptimizerTypeNames, name, "dense optimizer type");
}

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
  // One step over all parameters with learning rate `lr`, reading each parameter's grad; the step
  // counter advances by one. InvalidArgument (and no update) for a negative or non-finite lr.
  virtual absl::Status Step(float lr) = 0;
  // Optimizer state tensors (empty for SGD), named "<param name>.<state name>".
  virtual std::vector<Parameter*> state() = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
};

// InvalidArgument naming the field for bad options (eps <= 0, betas outside [0, 1), negative
// weight_decay or adagrad_initial) or the parameter for a null, duplicated or malformed one
// (value and grad must be f32 of equal size on ctx.device).
absl::StatusOr<std::unique_ptr<DenseOptimizer>> CreateDenseOptimizer(
    const DenseOptimizerOptions& options, std::vector<Parameter*> params,
    const DeviceContext& ctx);

}  // namespace tessera
