// Bulk conversions of row_dtype.h (stores, checkpoints, export): plain loops over the scalar
// conversions, so they give exactly the kernels' bits. Not on the training step's hot path.
#include "embedding/row_dtype.h"

#include <cstring>

namespace tessera {

void RowValuesToFloat(RowDtype dtype, const void* src, int64_t n, float* dst) {
  if (n <= 0) return;
  if (dtype == RowDtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(src);
  if (dtype == RowDtype::kBf16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = row_dtype::Bf16ToFloat(h[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = row_dtype::HalfToFloat(h[i]);
  }
}

void RowValuesFromFloat(RowDtype dtype, const float* src, int64_t n, void* dst) {
  if (n <= 0) return;
  if (dtype == RowDtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (dtype == RowDtype::kBf16) {
    for (int64_t i = 0; i < n; ++i) h[i] = row_dtype::FloatToBf16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = row_dtype::FloatToHalf(src[i]);
  }
}

}  // namespace tessera
