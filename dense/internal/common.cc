#include "dense/internal/common.h"

#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/rng.h"
#include "core/status.h"

namespace tessera::dense_internal {

absl::Status EnsureFloats(Device device, int64_t rows, int64_t cols, Buffer* buffer) {
  const int64_t need = rows * cols;
  if (!buffer->empty() && buffer->device() == device && buffer->numel() >= need) {
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(*buffer, Buffer::Allocate(device, DType::kF32, {rows, cols}));
  return absl::OkStatus();
}

absl::Status NoCudaTwin(absl::string_view op, absl::string_view /*cuda_file*/) {
  return NoCudaPath(op);
}

absl::Status NoBf16CudaTwin(absl::string_view op) {
  return absl::UnimplementedError(absl::StrCat(
      op, ": bf16 embeddings on a CUDA device are not implemented (the bf16 hand-off of "
          "embedding_output_dtype bf16 is the CPU trainer's)"));
}

absl::Status CheckNotNull(absl::string_view op, absl::string_view what, const void* ptr) {
  if (ptr != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is null"));
}

absl::Status CheckSize(absl::string_view op, absl::string_view what, int64_t value) {
  if (value > 0 && value <= std::numeric_limits<int32_t>::max()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, " = ", value, " must be in [1, 2^31 - 1]"));
}

uint64_t NameHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

void InitNormal(uint64_t seed, float stddev, Parameter* param) {
  const int64_t n = param->value.numel();
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  if (stddev != 0.0f) {
    CounterRng rng(seed, NameHash(param->name));
    for (int64_t i = 0; i < n; ++i) host[i] = stddev * rng.NextNormal();
  }
  const std::vector<float> zeros(static_cast<size_t>(param->grad.numel()), 0.0f);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (param->value.device() == Device::kCpu) {
    std::memcpy(param->value.raw(), host.data(), bytes);
    std::memset(param->grad.raw(), 0, param->grad.bytes());
  } else {
    TESSERA_CHECK_OK(CudaMemcpy(param->value.raw(), host.data(), bytes)) << param->name;
    TESSERA_CHECK_OK(CudaMemcpy(param->grad.raw(), zeros.data(), param->grad.bytes()))
        << param->name;
  }
}

}  // namespace tessera::dense_internal
