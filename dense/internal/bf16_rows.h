// bf16 rows for the dense side: the bf16 embedding hand-off (DenseArch::ForwardBf16), where a
// kernel widens the rows it is about to read and rounds the rows it has just written, a sample
// (or a row) at a time while they are in L1, instead of a separate pass over the whole buffer.
// The scalars are core/bf16.h's (the tables' bf16 outputs round with the same function).
// Private to dense/. Thread-compatible: pure functions.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace tessera::dense_internal {

// dst[i] = Bf16ToFloat(src[i]) for i < n. Branch-free loops the caller's vector clone
// vectorises (always inlined into it).
__attribute__((always_inline)) inline void WidenBf16Row(const uint16_t* __restrict src,
                                                        int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ::tessera::Bf16ToFloat(src[i]);
}

// dst[i] = FloatToBf16(src[i]) for i < n.
__attribute__((always_inline)) inline void RoundBf16Row(const float* __restrict src, int64_t n,
                                                        uint16_t* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ::tessera::FloatToBf16(src[i]);
}

}  // namespace tessera::dense_internal
