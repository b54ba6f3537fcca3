// CPU twin of one DCNv2 cross layer: OpenBLAS sgemm for the products, one elementwise pass for
// the rest. Forward fuses the bias add and x0 * inner + x_l into one pass over the rows; backward
// fuses d_inner = g * x0, its column sums (the bias gradient) and dx0 += g * inner into one pass
// split by columns, so each column sum is computed by one thread in row order (the bits do not
// depend on the thread count) and no per-thread partials are needed.
#include <algorithm>
#include <cstdint>

#include "core/parallel.h"
#include "dense/internal/blas.h"
#include "dense/internal/kernels.h"
#include "dense/internal/simd.h"

namespace tessera::dense_internal {
namespace {

TESSERA_VECTOR_CLONES
void CombineRows(const float* __restrict x0, const float* __restrict xl,
                 const float* __restrict b, int64_t r0, int64_t r1, int64_t dim,
                 float* __restrict inner, float* __restrict x_next) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * dim;
    for (int64_t c = 0; c < dim; ++c) {
      const float v = inner[o + c] + b[c];
      inner[o + c] = v;
      x_next[o + c] = x0[o + c] * v + xl[o + c];
    }
  }
}

TESSERA_VECTOR_CLONES
void CombineBackwardColumns(const float* __restrict x0, const float* __restrict inner,
                            const float* __restrict g, int64_t rows, int64_t dim, int64_t c0,
                            int64_t c1, bool assign_dx0, float* __restrict dx0,
                            float* __restrict d_inner, float* __restrict db) {
  constexpr int64_t kBlock = 256;
  double acc[kBlock];
  for (int64_t cb = c0; cb < c1; cb += kBlock) {
    const int64_t w = std::min(kBlock, c1 - cb);
    for (int64_t c = 0; c < w; ++c) acc[c] = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * dim + cb;
      for (int64_t c = 0; c < w; ++c) {
        const float gv = g[o + c];
        const float di = gv * x0[o + c];
        d_inner[o + c] = di;
        acc[c] += static_cast<double>(di);
        const float t = gv * inner[o + c];
        dx0[o + c] = assign_dx0 ? t : dx0[o + c] + t;
      }
    }
    for (int64_t c = 0; c < w; ++c) db[cb + c] = static_cast<float>(acc[c]);
  }
}

}  // namespace

absl::Status CrossLayerForwardCpu(const DeviceContext& ctx, const CrossLayerParams& p,
                                  const float* x0, const float* xl, int64_t batch, float* inner,
                                  float* low, float* x_next) {
  const int64_t dim = p.dim;
  if (p.rank == 0) {
    Sgemm(false, true, batch, dim, dim, 1.0f, xl, dim, p.w, dim, 0.0f, inner, dim);
  } else {
    Sgemm(false, true, batch, p.rank, dim, 1.0f, xl, dim, p.v, dim, 0.0f, low, p.rank);
    Sgemm(false, true, batch, dim, p.rank, 1.0f, low, p.rank, p.u, p.rank, 0.0f, inner, dim);
  }
  const int64_t rows_per_chunk = std::max<int64_t>(1, 8192 / dim);
  ParallelFor(batch, rows_per_chunk, [&](int64_t r0, int64_t r1, int) {
    CombineRows(x0, xl, p.b, r0, r1, dim, inner, x_next);
  });
  return absl::OkStatus();
}

absl::Status CrossLayerBackwardCpu(const DeviceContext& ctx, const CrossLayerParams& p,
                                   const float* x0, const float* xl, const float* inner,
                                   const float* low, int64_t batch, float* g, bool assign_dx0,
                                   float* dx0, float* d_inner, float* d_low,
                                   const CrossLayerGrads& grads) {
  const int64_t dim = p.dim;
  ParallelFor(dim, 32, [&](int64_t c0, int64_t c1, int) {
    CombineBackwardColumns(x0, inner, g, batch, dim, c0, c1, assign_dx0, dx0, d_inner, grads.db);
  });
  // x_{l+1} = x0 * inner + x_l: g already is the x_l term; add the path through inner.
  if (p.rank == 0) {
    Sgemm(true, false, dim, dim, batch, 1.0f, d_inner, dim, xl, dim, 0.0f, grads.dw, dim);
    Sgemm(false, false, batch, dim, dim, 1.0f, d_inner, dim, p.w, dim, 1.0f, g, dim);
  } else {
    const int64_t r = p.rank;
    Sgemm(true, false, dim, r, batch, 1.0f, d_inner, dim, low, r, 0.0f, grads.du, r);
    Sgemm(false, false, batch, r, dim, 1.0f, d_inner, dim, p.u, r, 0.0f, d_low, r);
    Sgemm(true, false, r, dim, batch, 1.0f, d_low, r, xl, dim, 0.0f, grads.dv, dim);
    Sgemm(false, false, batch, dim, r, 1.0f, d_low, r, p.v, dim, 1.0f, g, dim);
  }
  return absl::OkStatus();
}

}  // namespace tessera::dense_internal
