// CPU twin of the DLRM dot interaction. Samples are independent, so the batch is split across
// threads and every output element is computed by one thread in a fixed order: the bits do not
// depend on the thread count.
//
// Both directions work on 16-lane vectors (one zmm in the AVX-512 clone) and on blocks of four
// rows (the last F + 1 mod 4 rows in one smaller block) times two 16-lane column blocks: up to
// eight independent accumulator chains hide the FMA latency (one chain of 16-27 dependent FMAs
// was latency-bound at about a quarter of peak) and share the vector loads. Every output element
// is still one chain in a fixed order, so blocking changes no bits. The next sample's rows are
// prefetched into L2 a few lines per block (NextSamplePrefetch).
//
// Forward, per sample: Z ((F + 1) x d) is transposed into zt (d x P, P = F + 1 rounded up to 16,
// padding zero) in 16 x 16 register tiles, and the pairs of rows i..i+3 (j < i, contiguous in
// the output per row) are outer-product sweeps acc_i[j] += Z_i[k] * zt[k][j] over k: no
// horizontal sums, lower triangle only (lanes past a row's diagonal are computed and dropped).
// Backward, per sample: dZ = S Z with S the symmetric pair-gradient matrix (zero diagonal). S is
// never built: row i reads its lower part g(i, j<i) contiguously from d_out, and its upper part
// g(j>i, i) for four consecutive rows as four consecutive floats of row j of the pair triangle.
//
// bf16 embeddings (the bf16 hand-off, DotInteraction*Bf16): per sample, the kernel widens the
// sample's F rows into a per-thread fp32 scratch (F d floats, in L1) and runs the fp32 code on
// it; the backward writes the sample's d_emb rows to a second scratch and rounds them into the
// bf16 d_emb right after (nearest even, dense/internal/bf16_rows.h). The fp32 arithmetic is
// the same code on the same (widened) values, so the bits are the fp32 path's, d_emb rounded.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "dense/internal/bf16_rows.h"
#include "dense/internal/kernels.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {
namespace {

constexpr int64_t kLanes = 16;
constexpr int kRows = 4;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Offset within a sample's output row of pair (i, 0), i >= 1.
inline int64_t PairRow(int64_t d, int64_t i) { return d + i * (i - 1) / 2; }

// Prefetches the next sample's rows into L2 while this sample is computed, a few lines before
// each block of rows: the rows of consecutive samples are contiguous but read in a strided order
// the hardware prefetcher does not follow, and one burst of a whole sample's lines stalls on the
// miss buffers and (into L1) evicts the rows still in use.
class NextSamplePrefetch {
 public:
  // Three byte ranges (n = 0 for an unused one); `calls`: how many Issue() calls one sample
  // makes.
  void Start(const void* a, int64_t na, const void* b, int64_t nb, const void* c, int64_t nc,
             int64_t calls) {
    const void* p[3] = {a, b, c};
    const int64_t n[3] = {na, nb, nc};
    int64_t lines = 0;
    for (int r = 0; r < 3; ++r) {
      next_[r] = static_cast<const char*>(p[r]);
      end_[r] = next_[r] + n[r];
      lines += (end_[r] - next_[r] + kLine - 1) / kLine;
    }
    range_ = 0;
    per_call_ = (lines + calls - 1) / std::max<int64_t>(1, calls);
  }
  // Nothing to prefetch (the last sample of a range).
  void Stop() { range_ = 3; }
  void Issue() { Issue(per_call_); }
  void IssueAll() { Issue(INT64_MAX); }

 private:
  static constexpr int64_t kLine = 64;
  void Issue(int64_t lines) {
    for (; range_ < 3 && lines > 0; ++range_) {
      for (; next_[range_] < end_[range_] && lines > 0; next_[range_] += kLine, --lines) {
        __builtin_prefetch(next_[range_], 0, 2);
      }
      if (next_[range_] < end_[range_]) return;
    }
  }
  const char* next_[3] = {};
  const char* end_[3] = {};
  int range_ = 3;
  int64_t per_call_ = 0;
};

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
// bf16 embeddings: one sample's widened rows (and, backward, its fp32 d_emb rows).
float* ThreadSampleRows(size_t floats) {
  thread_local std::vector<float> rows;
  if (rows.size() < floats) rows.resize(floats);
  return rows.data();
}

// One step of the 16 x 16 transpose: swaps bit m of the row index with bit m of the column index
// for the row pair (a, b = a | m). Two-source shuffles (vpermt2ps or cheaper in the AVX-512
// clone); __builtin_shufflevector is GCC's (12 and later) and clang's. Lane c of the new a comes
// from a when bit m of c is clear, else from lane c ^ m of b (indices 16.. name b's lanes); the
// new b is the mirror image.
constexpr int LoLane(int m, int c) { return (c & m) ? 16 + (c ^ m) : c; }
constexpr int HiLane(int m, int c) { return (c & m) ? 16 + c : (c | m); }

template <int M>
__attribute__((always_inline)) inline void SwapBit(V16f& a, V16f& b) {
  const V16f lo = __builtin_shufflevector(
      a, b, LoLane(M, 0), LoLane(M, 1), LoLane(M, 2), LoLane(M, 3), LoLane(M, 4), LoLane(M, 5),
      LoLane(M, 6), LoLane(M, 7), LoLane(M, 8), LoLane(M, 9), LoLane(M, 10), LoLane(M, 11),
      LoLane(M, 12), LoLane(M, 13), LoLane(M, 14), LoLane(M, 15));
  const V16f hi = __builtin_shufflevector(
      a, b, HiLane(M, 0), HiLane(M, 1), HiLane(M, 2), HiLane(M, 3), HiLane(M, 4), HiLane(M, 5),
      HiLane(M, 6), HiLane(M, 7), HiLane(M, 8), HiLane(M, 9), HiLane(M, 10), HiLane(M, 11),
      HiLane(M, 12), HiLane(M, 13), HiLane(M, 14), HiLane(M, 15));
  a = lo;
  b = hi;
}

template <int M>
__attribute__((always_inline)) inline void SwapBitAll(V16f* r) {
  for (int a = 0; a < 16; ++a) {
    if ((a & M) == 0) SwapBit<M>(r[a], r[a | M]);
  }
}

// zt[k * pp + r] = Z[r][k] for one sample: Z's row 0 is the bottom output zb, rows 1..nf the
// embedding rows ze; zt's padding rows (nf + 1 .. pp - 1) are written as zeros. Whole 16 x 16
// tiles go through registers; the columns past the last multiple of 16 are copied one by one.
__attribute__((always_inline)) inline void TransposeSample(const float* __restrict zb,
                                                           const float* __restrict ze, int64_t nf,
                                                           int64_t d, int64_t pp,
                                                           float* __restrict zt) {
  const int64_t dv = d / kLanes * kLanes;
  for (int64_t rb = 0; rb < pp; rb += kLanes) {
    for (int64_t kb = 0; kb < dv; kb += kLanes) {
      V16f r[kLanes];
      for (int a = 0; a < kLanes; ++a) {
        const int64_t row = rb + a;
        if (row == 0) {
          r[a] = LoadV<V16f>(zb + kb);
        } else if (row <= nf) {
          r[a] = LoadV<V16f>(ze + (row - 1) * d + kb);
        } else {
          r[a] = V16f{};
        }
      }
      SwapBitAll<1>(r);
      SwapBitAll<2>(r);
      SwapBitAll<4>(r);
      SwapBitAll<8>(r);
      for (int c = 0; c < kLanes; ++c) StoreV(zt + (kb + c) * pp + rb, r[c]);
    }
  }
  for (int64_t k = dv; k < d; ++k) {
    float* __restrict t = zt + k * pp;
    t[0] = zb[k];
    for (int64_t f = 0; f < nf; ++f) t[f + 1] = ze[f * d + k];
  }
}

// Output rows i0 .. i0 + R - 1 of one sample (R <= kRows, all <= F), pair columns
// [jb0, jb0 + 16 J): R x J independent accumulator chains, each over k ascending.
template <int R, int J>
__attribute__((always_inline)) inline void ForwardRows(const float* const* zi, const float* zt,
                                                       int64_t pp, int64_t d, int64_t i0,
                                                       int64_t jb0, float* o) {
  V16f acc[R][J] = {};
  for (int64_t k = 0; k < d; ++k) {
    V16f t[J];
    for (int c = 0; c < J; ++c) t[c] = LoadV<V16f>(zt + k * pp + jb0 + c * kLanes);
    for (int a = 0; a < R; ++a) {
      const float s = zi[a][k];
      for (int c = 0; c < J; ++c) acc[a][c] += s * t[c];
    }
  }
  for (int a = 0; a < R; ++a) {
    const int64_t i = i0 + a;
    for (int c = 0; c < J; ++c) {
      const int64_t jb = jb0 + c * kLanes;
      const int64_t n = std::min(kLanes, i - jb);
      float* oi = o + PairRow(d, i) + jb;
      if (n == kLanes) {
        StoreV(oi, acc[a][c]);
      } else {
        for (int64_t l = 0; l < n; ++l) oi[l] = acc[a][c][l];
      }
    }
  }
}

// Rows i0 .. i0 + R - 1: the 16-column blocks left of the last row's diagonal, two at a time.
template <int R>
__attribute__((always_inline)) inline void ForwardBlock(const float* ze, const float* zt,
                                                        int64_t pp, int64_t d, int64_t i0,
                                                        NextSamplePrefetch& pf, float* o) {
  const float* zi[R];
  for (int a = 0; a < R; ++a) zi[a] = ze + (i0 + a - 1) * d;
  const int64_t end = RoundUp(i0 + R - 1, kLanes);  // columns j < i0 + R - 1, in whole blocks
  int64_t jb = 0;
  for (; jb + 2 * kLanes <= end; jb += 2 * kLanes) {
    pf.Issue();
    ForwardRows<R, 2>(zi, zt, pp, d, i0, jb, o);
  }
  if (jb < end) {
    pf.Issue();
    ForwardRows<R, 1>(zi, zt, pp, d, i0, jb, o);
  }
}

// The ForwardRows calls of one sample (ForwardRange's row blocks, ForwardBlock's column steps).
int64_t ForwardCalls(int64_t nf) {
  int64_t calls = 0;
  for (int64_t i0 = 1; i0 <= nf; i0 += kRows) {
    const int64_t blocks = RoundUp(std::min(i0 + kRows - 1, nf), kLanes) / kLanes;
    calls += (blocks + 1) / 2;
  }
  return calls;
}

// E: float, or uint16_t for bf16 embeddings (widened into `rows`, nf d floats, per sample).
template <typename E>
__attribute__((always_inline)) inline void ForwardSamples(const float* __restrict bottom,
                                                          const E* __restrict emb, int64_t b0,
                                                          int64_t b1, int64_t nf, int64_t d,
                                                          float* __restrict zt, float* rows,
                                                          float* __restrict out) {
  const int64_t pp = RoundUp(nf + 1, kLanes);
  const int64_t out_dim = d + nf * (nf + 1) / 2;
  std::memset(zt, 0, sizeof(float) * d * pp);
  const int64_t calls = ForwardCalls(nf);
  NextSamplePrefetch pf;
  for (int64_t b = b0; b < b1; ++b) {
    const float* __restrict zb = bottom + b * d;
    const E* __restrict eb = emb + b * nf * d;
    const float* ze;  // the sample's rows (widened into `rows` for bf16)
    if constexpr (std::is_same_v<E, float>) {
      ze = eb;
    } else {
      WidenBf16Row(eb, nf * d, rows);
      ze = rows;
    }
    float* __restrict o = out + b * out_dim;
    if (b + 1 < b1) {
      pf.Start(eb + nf * d, nf * d * sizeof(E), zb + d, d * sizeof(float), nullptr, 0, calls);
    } else {
      pf.Stop();
    }
    std::memcpy(o, zb, sizeof(float) * d);
    TransposeSample(zb, ze, nf, d, pp, zt);
    int64_t i0 = 1;
    for (; i0 + kRows - 1 <= nf; i0 += kRows) ForwardBlock<kRows>(ze, zt, pp, d, i0, pf, o);
    switch (nf + 1 - i0) {  // the last nf mod 4 rows in one block
      case 3: ForwardBlock<3>(ze, zt, pp, d, i0, pf, o); break;
      case 2: ForwardBlock<2>(ze, zt, pp, d, i0, pf, o); break;
      case 1: ForwardBlock<1>(ze, zt, pp, d, i0, pf, o); break;
      default: break;
    }
    pf.IssueAll();
  }
}

TESSERA_VECTOR_CLONES
void ForwardRange(const float* __restrict bottom, const float* __restrict emb, int64_t b0,
                  int64_t b1, int64_t nf, int64_t d, float* __restrict zt,
                  float* __restrict out) {
  ForwardSamples(bottom, emb, b0, b1, nf, d, zt, nullptr, out);
}

TESSERA_VECTOR_CLONES
void ForwardRangeBf16(const float* __restrict bottom, const uint16_t* __restrict emb, int64_t b0,
                      int64_t b1, int64_t nf, int64_t d, float* __restrict zt, float* rows,
                      float* __restrict out) {
  ForwardSamples(bottom, emb, b0, b1, nf, d, zt, rows, out);
}

// The pair gradient S(i, j) of one sample (g: the sample's d_out row).
inline float PairGrad(const float* g, int64_t d, int64_t i, int64_t j) {
  if (i == j) return 0.0f;
  return i > j ? g[PairRow(d, i) + j] : g[PairRow(d, j) + i];
}

// dZ rows i0 .. i0 + R - 1 of one sample, lanes [kb, kb + 16 J) of d: R x J independent
// accumulator chains, each over j ascending.
template <int R, int J>
__attribute__((always_inline)) inline void BackwardRows(const float* g, const float* const* zp,
                                                        int64_t p, int64_t d, int64_t i0,
                                                        int64_t kb, float* const* dst) {
  V16f acc[R][J] = {};
  const float* gl[R];  // row i's lower part: S(i, j) = gl[j] for j < i
  for (int a = 0; a < R; ++a) gl[a] = g + PairRow(d, i0 + a);
  for (int64_t j = 0; j < i0; ++j) {
    V16f z[J];
    for (int c = 0; c < J; ++c) z[c] = LoadV<V16f>(zp[j] + kb + c * kLanes);
    for (int a = 0; a < R; ++a) {
      const float s = gl[a][j];
      for (int c = 0; c < J; ++c) acc[a][c] += s * z[c];
    }
  }
  for (int64_t j = i0; j < i0 + R; ++j) {  // the R x R diagonal block
    V16f z[J];
    for (int c = 0; c < J; ++c) z[c] = LoadV<V16f>(zp[j] + kb + c * kLanes);
    for (int a = 0; a < R; ++a) {
      const float s = PairGrad(g, d, i0 + a, j);
      for (int c = 0; c < J; ++c) acc[a][c] += s * z[c];
    }
  }
  for (int64_t j = i0 + R; j < p; ++j) {  // upper part: S(i0 + a, j) = g(j, i0 + a)
    V16f z[J];
    for (int c = 0; c < J; ++c) z[c] = LoadV<V16f>(zp[j] + kb + c * kLanes);
    const float* gj = g + PairRow(d, j) + i0;
    for (int a = 0; a < R; ++a) {
      const float s = gj[a];
      for (int c = 0; c < J; ++c) acc[a][c] += s * z[c];
    }
  }
  for (int a = 0; a < R; ++a) {
    for (int c = 0; c < J; ++c) StoreV(dst[a] + kb + c * kLanes, acc[a][c]);
  }
}

// dZ rows i0 .. i0 + R - 1, all vector lanes [0, dv), two 16-lane blocks at a time.
template <int R>
__attribute__((always_inline)) inline void BackwardBlock(const float* g, const float* const* zp,
                                                         int64_t p, int64_t d, int64_t dv,
                                                         int64_t i0, NextSamplePrefetch& pf,
                                                         float* const* dst) {
  int64_t kb = 0;
  for (; kb + 2 * kLanes <= dv; kb += 2 * kLanes) {
    pf.Issue();
    BackwardRows<R, 2>(g, zp, p, d, i0, kb, dst);
  }
  if (kb < dv) {
    pf.Issue();
    BackwardRows<R, 1>(g, zp, p, d, i0, kb, dst);
  }
}

// E: float, or uint16_t for bf16 embeddings and d_emb (`rows`: 2 nf d floats per thread, the
// sample's widened rows then its fp32 d_emb rows, rounded into d_emb after the sample).
template <typename E>
__attribute__((always_inline)) inline void BackwardSamples(
    const float* __restrict bottom, const E* __restrict emb, const float* __restrict d_out,
    int64_t b0, int64_t b1, int64_t nf, int64_t d, const float** zp, float** dp,
    float* rows, float* __restrict d_bottom, E* __restrict d_emb) {
  constexpr bool kBf16 = !std::is_same_v<E, float>;
  const int64_t p = nf + 1;
  const int64_t out_dim = d + nf * (nf + 1) / 2;
  const int64_t dv = d / kLanes * kLanes;  // vector part of d; the rest is a scalar tail
  // BackwardRows calls per sample: row blocks x column steps.
  const int64_t calls = (p + kRows - 1) / kRows * ((dv / kLanes + 1) / 2);
  NextSamplePrefetch pf;
  for (int64_t b = b0; b < b1; ++b) {
    const float* __restrict g = d_out + b * out_dim;
    if (b + 1 < b1) {
      pf.Start(emb + (b + 1) * nf * d, nf * d * sizeof(E), g + out_dim, out_dim * sizeof(float),
               bottom + (b + 1) * d, d * sizeof(float), calls);
    } else {
      pf.Stop();
    }
    zp[0] = bottom + b * d;
    dp[0] = d_bottom + b * d;
    if constexpr (kBf16) {
      WidenBf16Row(emb + b * nf * d, nf * d, rows);
      for (int64_t f = 0; f < nf; ++f) {
        zp[f + 1] = rows + f * d;
        dp[f + 1] = rows + (nf + f) * d;
      }
    } else {
      for (int64_t f = 0; f < nf; ++f) {
        zp[f + 1] = emb + (b * nf + f) * d;
        dp[f + 1] = d_emb + (b * nf + f) * d;
      }
    }
    int64_t i0 = 0;
    for (; i0 + kRows <= p; i0 += kRows) BackwardBlock<kRows>(g, zp, p, d, dv, i0, pf, dp + i0);
    switch (p - i0) {  // the last p mod 4 rows in one block
      case 3: BackwardBlock<3>(g, zp, p, d, dv, i0, pf, dp + i0); break;
      case 2: BackwardBlock<2>(g, zp, p, d, dv, i0, pf, dp + i0); break;
      case 1: BackwardBlock<1>(g, zp, p, d, dv, i0, pf, dp + i0); break;
      default: break;
    }
    pf.IssueAll();
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
    if constexpr (kBf16) RoundBf16Row(rows + nf * d, nf * d, d_emb + b * nf * d);
  }
}

TESSERA_VECTOR_CLONES
void BackwardRange(const float* __restrict bottom, const float* __restrict emb,
                   const float* __restrict d_out, int64_t b0, int64_t b1, int64_t nf, int64_t d,
                   const float** zp, float** dp, float* __restrict d_bottom,
                   float* __restrict d_emb) {
  BackwardSamples(bottom, emb, d_out, b0, b1, nf, d, zp, dp, nullptr, d_bottom, d_emb);
}

TESSERA_VECTOR_CLONES
void BackwardRangeBf16(const float* __restrict bottom, const uint16_t* __restrict emb,
                       const float* __restrict d_out, int64_t b0, int64_t b1, int64_t nf,
                       int64_t d, const float** zp, float** dp, float* rows,
                       float* __restrict d_bottom, uint16_t* __restrict d_emb) {
  BackwardSamples(bottom, emb, d_out, b0, b1, nf, d, zp, dp, rows, d_bottom, d_emb);
}

// Samples per chunk: enough work to amortise the fork/join (ParallelMinMacs()). A sample costs
// its pairs' multiply-adds and, at least, one pass over its padded transpose (16 x d for up to
// 15 features): with few features the transpose is the work (skewed's 3 tables, d 64: 6 x 64
// multiply-adds but 16 x 64 transposed elements; counted by its multiply-adds alone its 2048
// samples never split).
int64_t SampleChunk(int64_t nf, int64_t d) {
  const int64_t per_sample = std::max((nf + 1) * (nf + 1) * d / 2, RoundUp(nf + 1, kLanes) * d);
  return std::max<int64_t>(1, ParallelMinMacs() / std::max<int64_t>(1, per_sample));
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

absl::Status DotInteractionForwardBf16Cpu(const DeviceContext& ctx, const float* bottom,
                                          const uint16_t* emb, int64_t batch,
                                          int64_t num_embeddings, int64_t dim, float* out) {
  const int64_t pp = RoundUp(num_embeddings + 1, kLanes);
  ParallelFor(batch, SampleChunk(num_embeddings, dim), [&](int64_t b0, int64_t b1, int) {
    float* zt = ThreadScratch(static_cast<size_t>(dim * pp));
    float* rows = ThreadSampleRows(static_cast<size_t>(num_embeddings * dim));
    ForwardRangeBf16(bottom, emb, b0, b1, num_embeddings, dim, zt, rows, out);
  });
  return absl::OkStatus();
}

absl::Status DotInteractionBackwardBf16Cpu(const DeviceContext& ctx, const float* bottom,
                                           const uint16_t* emb, const float* d_out,
                                           int64_t batch, int64_t num_embeddings, int64_t dim,
                                           float* d_bottom, uint16_t* d_emb) {
  const int64_t p = num_embeddings + 1;
  ParallelFor(batch, SampleChunk(num_embeddings, dim), [&](int64_t b0, int64_t b1, int) {
    const float** zp = ThreadRowPointers(static_cast<size_t>(p));
    float** dp = ThreadGradPointers(static_cast<size_t>(p));
    float* rows = ThreadSampleRows(static_cast<size_t>(2 * num_embeddings * dim));
    BackwardRangeBf16(bottom, emb, d_out, b0, b1, num_embeddings, dim, zp, dp, rows, d_bottom,
                      d_emb);
  });
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
