// CPU twin of the DLRM dot interaction. Samples are independent, so the batch is split across
// threads and every output element is computed by one thread in a fixed order: the bits do not
// depend on the thread count.
//
// Forward, per sample: Z ((F + 1) x d) is transposed into zt (d x P, P = F + 1 rounded up to 16,
// padding zero), and the pairs of row i (j < i, contiguous in the output) are one outer-product
// sweep: acc[j] += Z_i[k] * zt[k][j] over k, 16 lanes of j at a time in registers. This needs no
// horizontal sums (a dot product of d = 16 would be one vector and a costly reduction) and only
// touches the lower triangle.
// Backward, per sample: dZ = S Z with S the symmetric (F + 1) x (F + 1) matrix of pair gradients
// (zero diagonal); each row of dZ accumulates 16 columns of d in registers over j.
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

// The helpers below are always inlined, so the vector-return ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// 16 floats as one GCC vector: one zmm register in the AVX-512 clone, two ymm in the AVX2 clone,
// four xmm in the baseline. (The compiler's own vectoriser turned the 16-lane accumulator loops
// into 16 scalar FMAs.) aligned(4): loads and stores may be unaligned.
typedef float V16 __attribute__((vector_size(64), aligned(4)));
__attribute__((always_inline)) inline V16 Load16(const float* p) {
  V16 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
__attribute__((always_inline)) inline void Store16(float* p, const V16& v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

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
    for (int64_t k = 0; k < d; ++k) zt[k * pp] = zb[k];
    for (int64_t f = 0; f < nf; ++f) {
      for (int64_t k = 0; k < d; ++k) zt[k * pp + f + 1] = ze[f * d + k];
    }
    for (int64_t i = 1; i <= nf; ++i) {
      const float* __restrict zi = ze + (i - 1) * d;
      float* __restrict oi = o + d + i * (i - 1) / 2;
      for (int64_t jb = 0; jb < i; jb += kLanes) {
        V16 acc = {};
        for (int64_t k = 0; k < d; ++k) acc += zi[k] * Load16(zt + k * pp + jb);
        const int64_t n = std::min(kLanes, i - jb);
        if (n == kLanes) {
          Store16(oi + jb, acc);
        } else {
          for (int64_t l = 0; l < n; ++l) oi[jb + l] = acc[l];
        }
      }
    }
  }
}

TESSERA_VECTOR_CLONES
void BackwardRange(const float* __restrict bottom, const float* __restrict emb,
                   const float* __restrict d_out, int64_t b0, int64_t b1, int64_t nf, int64_t d,
                   float* __restrict s, const float** zp, float* __restrict d_bottom,
                   float* __restrict d_emb) {
  const int64_t p = nf + 1;
  const int64_t out_dim = d + nf * (nf + 1) / 2;
  for (int64_t b = b0; b < b1; ++b) {
    const float* __restrict g = d_out + b * out_dim;
    zp[0] = bottom + b * d;
    for (int64_t f = 0; f < nf; ++f) zp[f + 1] = emb + (b * nf + f) * d;
    for (int64_t i = 0; i < p; ++i) s[i * p + i] = 0.0f;
    for (int64_t i = 1; i < p; ++i) {
      const float* gi = g + d + i * (i - 1) / 2;
      for (int64_t j = 0; j < i; ++j) s[i * p + j] = s[j * p + i] = gi[j];
    }
    for (int64_t i = 0; i < p; ++i) {
      const float* __restrict si = s + i * p;
      float* __restrict dst = i == 0 ? d_bottom + b * d : d_emb + (b * nf + i - 1) * d;
      int64_t kb = 0;
      for (; kb + kLanes <= d; kb += kLanes) {
        V16 acc = {};
        for (int64_t j = 0; j < p; ++j) acc += si[j] * Load16(zp[j] + kb);
        Store16(dst + kb, acc);
      }
      if (kb < d) {  // tail of d not a multiple of 16
        const int64_t n = d - kb;
        float acc[kLanes] = {};
        for (int64_t j = 0; j < p; ++j) {
          const float w = si[j];
          const float* __restrict zj = zp[j] + kb;
          for (int64_t l = 0; l < n; ++l) acc[l] += w * zj[l];
        }
        for (int64_t l = 0; l < n; ++l) dst[kb + l] = acc[l];
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
    float* s = ThreadScratch(static_cast<size_t>(p * p));
    const float** zp = ThreadRowPointers(static_cast<size_t>(p));
    BackwardRange(bottom, emb, d_out, b0, b1, num_embeddings, dim, s, zp, d_bottom, d_emb);
  });
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
