// Row-major single-precision GEMM through OpenBLAS (the OpenMP build, sharing our thread pool).
// C[m, n] = alpha * op(A) op(B) + beta * C with op(A) [m, k], op(B) [k, n]. Sizes must fit in
// 32 bits (the entry points check). OpenBLAS partitions statically, so the same thread count
// gives the same bits. Must not be called from inside a ParallelFor.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace tessera::dense_internal {

inline void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace tessera::dense_internal
