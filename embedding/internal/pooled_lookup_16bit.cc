// The CPU kernels of 16-bit tables (fp16 / bf16 rows, embedding/row_dtype.h), called by
// pooled_lookup_cpu.cc's forward and update loops for weight_dtype kF16 / kBf16.
//
// Forward: the fp32 loop's shape (one thread per chunk of bags, each bag summed in index order,
// rows prefetched a few ids ahead), with each row widened to fp32 as it is gathered: F16C's
// vcvtph2ps for fp16, a zero-extend and 16-bit shift for bf16, 16 values per instruction. Half
// the bytes per row are gathered. With bf16 outputs (out_bf16) each pooled value is rounded to
// nearest even as it is stored (row_dtype::FloatToBf16's bits, NaN and Inf kept).
// Update: per unique row, the row is widened into an L1 buffer, ApplyRowUpdate (the fp32 rule,
// the same code as for fp32 tables) updates it and its fp32 state in place, and the row is
// rounded back: nearest even (vcvtps2ph / integer rounding for bf16) or stochastic (a hash of
// the value's bits and the step's key added below the kept bits, then truncated).
//
// Bits. The AVX-512 paths compute exactly what the portable loops compute (multiplies and adds
// are not fused in either; each lane uses the scalar formulas of row_dtype.h; a block of 16
// holding a value outside the vector path's range -- NaN, Inf, beyond fp16's 65504 -- runs the
// scalar code), so the result depends neither on the CPU nor on the thread count.
#include <cmath>
#include <cstdint>
#include <vector>

#include "embedding/internal/avx512_rows.h"
#include "embedding/internal/cpu_parallel.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_dtype.h"


namespace tessera::embedding_internal {
namespace {

namespace rd = row_dtype;

// ---------------------------------------------------------------------------------------------
// Portable loops (any CPU, any dim).

template <RowDtype kD>
inline float Widen(uint16_t h) {
  return kD == RowDtype::kF16 ? rd::HalfToFloat(h) : rd::Bf16ToFloat(h);
}

template <RowDtype kD>
inline uint16_t Narrow(RowRounding rounding, uint32_t key, float f) {
  return rd::FromFloat(kD, rounding, key, f);
}

template <RowDtype kD>
void PoolBagsScalar(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  const int64_t dim = a.dim;
  const int64_t row_bytes = dim * 2;
  const int64_t ahead = PrefetchRowsAhead(row_bytes);
  const uint16_t* weights = static_cast<const uint16_t*>(a.weights);
  const int64_t* idx = a.indices;
  const float* pw = a.per_id_weights;
  const int64_t j_last = a.offsets[b1];
  // bf16 outputs: each bag pools into `acc`, then is rounded into out_bf16.
  constexpr int64_t kStack = 256;
  float stack[kStack];
  std::vector<float> heap;
  float* acc = stack;
  if (a.out_bf16 != nullptr && dim > kStack) {
    heap.resize(dim);
    acc = heap.data();
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t jb = a.offsets[b], je = a.offsets[b + 1];
    float* out = a.out_bf16 != nullptr ? acc : a.out + b * a.out_stride;
    const float scale =
        (a.pooling == PoolingMode::kMean && je > jb) ? 1.0f / static_cast<float>(je - jb) : 1.0f;
    for (int64_t k = 0; k < dim; ++k) out[k] = 0.0f;
    for (int64_t j = jb; j < je; ++j) {
      if (j + ahead < j_last) PrefetchBytes(weights + idx[j + ahead] * dim, row_bytes, false);
      const uint16_t* row = weights + idx[j] * dim;
      const float s = pw != nullptr ? pw[j] : 1.0f;
      for (int64_t k = 0; k < dim; ++k) out[k] += s * Widen<kD>(row[k]);
    }
    for (int64_t k = 0; k < dim; ++k) out[k] *= scale;
    if (a.out_bf16 != nullptr) {
      uint16_t* out16 = a.out_bf16 + b * a.out_stride;
      for (int64_t k = 0; k < dim; ++k) out16[k] = rd::FloatToBf16(out[k]);
    }
  }
}

template <RowDtype kD>
void UpdateRowsScalar(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a,
                      int64_t u0, int64_t u1, int64_t pf_end) {
  const int64_t dim = a.dim;
  const int64_t sd = RowStateDim(a.optimizer.type, dim);
  const int64_t ahead = PrefetchRowsAhead(dim * 2 + sd * static_cast<int64_t>(sizeof(float)));
  uint16_t* weights = static_cast<uint16_t*>(a.weights);
  const uint32_t key = rd::StochasticKey(a.rounding_seed, a.step);
  constexpr int64_t kChunk = 256;
  float w[kChunk];
  for (int64_t u = u0; u < u1; ++u) {
    if (u + ahead < pf_end) {
      const int64_t next = slots[u + ahead];
      PrefetchBytes(weights + next * dim, dim * 2, true);
      if (sd > 0) PrefetchBytes(a.state + next * sd, sd * sizeof(float), true);
    }
    uint16_t* row = weights + slots[u] * dim;
    float* s = sd > 0 ? a.state + slots[u] * sd : nullptr;
    const float* g = row_grads + (u - u0) * dim;
    if (dim <= kChunk) {
      for (int64_t k = 0; k < dim; ++k) w[k] = Widen<kD>(row[k]);
      ApplyRowUpdate(a.optimizer, a.lr, a.step, dim, g, w, s);
      NarrowValues<kD>(a.rounding, key, w, dim, row);
    } else {
      std::vector<float> wide(dim);
      for (int64_t k = 0; k < dim; ++k) wide[k] = Widen<kD>(row[k]);
      ApplyRowUpdate(a.optimizer, a.lr, a.step, dim, g, wide.data(), s);
      NarrowValues<kD>(a.rounding, key, wide.data(), dim, row);
    }
  }
}

#if TESSERA_HAVE_AVX512_PATH
// ---------------------------------------------------------------------------------------------
// AVX-512 (dims 16, 32, 64, 128).

template <int kDim, RowDtype kD>
TESSERA_AVX512 void PoolBagsAvx512(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  constexpr int kVecs = kDim / 16;
  constexpr int64_t kRowBytes = kDim * 2;
  const int64_t ahead = PrefetchRowsAhead(kRowBytes);
  const uint16_t* weights = static_cast<const uint16_t*>(a.weights);
  const int64_t* idx = a.indices;
  const float* pw = a.per_id_weights;
  const int64_t j_last = a.offsets[b1];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t jb = a.offsets[b], je = a.offsets[b + 1];
    const float scale =
        (a.pooling == PoolingMode::kMean && je > jb) ? 1.0f / static_cast<float>(je - jb) : 1.0f;
    __m512 acc[kVecs];
    for (int c = 0; c < kVecs; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t j = jb; j < je; ++j) {
      if (j + ahead < j_last) PrefetchBytes(weights + idx[j + ahead] * kDim, kRowBytes, false);
      const uint16_t* row = weights + idx[j] * kDim;
      if (pw != nullptr) {
        const __m512 s = _mm512_set1_ps(pw[j]);
        for (int c = 0; c < kVecs; ++c) {
          acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(s, Load16<kD>(row + 16 * c)));
        }
      } else {
        for (int c = 0; c < kVecs; ++c) acc[c] = _mm512_add_ps(acc[c], Load16<kD>(row + 16 * c));
      }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    if (a.out_bf16 != nullptr) {
      uint16_t* out16 = a.out_bf16 + b * a.out_stride;
      for (int c = 0; c < kVecs; ++c) {
        StoreRounded16<RowDtype::kBf16>(RowRounding::kNearest, 0, _mm512_mul_ps(acc[c], sc),
                                        out16 + 16 * c);
      }
      continue;
    }
    float* out = a.out + b * a.out_stride;
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(acc[c], sc));
  }
}

// SGD and row-wise AdaGrad on one row kept in registers (no round trip through memory between
// widening, the update and the rounding): ApplyRowUpdate's formulas, term for term.
template <int kDim, RowDtype kD>
TESSERA_AVX512 inline void UpdateRowInRegisters(const RowUpdateArgs& a, uint32_t key,
                                                const float* g, uint16_t* row, float* s) {
  constexpr int kVecs = kDim / 16;
  float scale = a.lr;
  if (a.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
    __m512 x[kVecs];
    for (int c = 0; c < kVecs; ++c) x[c] = _mm512_loadu_ps(g + 16 * c);
    s[0] += SumOfSquares<kVecs>(x) / static_cast<float>(kDim);
    scale = a.lr / (sqrtf(s[0] / a.optimizer.adagrad_divisor) + a.optimizer.eps);
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int c = 0; c < kVecs; ++c) {
    const __m512 x = _mm512_sub_ps(Load16<kD>(row + 16 * c),
                                   _mm512_mul_ps(sc, _mm512_loadu_ps(g + 16 * c)));
    StoreRounded16<kD>(a.rounding, key, x, row + 16 * c);
  }
}

template <int kDim, RowDtype kD>
TESSERA_AVX512 void UpdateRowsAvx512(const int64_t* slots, const float* row_grads,
                                     const RowUpdateArgs& a, int64_t u0, int64_t u1,
                                     int64_t pf_end) {
  constexpr int kVecs = kDim / 16;
  const int64_t sd = RowStateDim(a.optimizer.type, kDim);
  const int64_t ahead = PrefetchRowsAhead(kDim * 4 + sd * static_cast<int64_t>(sizeof(float)));
  uint16_t* weights = static_cast<uint16_t*>(a.weights);
  const uint32_t key = rd::StochasticKey(a.rounding_seed, a.step);
  alignas(64) float w[kDim];
  for (int64_t u = u0; u < u1; ++u) {
    if (u + ahead < pf_end) {
      const int64_t next = slots[u + ahead];
      PrefetchBytes(weights + next * kDim, kDim * 2, true);
      if (sd > 0) PrefetchBytes(a.state + next * sd, sd * sizeof(float), true);
    }
    uint16_t* row = weights + slots[u] * kDim;
    float* s = sd > 0 ? a.state + slots[u] * sd : nullptr;
    if (a.optimizer.type != RowOptimizerType::kAdam) {
      UpdateRowInRegisters<kDim, kD>(a, key, row_grads + (u - u0) * kDim, row, s);
      continue;
    }
    for (int c = 0; c < kVecs; ++c) _mm512_store_ps(w + 16 * c, Load16<kD>(row + 16 * c));
    ApplyRowUpdate(a.optimizer, a.lr, a.step, kDim, row_grads + (u - u0) * kDim, w, s);
    for (int c = 0; c < kVecs; ++c) {
      StoreRounded16<kD>(a.rounding, key, _mm512_load_ps(w + 16 * c), row + 16 * c);
    }
  }
}

template <RowDtype kD>
bool PoolBagsFast(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  if (!HaveAvx512()) return false;
  switch (a.dim) {
    case 16: PoolBagsAvx512<16, kD>(a, b0, b1); return true;
    case 32: PoolBagsAvx512<32, kD>(a, b0, b1); return true;
    case 64: PoolBagsAvx512<64, kD>(a, b0, b1); return true;
    case 128: PoolBagsAvx512<128, kD>(a, b0, b1); return true;
    default: return false;
  }
}

template <RowDtype kD>
bool UpdateRowsFast(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a,
                    int64_t u0, int64_t u1, int64_t pf_end) {
  if (!HaveAvx512()) return false;
  switch (a.dim) {
    case 16: UpdateRowsAvx512<16, kD>(slots, row_grads, a, u0, u1, pf_end); return true;
    case 32: UpdateRowsAvx512<32, kD>(slots, row_grads, a, u0, u1, pf_end); return true;
    case 64: UpdateRowsAvx512<64, kD>(slots, row_grads, a, u0, u1, pf_end); return true;
    case 128: UpdateRowsAvx512<128, kD>(slots, row_grads, a, u0, u1, pf_end); return true;
    default: return false;
  }
}
#else
template <RowDtype kD>
bool PoolBagsFast(const PooledLookupArgs&, int64_t, int64_t) {
  return false;
}
template <RowDtype kD>
bool UpdateRowsFast(const int64_t*, const float*, const RowUpdateArgs&, int64_t, int64_t,
                    int64_t) {
  return false;
}
#endif

template <RowDtype kD>
void PoolBags16(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  if (!PoolBagsFast<kD>(a, b0, b1)) PoolBagsScalar<kD>(a, b0, b1);
}

template <RowDtype kD>
void UpdateRows16(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a,
                  int64_t u0, int64_t u1, int64_t pf_end) {
  if (!UpdateRowsFast<kD>(slots, row_grads, a, u0, u1, pf_end)) {
    UpdateRowsScalar<kD>(slots, row_grads, a, u0, u1, pf_end);
  }
}

}  // namespace

void PoolBags16Cpu(const PooledLookupArgs& a, int64_t b0, int64_t b1) {
  if (a.weight_dtype == RowDtype::kF16) {
    PoolBags16<RowDtype::kF16>(a, b0, b1);
  } else {
    PoolBags16<RowDtype::kBf16>(a, b0, b1);
  }
}

void UpdateRows16Cpu(const int64_t* slots, const float* row_grads, const RowUpdateArgs& a,
                     int64_t u0, int64_t u1, int64_t pf_end) {
  if (a.weight_dtype == RowDtype::kF16) {
    UpdateRows16<RowDtype::kF16>(slots, row_grads, a, u0, u1, pf_end);
  } else {
    UpdateRows16<RowDtype::kBf16>(slots, row_grads, a, u0, u1, pf_end);
  }
}

}  // namespace tessera::embedding_internal
