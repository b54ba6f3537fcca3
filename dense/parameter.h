// Parameter: one dense tensor the optimizer updates, with its gradient. Names and shapes follow
// PyTorch's state_dict (e.g. "bottom_mlp.0.weight" [out, in]) so exports load into PyTorch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/buffer.h"

namespace tessera {

struct Parameter {
  std::string name;
  Buffer value;  // f32, shape as PyTorch
  Buffer grad;   // f32, same shape; written by the layer's Backward (overwritten, not summed)
};

// Called by a Backward as soon as a parameter's grad is final for the step, before the rest of
// the backward runs (data-parallel training starts the gradient's all-reduce here). An error
// stops the Backward, which returns it.
using GradReadyCallback = std::function<absl::Status(Parameter&)>;

// Allocates value and grad (zeroed) on `device` for `shape`. InvalidArgument naming the
// parameter for a negative dim or a byte size that overflows; ResourceExhausted naming the
// parameter and the bytes when memory is short. Never aborts: shapes come from configs.
[[nodiscard]] absl::StatusOr<Parameter> MakeParameter(std::string name, std::vector<int64_t> shape,
                                                      Device device);

}  // namespace tessera
