// Helpers shared by the dense layers: buffer growth, argument checks, the "no CUDA twin yet"
// error and parameter initialisation. Private to dense/.
#pragma once

#include <cstdint>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "core/buffer.h"
#include "core/device.h"
#include "dense/parameter.h"

namespace tessera::dense_internal {

// Makes `buffer` an f32 buffer on `device` holding at least rows * cols floats, reallocating
// (zero-filled) only when it is too small, so layers allocate only when the batch grows.
// Returns the allocation's error (ResourceExhausted, or Unimplemented for CUDA in a CPU build).
absl::Status EnsureFloats(Device device, int64_t rows, int64_t cols, Buffer* buffer);

// NoCudaPath(op) (core/cuda_runtime.h): what the dispatching entry points return for a kCuda
// context in a build without the CUDA path (`cuda_file`, the twin, is left out of such builds).
[[nodiscard]] absl::Status NoCudaTwin(absl::string_view op, absl::string_view cuda_file);

// Unimplemented naming `op`: bf16 embeddings (the bf16 hand-off of DenseArch) have no CUDA
// twin; the trainer uses them on the CPU only.
[[nodiscard]] absl::Status NoBf16CudaTwin(absl::string_view op);

// InvalidArgument naming `op` and `what` when ptr is null.
absl::Status CheckNotNull(absl::string_view op, absl::string_view what, const void* ptr);
// InvalidArgument unless 0 < value <= INT32_MAX (BLAS takes 32-bit sizes).
absl::Status CheckSize(absl::string_view op, absl::string_view what, int64_t value);

// A stable 64-bit hash (FNV-1a) of `name`: the RNG stream of a parameter's initial values.
uint64_t NameHash(absl::string_view name);

// Fills `param.value` with N(0, stddev) from CounterRng(seed, NameHash(param.name)), value i of
// the tensor (row-major) taking draws in order; stddev 0 fills zeros. Works for host and device
// parameters (device ones are filled on the host and copied). Resets the gradient to zero.
void InitNormal(uint64_t seed, float stddev, Parameter* param);

}  // namespace tessera::dense_internal
