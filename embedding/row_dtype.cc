// Bulk conversions of row_dtype.h (stores, checkpoints, export, and the bf16 outputs of
// EmbeddingCollection, which are on the step): loops over the scalar conversions, so they give
// exactly the kernels' bits; bf16 runs 16 values at a time on AVX-512 (avx512_rows.h's Load16 /
// Store16, the same formulas; a block with NaN or Inf takes the scalar code).
#include "embedding/row_dtype.h"

#include <cstring>

#include "embedding/internal/avx512_rows.h"

namespace tessera {
namespace {

namespace ei = embedding_internal;

#if TESSERA_HAVE_AVX512_PATH
TESSERA_AVX512 int64_t Bf16ToFloatAvx512(const uint16_t* h, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, ei::Load16<RowDtype::kBf16>(h + i));
  return i;
}
TESSERA_AVX512 int64_t FloatToBf16Avx512(const float* src, int64_t n, uint16_t* h) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    ei::StoreRounded16<RowDtype::kBf16>(RowRounding::kNearest, 0, _mm512_loadu_ps(src + i),
                                        h + i);
  }
  return i;
}
#endif

// The values done by the vector path (a multiple of 16), 0 without it.
int64_t Bf16ToFloatFast(const uint16_t* h, int64_t n, float* dst) {
#if TESSERA_HAVE_AVX512_PATH
  if (ei::HaveAvx512()) return Bf16ToFloatAvx512(h, n, dst);
#endif
  return 0;
}
int64_t FloatToBf16Fast(const float* src, int64_t n, uint16_t* h) {
#if TESSERA_HAVE_AVX512_PATH
  if (ei::HaveAvx512()) return FloatToBf16Avx512(src, n, h);
#endif
  return 0;
}

}  // namespace

void RowValuesToFloat(RowDtype dtype, const void* src, int64_t n, float* dst) {
  if (n <= 0) return;
  if (dtype == RowDtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(src);
  if (dtype == RowDtype::kBf16) {
    for (int64_t i = Bf16ToFloatFast(h, n, dst); i < n; ++i) dst[i] = row_dtype::Bf16ToFloat(h[i]);
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
    for (int64_t i = FloatToBf16Fast(src, n, h); i < n; ++i) h[i] = row_dtype::FloatToBf16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = row_dtype::FloatToHalf(src[i]);
  }
}

}  // namespace tessera
