// The CPU kernels of 16-bit tables (fp16 / bf16 rows, embedding/row_dtype.h), called by
// pooled_lookup_cpu.cc's forward and update loops for weight_dtype kF16 / kBf16.
//
// Forward: the fp32 loop's shape (one thread per chunk of bags, each bag summed in index order,
// rows prefetched a few ids ahead), with each row widened to fp32 as it is gathered: F16C's
// vcvtph2ps for fp16, a zero-extend and 16-bit shift for bf16, 16 values per instruction. Half
// the bytes per row are gathered.
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

#include "embedding/internal/cpu_parallel.h"
#include "embedding/internal/pooled_lookup_kernels.h"
#include "embedding/pooled_lookup.h"
#include "embedding/row_dtype.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_HAVE_AVX512_PATH 1
#include <immintrin.h>
#define TESSERA_AVX512 __attribute__((target("avx512f")))
#else
#define TESSERA_HAVE_AVX512_PATH 0
#endif

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
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t jb = a.offsets[b], je = a.offsets[b + 1];
    float* out = a.out + b * a.out_stride;
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
  }
}

// Widens n values, runs the update, narrows them back: one row of UpdateRowsScalar, also the
// AVX-512 path's fallback for one block of 16.
template <RowDtype kD>
inline void NarrowValues(RowRounding rounding, uint32_t key, const float* w, int64_t n,
                         uint16_t* row) {
  for (int64_t k = 0; k < n; ++k) row[k] = Narrow<kD>(rounding, key, w[k]);
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

template <RowDtype kD>
TESSERA_AVX512 inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kD == RowDtype::kF16) {
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// row_dtype::StochasticBits on 16 lanes.
TESSERA_AVX512 inline __m512i StochasticBits16(__m512i bits, __m512i key) {
  __m512i h = _mm512_xor_si512(bits, key);
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// Rounds 16 fp32 values (w) into row[0, 16). Returns false, writing nothing, when a lane needs
// the scalar code (NaN or Inf; for fp16 also |x| >= 65504).
template <RowDtype kD>
TESSERA_AVX512 inline bool Store16(RowRounding rounding, uint32_t key, const float* w,
                                   uint16_t* row) {
  const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(w));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __m512i h;
  if constexpr (kD == RowDtype::kBf16) {
    if (_mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x7f800000)) != 0) return false;
    if (rounding == RowRounding::kNearest) {
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      h = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    } else {
      const __m512i r = StochasticBits16(u, _mm512_set1_epi32(static_cast<int>(key)));
      h = _mm512_add_epi32(u, _mm512_srli_epi32(r, 16));
    }
    h = _mm512_srli_epi32(h, 16);
  } else {
    if (_mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x477fe000)) != 0) return false;
    if (rounding == RowRounding::kNearest) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row),
                          _mm512_cvtps_ph(_mm512_castsi512_ps(u),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return true;
    }
    const __m512i r = StochasticBits16(u, _mm512_set1_epi32(static_cast<int>(key)));
    // Normal range: 13 random bits below the kept mantissa, truncate, rebias.
    const __m512i normal = _mm512_sub_epi32(
        _mm512_srli_epi32(_mm512_add_epi32(a, _mm512_srli_epi32(r, 19)), 13),
        _mm512_set1_epi32(112 << 10));
    // Below 2^-14: m = trunc(|x| * 2^24 + (r >> 8) * 2^-24).
    const __m512 m = _mm512_add_ps(
        _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(16777216.0f)),
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)),
                      _mm512_set1_ps(1.0f / 16777216.0f)));
    const __m512i sub = _mm512_cvttps_epi32(m);
    const __mmask16 is_sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x38800000));
    h = _mm512_mask_blend_epi32(is_sub, normal, sub);
    h = _mm512_or_si512(h, _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), _mm512_cvtepi32_epi16(h));
  return true;
}

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
    float* out = a.out + b * a.out_stride;
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
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(acc[c], sc));
  }
}

// RowSumOfSquares(g, kDim) in registers, with its exact order of terms: lane l of `part` is
// partial l (columns k = l mod 16, increasing k), then the pairwise tree 8, 4, 2, 1.
template <int kDim>
TESSERA_AVX512 inline float SumOfSquares16(const float* g) {
  __m512 part = _mm512_setzero_ps();
  for (int c = 0; c < kDim / 16; ++c) {
    const __m512 x = _mm512_loadu_ps(g + 16 * c);
    part = _mm512_add_ps(part, _mm512_mul_ps(x, x));
  }
  const __m256 p8 = _mm256_add_ps(_mm512_castps512_ps256(part),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(part), 1)));
  const __m128 p4 = _mm_add_ps(_mm256_castps256_ps128(p8), _mm256_extractf128_ps(p8, 1));
  const __m128 p2 = _mm_add_ps(p4, _mm_movehl_ps(p4, p4));
  const __m128 p1 = _mm_add_ss(p2, _mm_shuffle_ps(p2, p2, 1));
  return _mm_cvtss_f32(p1);
}

// SGD and row-wise AdaGrad on one row kept in registers (no round trip through memory between
// widening, the update and the rounding): ApplyRowUpdate's formulas, term for term.
template <int kDim, RowDtype kD>
TESSERA_AVX512 inline void UpdateRowInRegisters(const RowUpdateArgs& a, uint32_t key,
                                                const float* g, uint16_t* row, float* s) {
  constexpr int kVecs = kDim / 16;
  float scale = a.lr;
  if (a.optimizer.type == RowOptimizerType::kRowWiseAdagrad) {
    s[0] += SumOfSquares16<kDim>(g) / static_cast<float>(kDim);
    scale = a.lr / (sqrtf(s[0] / a.optimizer.adagrad_divisor) + a.optimizer.eps);
  }
  const __m512 sc = _mm512_set1_ps(scale);
  alignas(64) float w[16];
  for (int c = 0; c < kVecs; ++c) {
    const __m512 x = _mm512_sub_ps(Load16<kD>(row + 16 * c),
                                   _mm512_mul_ps(sc, _mm512_loadu_ps(g + 16 * c)));
    _mm512_store_ps(w, x);
    if (!Store16<kD>(a.rounding, key, w, row + 16 * c)) {
      NarrowValues<kD>(a.rounding, key, w, 16, row + 16 * c);
    }
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
      if (!Store16<kD>(a.rounding, key, w + 16 * c, row + 16 * c)) {
        NarrowValues<kD>(a.rounding, key, w + 16 * c, 16, row + 16 * c);
      }
    }
  }
}

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
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
