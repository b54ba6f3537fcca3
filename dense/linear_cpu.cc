// CPU twin of Linear: oneDNN's fp32 matmul (OpenBLAS sgemm in a build without oneDNN) for the
// three products, and one pass over the output for
// everything elementwise (bias + ReLU forward; ReLU mask + bias gradient backward). The bf16
// variant rounds the GEMM inputs (x, W, dz) to bf16 and runs the products through oneDNN with
// fp32 accumulation; everything elementwise stays fp32.
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

// Rows per ParallelFor chunk so a chunk has at least ~16 K elements: below that the fork/join
// costs more than the pass.
int64_t RowChunk(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

TESSERA_VECTOR_CLONES
void BiasActRows(float* __restrict y, const float* __restrict b, int64_t r0, int64_t r1,
                 int64_t cols, bool relu) {
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
  }
}

// Applies the ReLU mask (dy = 0 where y <= 0, when y is non-null) to columns [c0, c1) of dy and
// writes their column sums to db. Each column is summed by one thread, row by row, in double:
// the bits do not depend on the thread count, and there is no cross-thread reduction. Explicit
// 8-lane vectors: GCC left the float -> double accumulation scalar.
TESSERA_VECTOR_CLONES
void MaskColumnSums(float* __restrict dy, const float* __restrict y, int64_t rows, int64_t cols,
                    int64_t c0, int64_t c1, float* __restrict db) {
  constexpr int64_t kBlock = 256;
  V8d acc[kBlock / 8];
  for (int64_t cb = c0; cb < c1; cb += kBlock) {
    const int64_t w = std::min(kBlock, c1 - cb);
    const int64_t wv = w / 8 * 8;  // vector part; the rest is a scalar tail
    double tail[8] = {};
    for (int64_t v = 0; v < wv / 8; ++v) acc[v] = V8d{};
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict d = dy + r * cols + cb;
      const float* __restrict yr = y != nullptr ? y + r * cols + cb : nullptr;
      for (int64_t c = 0; c < wv; c += 8) {
        V8f g = LoadV<V8f>(d + c);
        if (yr != nullptr) {
          const V8i keep = LoadV<V8f>(yr + c) > 0.0f;
          g = (V8f)((V8i)g & keep);
          StoreV(d + c, g);
        }
        acc[c / 8] += __builtin_convertvector(g, V8d);
      }
      for (int64_t c = wv; c < w; ++c) {
        const float g = (yr == nullptr || yr[c] > 0.0f) ? d[c] : 0.0f;
        d[c] = g;
        tail[c - wv] += static_cast<double>(g);
      }
    }
    for (int64_t c = 0; c < wv; ++c) db[cb + c] = static_cast<float>(acc[c / 8][c % 8]);
    for (int64_t c = wv; c < w; ++c) db[cb + c] = static_cast<float>(tail[c - wv]);
  }
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

// Rounds n floats to bf16 on all threads (at least 16 K elements per chunk).
void ToBf16Parallel(const float* x, int64_t n, std::vector<uint16_t>* out) {
  if (static_cast<int64_t>(out->size()) < n) out->resize(n);
  uint16_t* o = out->data();
  ParallelFor(n, 16384, [&](int64_t b, int64_t e, int) { FloatToBf16(x + b, e - b, o + b); });
}

}  // namespace

absl::Status LinearForwardBf16Cpu(const float* x, const float* w, const float* b, int64_t batch,
                                  int64_t in, int64_t out, Activation act, float* y,
                                  Bf16Operands* s) {
  ToBf16Parallel(x, batch * in, &s->x);
  ToBf16Parallel(w, out * in, &s->w);
  TESSERA_RETURN_IF_ERROR(DnnlGemm(GemmInput::kBf16, false, true, batch, out, in, s->x.data(), in,
                                   s->w.data(), in, false, y, out));
  const bool relu = act == Activation::kRelu;
  ParallelFor(batch, RowChunk(out), [&](int64_t r0, int64_t r1, int) {
    BiasActRows(y, b, r0, r1, out, relu);
  });
  return absl::OkStatus();
}

absl::Status LinearBackwardBf16Cpu(const float* y, float* dy, int64_t batch, int64_t in,
                                   int64_t out, Activation act, float* dw, float* db, float* dx,
                                   Bf16Operands* s) {
  const float* mask = act == Activation::kRelu ? y : nullptr;
  ParallelFor(out, 32, [&](int64_t c0, int64_t c1, int) {
    MaskColumnSums(dy, mask, batch, out, c0, c1, db);
  });
  ToBf16Parallel(dy, batch * out, &s->dy);
  TESSERA_RETURN_IF_ERROR(DnnlGemm(GemmInput::kBf16, true, false, out, in, batch, s->dy.data(),
                                   out, s->x.data(), in, false, dw, in));
  if (dx != nullptr) {
    TESSERA_RETURN_IF_ERROR(DnnlGemm(GemmInput::kBf16, false, false, batch, in, out,
                                     s->dy.data(), out, s->w.data(), in, false, dx, in));
  }
  return absl::OkStatus();
}

absl::Status LinearForwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                              const float* b, int64_t batch, int64_t in, int64_t out,
                              Activation act, float* y) {
  TESSERA_RETURN_IF_ERROR(Gemm32(false, true, batch, out, in, x, in, w, in, y, out));
  const bool relu = act == Activation::kRelu;
  ParallelFor(batch, RowChunk(out), [&](int64_t r0, int64_t r1, int) {
    BiasActRows(y, b, r0, r1, out, relu);
  });
  return absl::OkStatus();
}

absl::Status LinearBackwardCpu(const DeviceContext& ctx, const float* x, const float* w,
                               const float* y, float* dy, int64_t batch, int64_t in, int64_t out,
                               Activation act, float* dw, float* db, float* dx) {
  const float* mask = act == Activation::kRelu ? y : nullptr;
  // Split by columns (at least 32 per thread) so each column sum stays on one thread.
  ParallelFor(out, 32, [&](int64_t c0, int64_t c1, int) {
    MaskColumnSums(dy, mask, batch, out, c0, c1, db);
  });
  TESSERA_RETURN_IF_ERROR(Gemm32(true, false, out, in, batch, dy, out, x, in, dw, in));
  if (dx != nullptr) {
    TESSERA_RETURN_IF_ERROR(Gemm32(false, false, batch, in, out, dy, out, w, in, dx, in));
  }
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
