// AVX-512 pieces of the CPU row kernels shared by pooled_lookup_16bit.cc (16-bit gathers and
// updates) and fused_update_avx512.cc (the fused segment sum + row update): widening 16 stored
// values to fp32, rounding 16 fp32 values back (nearest or stochastic, row_dtype.h's formulas
// lane by lane) and RowSumOfSquares in registers. Header-only, private to embedding/.
//
// Bits. Every function computes exactly what the scalar code of row_dtype.h / row_optimizer.h
// computes: multiplies and adds are separate instructions (the files including this one are built
// with -ffp-contract=off), and a rounding that needs the scalar code (NaN, Inf, fp16 overflow)
// reports it instead of guessing. Callers must check HaveAvx512() before calling any of these.
#pragma once

#include <cstdint>

#include "embedding/row_dtype.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TESSERA_HAVE_AVX512_PATH 1
#include <immintrin.h>
// GCC 12 reports the `__Y` of its own _mm512_undefined_* helpers, inlined into the extract and
// convert intrinsics, as maybe uninitialised: a false positive of the compiler's headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TESSERA_AVX512 __attribute__((target("avx512f")))
#else
#define TESSERA_HAVE_AVX512_PATH 0
#endif

namespace tessera::embedding_internal {

// Whether this CPU runs AVX-512F (checked once).
inline bool HaveAvx512() {
#if TESSERA_HAVE_AVX512_PATH
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
#else
  return false;
#endif
}

// Rounds n fp32 values into `row` of dtype kD with the scalar code (row_dtype::FromFloat).
template <RowDtype kD>
inline void NarrowValues(RowRounding rounding, uint32_t key, const float* w, int64_t n,
                         uint16_t* row) {
  for (int64_t k = 0; k < n; ++k) row[k] = row_dtype::FromFloat(kD, rounding, key, w[k]);
}

#if TESSERA_HAVE_AVX512_PATH

// 16 stored values of kD (fp16: vcvtph2ps; bf16: zero-extend and shift) as fp32.
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

// Rounds the 16 fp32 values of x into row[0, 16). Returns false, writing nothing, when a lane
// needs the scalar code (NaN or Inf; for fp16 also |x| >= 65504).
template <RowDtype kD>
TESSERA_AVX512 inline bool Store16(RowRounding rounding, uint32_t key, __m512 x, uint16_t* row) {
  const __m512i u = _mm512_castps_si512(x);
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
                          _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
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

// Store16, falling back to the scalar rounding for a block that needs it.
template <RowDtype kD>
TESSERA_AVX512 inline void StoreRounded16(RowRounding rounding, uint32_t key, __m512 x,
                                          uint16_t* row) {
  if (Store16<kD>(rounding, key, x, row)) return;
  alignas(64) float w[16];
  _mm512_store_ps(w, x);
  NarrowValues<kD>(rounding, key, w, 16, row);
}

// RowSumOfSquares over the kVecs registers x[0 .. kVecs) (a row of 16 * kVecs values), with its
// exact order of terms: lane l accumulates partial l (columns k = l mod 16, increasing k), then
// the pairwise tree 8, 4, 2, 1.
template <int kVecs>
TESSERA_AVX512 inline float SumOfSquares(const __m512* x) {
  __m512 part = _mm512_setzero_ps();
  for (int c = 0; c < kVecs; ++c) part = _mm512_add_ps(part, _mm512_mul_ps(x[c], x[c]));
  const __m256 p8 =
      _mm256_add_ps(_mm512_castps512_ps256(part),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(part), 1)));
  const __m128 p4 = _mm_add_ps(_mm256_castps256_ps128(p8), _mm256_extractf128_ps(p8, 1));
  const __m128 p2 = _mm_add_ps(p4, _mm_movehl_ps(p4, p4));
  const __m128 p1 = _mm_add_ss(p2, _mm_shuffle_ps(p2, p2, 1));
  return _mm_cvtss_f32(p1);
}

#endif  // TESSERA_HAVE_AVX512_PATH

}  // namespace tessera::embedding_internal
