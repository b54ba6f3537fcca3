// Parameter: one dense tensor the optimizer updates, with its gradient. Names and shapes follow
// PyTorch's state_dict (e.g. "bottom_mlp.0.weight" [out, in]) so exports load into PyTorch.
#pragma once

#include <string>
#include <vector>

#include "core/buffer.h"

namespace tessera {

struct Parameter {
  std::string name;
  Buffer value;  // f32, shape as PyTorch
  Buffer grad;   // f32, same shape; written by the layer's Backward (overwritten, not summed)
};

// Allocates value and grad (zeroed) on `device` for `shape`. A failure is a bug (small sizes).
Parameter MakeParameter(std::string name, std::vector<int64_t> shape, Device device);

}  // namespace tessera
