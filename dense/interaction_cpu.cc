// CPU twin of the DLRM dot interaction. Samples are independent, so the batch is split across
// threads and every output element is computed by one thread in a fixed order: the bits do not
// depend on the thread count.
//
// Both directions work on 16-lane vectors (one zmm in the AVX-512 clone) and on blocks of four
// rows at a time: four independent accumulator chains hide the FMA latency (one chain of 16-27
// dependent FMAs was latency-bound at about a quarter of peak) and share every vector load.
//
// Forward, per sample: Z ((F + 1) x d) is transposed into zt (d x P, P = F + 1 rounded up to 16,
// padding zero), and the pairs of rows i..i+3 (j < i, contiguous in the output per row) are
// outer-product sweeps acc_i[j] += Z_i[k] * zt[k][j] over k: no horizontal sums, lower triangle
// only (lanes past a row's diagonal are computed and dropped).
// Backward, per sample: dZ = S Z with S the symmetric pair-gradient matrix (zero diagonal). S is
// never built: row i reads its lower part g(i, j<i) contiguously from d_out, and its upper part
// g(j>i, i) for four consecutive rows as four consecutive floats of row j of the pair triangle.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "dense/internal/kernels.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {
namespace {

constexpr int64_t kLanes = 16;
constexpr int kRows = 4;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Offset within a sample's output row of pair (i, 0), i >= 1.
inline int64_t PairRow(int64_t d, int64_t i) { return d + i * (i - 1) / 2; }

// Per-thread scratch that only grows, so steady-state steps do not allocate.
float* ThreadScratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}
const float** ThreadRowPointers(size_t n) {
  thread_local std::vector<const float*> pointers;
  if (pointers.size() < n) pointers.resize(n);
  return pointers.data();
}
float** ThreadGradPointers(size_t n) {
  thread_local std::vector<float*> pointers;
  if (pointers.size() < n) pointers.resize(n);
  return pointers.data();
}

// Output rows i0 .. i0 + R - 1 of one sample (R <= kRows, all <= F).
template <int R>
__attribute__((always_inline)) inline void ForwardRows(const float* const* zi, const float* zt,
                                                       int64_t pp, int64_t d, int64_t i0,
                                                       float* o) {
  const int64_t last = i0 + R - 1;
  for (int64_t jb = 0; jb < last; jb += kLanes) {
    V16f acc[R] = {};
    for (int64_t k = 0; k < d; ++k) {
      const V16f t = LoadV<V16f>(zt + k * pp + jb);
      for (int a = 0; a < R; ++a) acc[a] += zi[a][k] * t;
    }
    for (int a = 0; a < R; ++a) {
      const int64_t i = i0 + a;
      const int64_t n = std::min(kLanes, i - jb);
      float* oi = o + PairRow(d, i) + jb;
      if (n == kLanes) {
        StoreV(oi, acc[a]);
      } else {
        for (int64_t l = 0; l < n; ++l) oi[l] = acc[a][l];
      }
    }
  }
}

TESSERA_VECTOR_CLONES
void ForwardRange(const float* __restrict bottom, const float* __restrict emb, int64_t b0,
                  int64_t b1, int64_t nf, int64_t d, float* __restrict zt,
                  float* __restrict out) {
  const int64_t pp = RoundUp(nf + 1, kLanes);
  const int64_t out_dim = d + nf * (nf + 1) / 2;
  std::memset(zt, 0, sizeof(float) * d * pp);
  for (int64_t b = b0; b < b1; ++b) {
    const float* __restrict zb = bottom + b * d;
    const float* __restrict ze = emb + b * nf * d;
    float* __restrict o = out + b * out_dim;
    std::memcpy(o, zb, sizeof(float) * d);
    // k outer: contiguous stores into zt (the strided reads hit the sample's few L1 lines).
    for (int64_t k = 0; k < d; ++k) {
      float* __restrict t = zt + k * pp;
      t[0] = zb[k];
      for (int64_t f = 0; f < nf; ++f) t[f + 1] = ze[f * d + k];
    }
    int64_t i0 = 1;
    const float* zi[kRows];
    for (; i0 + kRows - 1 <= nf; i0 += kRows) {
      for (int a = 0; a < kRows; ++a) zi[a] = ze + (i0 + a - 1) * d;
      ForwardRows<kRows>(zi, zt, pp, d, i0, o);
    }
    for (; i0 <= nf; ++i0) {
      zi[0] = ze + (i0 - 1) * d;
      ForwardRows<1>(zi, zt, pp, d, i0, o);
    }
  }
}

// The pair gradient S(i, j) of one sample (g: the sample's d_out row).
inline float PairGrad(const float* g, int64_t d, int64_t i, int64_t j) {
  if (i == j) return 0.0f;
  return i > j ? g[PairRow(d, i) + j] : g[PairRow(d, j) + i];
}

// dZ rows i0 .. i0 + R - 1 of one sample, lanes [kb, kb + 16) of d.
template <int R>
__attribute__((always_inline)) inline void BackwardRows(const float* g, const float* const* zp,
                                                        int64_t p, int64_t d, int64_t i0,
                                                        int64_t kb, float* const* dst) {
  V16f acc[R] = {};
  const float* gl[R];  // row i's lower part: S(i, j) = gl[j] for j < i
  for (int a = 0; a < R; ++a) gl[a] = g + PairRow(d, i0 + a);
  for (int64_t j = 0; j < i0; ++j) {
    const V16f z = LoadV<V16f>(zp[j] + kb);
    for (int a = 0; a < R; ++a) acc[a] += gl[a][j] * z;
  }
  for (int64_t j = i0; j < i0 + R; ++j) {  // the R x R diagonal block
    const V16f z = LoadV<V16f>(zp[j] + kb);
    for (int a = 0; a < R; ++a) acc[a] += PairGrad(g, d, i0 + a, j) * z;
  }
  for (int64_t j = i0 + R; j < p; ++j) {  // upper part: S(i0 + a, j) = g(j, i0 + a)
    const V16f z = LoadV<V16f>(zp[j] + kb);
    const float* gj = g + PairRow(d, j) + i0;
    for (int a = 0; a < R; ++a) acc[a] += gj[a] * z;
  }
  for (int a = 0; a < R; ++a) StoreV(dst[a] + kb, acc[a]);
}

TESSERA_VECTOR_CLONES
void BackwardRange(const float* __restrict bottom, const float* __restrict emb,
                   const float* __restrict d_out, int64_t b0, int64_t b1, int64_t nf, int64_t d,
                   const float** zp, float** dp, float* __restrict d_bottom,
                   float* __restrict d_emb) {
  const int64_t p = nf + 1;
  const int64_t out_dim = d + nf * (nf + 1) / 2;
  const int64_t dv = d / kLanes * kLanes;  // vector part of d; the rest is a scalar tail
  for (int64_t b = b0; b < b1; ++b) {
    const float* __restrict g = d_out + b * out_dim;
    zp[0] = bottom + b * d;
    dp[0] = d_bottom + b * d;
    for (int64_t f = 0; f < nf; ++f) {
      zp[f + 1] = emb + (b * nf + f) * d;
      dp[f + 1] = d_emb + (b * nf + f) * d;
    }
    for (int64_t kb = 0; kb < dv; kb += kLanes) {
      int64_t i0 = 0;
      for (; i0 + kRows <= p; i0 += kRows) BackwardRows<kRows>(g, zp, p, d, i0, kb, dp + i0);
      for (; i0 < p; ++i0) BackwardRows<1>(g, zp, p, d, i0, kb, dp + i0);
    }
    if (dv < d) {
      for (int64_t i = 0; i < p; ++i) {
        for (int64_t k = dv; k < d; ++k) {
          float acc = 0.0f;
          for (int64_t j = 0; j < p; ++j) acc += PairGrad(g, d, i, j) * zp[j][k];
          dp[i][k] = acc;
        }
      }
    }
    // The bottom output is also copied through unchanged: its gradient passes straight back.
    float* __restrict db = d_bottom + b * d;
    for (int64_t k = 0; k < d; ++k) db[k] += g[k];
  }
}

// Samples per chunk: enough work to amortise the fork/join (~32 K multiply-adds).
int64_t SampleChunk(int64_t nf, int64_t d) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, (nf + 1) * (nf + 1) * d / 2));
}

}  // namespace

absl::Status DotInteractionForwardCpu(const DeviceContext& ctx, const float* bottom,
                                      const float* emb, int64_t batch, int64_t num_embeddings,
                                      int64_t dim, float* out) {
  const int64_t pp = RoundUp(num_embeddings + 1, kLanes);
  ParallelFor(batch, SampleChunk(num_embeddings, dim), [&](int64_t b0, int64_t b1, int) {
    float* zt = ThreadScratch(static_cast<size_t>(dim * pp));
    ForwardRange(bottom, emb, b0, b1, num_embeddings, dim, zt, out);
  });
  return absl::OkStatus();
}

absl::Status DotInteractionBackwardCpu(const DeviceContext& ctx, const float* bottom,
                                       const float* emb, const float* d_out, int64_t batch,
                                       int64_t num_embeddings, int64_t dim, float* d_bottom,
                                       float* d_emb) {
  const int64_t p = num_embeddings + 1;
  ParallelFor(batch, SampleChunk(num_embeddings, dim), [&](int64_t b0, int64_t b1, int) {
    const float** zp = ThreadRowPointers(static_cast<size_t>(p));
    float** dp = ThreadGradPointers(static_cast<size_t>(p));
    BackwardRange(bottom, emb, d_out, b0, b1, num_embeddings, dim, zp, dp, d_bottom, d_emb);
  });
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
