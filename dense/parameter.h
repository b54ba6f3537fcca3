// Parameter: one dense tensor the optimizer updates, with its gradient. Names and shapes follow
// PyTorch's state_dict (e.g. "bottom_mlp.0.weight" [out, in]) so exports load into PyTorch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

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

// Allocates value and grad (zeroed) on `device` for `shape`. A failure is a bug (small sizes).
Parameter MakeParameter(std::string name, std::vector<int64_t> shape, Device device);

}  // namespace tessera
