// CPU twin of Linear: oneDNN's fp32 matmul (OpenBLAS sgemm in a build without oneDNN) for the
// three products, and one pass over the output for everything elementwise (bias + ReLU forward,
// which keeps NaN visible as torch.relu does: oneDNN's ReLU post-op maps NaN to 0 and would hide
// a non-finite loss), one pass over dy for the ReLU mask + bias gradient backward. The
// bf16 variant rounds the GEMM inputs (x, W, dz) to bf16 and runs the products through oneDNN
// with fp32 accumulation, dz's rounding in the mask pass and a bf16 activation's in the bias
// pass; bias, ReLU and db stay fp32. Between two bf16 layers the gradient is bf16: the upper
// layer's input-gradient matmul stores it as bf16 (oneDNN's bf16 destination), and the lower
// layer's mask pass reads 2 bytes per element and writes dz in place (perf: the mask pass was the
// bf16 step's largest pass outside the matmuls, memory-bound at 12 bytes per element; now 6).
// On a 2-thread pool the backward's weight- and input-gradient products run at once, one per
// thread (PairWorth, RunPair in core/parallel.h), each with the bits of a 1-thread run.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "dense/internal/blas.h"
#include "dense/internal/dnnl_gemm.h"
#include "dense/internal/kernels.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {
namespace {

// Rows per ParallelFor chunk of the bias pass (a float read and written per element) so a chunk is
// worth a thread (kParallelMinBytes): below that the fork/join costs more than the pass.
int64_t RowChunk(int64_t cols) { return MinChunkForBytes(8 * std::max<int64_t>(cols, 1)); }
// Columns per chunk of MaskColumnSums (dy read and written, y read: 12 bytes per element), at
// least 32.
int64_t ColumnChunk(int64_t rows) { return std::max<int64_t>(32, MinChunkForBytes(12 * rows)); }
// The same for MaskColumnSumsBf16Dy (a bf16 gradient read and written, a bf16 y read: 6 bytes).
int64_t ColumnChunkBf16Dy(int64_t rows) {
  return std::max<int64_t>(32, MinChunkForBytes(6 * rows));
}

TESSERA_VECTOR_CLONES
// y16 non-null: each finished row is also rounded to bf16 into y16 while it is in L1 (the bf16
// activation the next bf16 layer reads, instead of a separate rounding pass over y).
void BiasActRows(float* __restrict y, const float* __restrict b, int64_t r0, int64_t r1,
                 int64_t cols, bool relu, uint16_t* y16) {
  for (int64_t r = r0; r < r1; ++r) {
    float* __restrict row = y + r * cols;
    if (relu) {
      // `v < 0 ? 0 : v` keeps NaN visible (as torch.relu does) instead of hiding it as 0.
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[c] + b[c];
        row[c] = v < 0.0f ? 0.0f : v;
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c] += b[c];
    }
    if (y16 != nullptr) FloatToBf16(row, cols, y16 + r * cols);
  }
}

// bf16 bits of 8 floats, rounded to nearest even (NaN stays NaN: its quiet bit is set first, so
// the rounding carry cannot turn it into infinity): the 8-lane form of core/bf16.h FloatToBf16.
__attribute__((always_inline)) inline void StoreBf16(uint16_t* p, V8f v) {
  V8i u = (V8i)v;
  u |= (v != v) & 0x00400000;
  u += 0x7fff + ((u >> 16) & 1);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint16_t>(static_cast<uint32_t>(u[i]) >> 16);
}

// Applies the ReLU mask (dy = 0 where y <= 0, when y is non-null) to columns [c0, c1) of dy and
// writes their column sums to db and, when dz16 is non-null, the masked dy rounded to bf16 to
// dz16 (the bf16 backward's GEMM input, in the same pass). Each column is summed by one thread,
// row by row, in double: the bits do not depend on the thread count, and there is no
// cross-thread reduction. Explicit 8-lane vectors: GCC left the float -> double accumulation
// scalar.
// The mask comes from y of type Y: float, or uint16_t holding bf16 (y > 0 has the same answer
// for an fp32 value and its bf16 rounding).
template <typename Y>
__attribute__((always_inline)) inline V8i Positive(const Y* p) {
  if constexpr (sizeof(Y) == 4) {
    return LoadV<V8f>(p) > 0.0f;
  } else {
    V8i u;
    for (int i = 0; i < 8; ++i) u[i] = static_cast<int>(static_cast<uint32_t>(p[i]) << 16);
    return (V8f)u > 0.0f;
  }
}
inline float ToFloat(float v) { return v; }
inline float ToFloat(uint16_t v) { return Bf16ToFloat(v); }

template <typename Y>
__attribute__((always_inline)) inline void MaskColumnSumsT(float* __restrict dy,
                                                           const Y* __restrict y, int64_t rows,
                                                           int64_t cols, int64_t c0, int64_t c1,
                                                           float* __restrict db,
                                                           uint16_t* __restrict dz16) {
  constexpr int64_t kBlock = 256;
  V8d acc[kBlock / 8];
  for (int64_t cb = c0; cb < c1; cb += kBlock) {
    const int64_t w = std::min(kBlock, c1 - cb);
    const int64_t wv = w / 8 * 8;  // vector part; the rest is a scalar tail
    double tail[8] = {};
    for (int64_t v = 0; v < wv / 8; ++v) acc[v] = V8d{};
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict d = dy + r * cols + cb;
      const Y* __restrict yr = y != nullptr ? y + r * cols + cb : nullptr;
      for (int64_t c = 0; c < wv; c += 8) {
        V8f g = LoadV<V8f>(d + c);
        if (yr != nullptr) {
          const V8i keep = Positive(yr + c);
          g = (V8f)((V8i)g & keep);
          StoreV(d + c, g);
        }
        if (dz16 != nullptr) StoreBf16(dz16 + r * cols + cb + c, g);
        acc[c / 8] += __builtin_convertvector(g, V8d);
      }
      for (int64_t c = wv; c < w; ++c) {
        const float g = (yr == nullptr || ToFloat(yr[c]) > 0.0f) ? d[c] : 0.0f;
        d[c] = g;
        if (dz16 != nullptr) FloatToBf16(&g, 1, dz16 + r * cols + cb + c);
        tail[c - wv] += static_cast<double>(g);
      }
    }
    for (int64_t c = 0; c < wv; ++c) db[cb + c] = static_cast<float>(acc[c / 8][c % 8]);
    for (int64_t c = wv; c < w; ++c) db[cb + c] = static_cast<float>(tail[c - wv]);
  }
}

// MaskColumnSumsT for a bf16 gradient: masks columns [c0, c1) of dz16 in place (bf16 [rows,
// cols]; zero where y <= 0 when y is non-null) and writes their column sums (in double, row by
// row, as MaskColumnSumsT) to db.
template <typename Y>
__attribute__((always_inline)) inline void MaskColumnSumsBf16DyT(uint16_t* __restrict dz16,
                                                                 const Y* __restrict y,
                                                                 int64_t rows, int64_t cols,
                                                                 int64_t c0, int64_t c1,
                                                                 float* __restrict db) {
  constexpr int64_t kBlock = 256;
  V8d acc[kBlock / 8];
  for (int64_t cb = c0; cb < c1; cb += kBlock) {
    const int64_t w = std::min(kBlock, c1 - cb);
    const int64_t wv = w / 8 * 8;
    double tail[8] = {};
    for (int64_t v = 0; v < wv / 8; ++v) acc[v] = V8d{};
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* __restrict d = dz16 + r * cols + cb;
      const Y* __restrict yr = y != nullptr ? y + r * cols + cb : nullptr;
      for (int64_t c = 0; c < wv; c += 8) {
        V8i u;
        for (int i = 0; i < 8; ++i) u[i] = static_cast<int>(static_cast<uint32_t>(d[c + i]) << 16);
        if (yr != nullptr) {
          u &= Positive(yr + c);
          for (int i = 0; i < 8; ++i) {
            d[c + i] = static_cast<uint16_t>(static_cast<uint32_t>(u[i]) >> 16);
          }
        }
        acc[c / 8] += __builtin_convertvector((V8f)u, V8d);
      }
      for (int64_t c = wv; c < w; ++c) {
        if (yr != nullptr && !(ToFloat(yr[c]) > 0.0f)) d[c] = 0;
        tail[c - wv] += static_cast<double>(Bf16ToFloat(d[c]));
      }
    }
    for (int64_t c = 0; c < wv; ++c) db[cb + c] = static_cast<float>(acc[c / 8][c % 8]);
    for (int64_t c = wv; c < w; ++c) db[cb + c] = static_cast<float>(tail[c - wv]);
  }
}

TESSERA_VECTOR_CLONES
void MaskColumnSumsBf16Dy(uint16_t* dz16, const uint16_t* y, int64_t rows, int64_t cols,
                          int64_t c0, int64_t c1, float* db) {
  MaskColumnSumsBf16DyT<uint16_t>(dz16, y, rows, cols, c0, c1, db);
}

TESSERA_VECTOR_CLONES
void MaskColumnSums(float* dy, const float* y, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
                    float* db, uint16_t* dz16) {
  MaskColumnSumsT<float>(dy, y, rows, cols, c0, c1, db, dz16);
}

TESSERA_VECTOR_CLONES
void MaskColumnSumsBf16Y(float* dy, const uint16_t* y, int64_t rows, int64_t cols, int64_t c0,
                         int64_t c1, float* db, uint16_t* dz16) {
  MaskColumnSumsT<uint16_t>(dy, y, rows, cols, c0, c1, db, dz16);
}

// The fp32 products: oneDNN's fp32 matmul when the build has it (faster than OpenBLAS's sgemm at
// every DLRM step shape measured, bench/dense_gemm_bench.cc, docs/PERFORMANCE.md), else sgemm.
absl::Status Gemm32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  static const bool dnnl = DnnlGemmAvailable();
  if (dnnl) {
    return DnnlGemm(GemmInput::kF32, trans_a, trans_b, m, n, k, a, lda, b, ldb, false, c, ldc);
  }
  Sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  return absl::OkStatus();
}

// Whether a layer's backward runs its weight-gradient and input-gradient products at once, one
// per thread (RunPair, on a 2-thread pool): both exist (the first bottom layer has no input
// gradient) and each is worth a thread (GemmMinMacsPerThread). The two have the same
// multiply-adds, and each runs at its 1-thread rate: on the AMX Xeon oneDNN's own 2-thread split
// of small's bf16 products ran 1.52x its 1-thread rate (bench/dense_gemm_bench.cc), two products
// at once up to 2x.
bool PairWorth(bool has_dx, int64_t batch, int64_t in, int64_t out) {
  return has_dx && batch * in * out >= GemmMinMacsPerThread();
}

// Rounds n floats to bf16 on all threads (6 bytes per element, kParallelMinBytes per chunk).
void ToBf16Parallel(const float* x, int64_t n, std::vector<uint16_t>* out) {
  if (static_cast<int64_t>(out->size()) < n) out->resize(n);
  uint16_t* o = out->data();
  ParallelFor(n, MinChunkForBytes(6), [&](int64_t b, int64_t e, int) {
    FloatToBf16(x + b, e - b, o + b);
  });
}

}  // namespace

absl::Status LinearForwardBf16Cpu(const float* x, const uint16_t* x16, const float* w,
                                  const float* b, int64_t batch, int64_t in, int64_t out,
                                  Activation act, float* y, Bf16Operands* s) {
  if (x16 == nullptr) {
    ToBf16Parallel(x, batch * in, &s->x);
    x16 = s->x.data();
  }
  s->x16 = x16;
  ToBf16Parallel(w, out * in, &s->w);
  TESSERA_RETURN_IF_ERROR(DnnlGemm(GemmInput::kBf16, false, true, batch, out, in, x16, in,
                                   s->w.data(), in, false, y, out));
  // Bias and ReLU in one pass (not oneDNN's ReLU post-op: it maps NaN to 0, which would hide a
  // non-finite loss); a bf16 output is rounded in the same pass, row by row.
  uint16_t* y16 = nullptr;
  if (s->bf16_out) {
    if (static_cast<int64_t>(s->y.size()) < batch * out) s->y.resize(batch * out);
    y16 = s->y.data();
  }
  const bool relu = act == Activation::kRelu;
  ParallelFor(batch, RowChunk(out), [&](int64_t r0, int64_t r1, int) {
    BiasActRows(y, b, r0, r1, out, relu, y16);
  });
  return absl::OkStatus();
}

absl::Status LinearBackwardBf16Cpu(const float* y, float* dy, int64_t batch, int64_t in,
                                   int64_t out, Activation act, float* dw, float* db, float* dx,
                                   uint16_t* dx16, Bf16Operands* s) {
  const bool relu = act == Activation::kRelu;
  if (static_cast<int64_t>(s->dy.size()) < batch * out) s->dy.resize(batch * out);
  uint16_t* dz16 = s->dy.data();
  if (dy == nullptr) {
    // The gradient is already bf16 in s->dy (the next layer wrote it): mask it in place and sum
    // db, 6 bytes per element.
    ParallelFor(out, ColumnChunkBf16Dy(batch), [&](int64_t c0, int64_t c1, int) {
      MaskColumnSumsBf16Dy(dz16, relu ? s->y.data() : nullptr, batch, out, c0, c1, db);
    });
  } else {
    // Mask, bias gradient and the bf16 rounding of dz in one pass over dy.
    ParallelFor(out, ColumnChunk(batch), [&](int64_t c0, int64_t c1, int) {
      if (s->bf16_out) {
        MaskColumnSumsBf16Y(dy, relu ? s->y.data() : nullptr, batch, out, c0, c1, db, dz16);
      } else {
        MaskColumnSums(dy, relu ? y : nullptr, batch, out, c0, c1, db, dz16);
      }
    });
  }
  absl::Status dw_status, dx_status;
  RunPair(
      PairWorth(dx16 != nullptr || dx != nullptr, batch, in, out),
      [&] {
        dw_status = DnnlGemm(GemmInput::kBf16, true, false, out, in, batch, dz16, out, s->x16, in,
                             false, dw, in);
      },
      [&] {
        if (dx16 != nullptr) {
          // The previous bf16 layer's gradient, stored as bf16 by the matmul itself.
          GemmEpilogue ep;
          ep.bf16_out = true;
          dx_status = DnnlGemmEpilogue(GemmInput::kBf16, false, false, batch, in, out, dz16, out,
                                       s->w.data(), in, ep, dx16, in);
        } else if (dx != nullptr) {
          dx_status = DnnlGemm(GemmInput::kBf16, false, false, batch, in, out, dz16, out,
                               s->w.data(), in, false, dx, in);
        }
      });
  TESSERA_RETURN_IF_ERROR(dw_status);
  return dx_status;
}

absl::Status LinearForwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                              const float* b, int64_t batch, int64_t in, int64_t out,
                              Activation act, float* y) {
  const bool relu = act == Activation::kRelu;
  TESSERA_RETURN_IF_ERROR(Gemm32(false, true, batch, out, in, x, in, w, in, y, out));
  ParallelFor(batch, RowChunk(out), [&](int64_t r0, int64_t r1, int) {
    BiasActRows(y, b, r0, r1, out, relu, nullptr);
  });
  return absl::OkStatus();
}

absl::Status LinearBackwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                               const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                               Activation act, float* dw, float* db, float* dx) {
  const float* mask = act == Activation::kRelu ? y : nullptr;
  // Split by columns (ColumnChunk per thread) so each column sum stays on one thread.
  ParallelFor(out, ColumnChunk(batch), [&](int64_t c0, int64_t c1, int) {
    MaskColumnSums(dy, mask, batch, out, c0, c1, db, nullptr);
  });
  absl::Status dw_status, dx_status;
  static const bool dnnl = DnnlGemmAvailable();  // RunPair's jobs need the oneDNN products
  RunPair(
      dnnl && PairWorth(dx != nullptr, batch, in, out),
      [&] { dw_status = Gemm32(true, false, out, in, batch, dy, out, x, in, dw, in); },
      [&] {
        if (dx != nullptr) dx_status = Gemm32(false, false, batch, in, out, dy, out, w, in, dx, in);
      });
  TESSERA_RETURN_IF_ERROR(dw_status);
  return dx_status;
}

}  // namespace tessera::dense_internal
