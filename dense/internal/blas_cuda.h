// Row-major fp32 GEMMs through cuBLAS (column-major), for the dense CUDA twins. .cu files only.
//
// The transposition trick: a row-major matrix M [r, c] with leading dimension ld is, read
// column-major, M^T [c, r] with the same ld. So row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T: call cuBLAS with the operands swapped, m and n swapped, and each
// operand keeping its own transpose flag. Sizes were checked to fit in 32 bits by the entry
// points. cuBLAS runs on the handle's stream (the context's compute stream) and, without
// CUBLAS_ATOMICS, gives the same bits on every run on the same GPU and library version.
#pragma once

#include <cstdint>
#include <string>

#include "core/cuda_status_cuda.h"

namespace tessera::dense_internal {

// FailedPrecondition unless ctx carries a compute stream and a cuBLAS handle, i.e. came from a
// CudaContext (core/cuda_context.h): a hand-made kCuda DeviceContext would launch on the legacy
// stream with a null cuBLAS handle. Every dense CUDA twin checks it first.
inline absl::Status CheckCudaContext(const DeviceContext& ctx, const char* op,
                                     const char* cuda_file) {
  if (ctx.compute_stream != nullptr && ctx.cublas_handle != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      std::string(op) + " (" + cuda_file +
      "): the CUDA DeviceContext has no compute stream or cuBLAS handle; create it with "
      "CudaContext::Create (core/cuda_context.h)");
}

// C[m, n] = alpha * op(A) op(B) + beta * C, row-major, op(A) [m, k], op(B) [k, n].
inline absl::Status CudaSgemm(const DeviceContext& ctx, bool trans_a, bool trans_b, int64_t m,
                              int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return CublasStatus(
      cublasSgemm(CublasHandle(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                  static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda),
                  &beta, c, static_cast<int>(ldc)),
      "cublasSgemm");
}

// As CudaSgemm with A and B in bf16 (__nv_bfloat16 bits) and C fp32: cublasGemmEx with
// CUBLAS_COMPUTE_32F, i.e. exact bf16 products accumulated in fp32 (dense_dtype bf16).
inline absl::Status CudaGemmBf16(const DeviceContext& ctx, bool trans_a, bool trans_b, int64_t m,
                                 int64_t n, int64_t k, const void* a, int64_t lda, const void* b,
                                 int64_t ldb, float* c, int64_t ldc) {
  const float alpha = 1.0f, beta = 0.0f;
  return CublasStatus(
      cublasGemmEx(CublasHandle(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(ldb), a,
                   CUDA_R_16BF, static_cast<int>(lda), &beta, c, CUDA_R_32F,
                   static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx(bf16)");
}

// `count` independent row-major GEMMs; operand i starts at base + i * stride.
inline absl::Status CudaSgemmStridedBatched(const DeviceContext& ctx, bool trans_a, bool trans_b,
                                            int64_t m, int64_t n, int64_t k, float alpha,
                                            const float* a, int64_t lda, int64_t stride_a,
                                            const float* b, int64_t ldb, int64_t stride_b,
                                            float beta, float* c, int64_t ldc, int64_t stride_c,
                                            int64_t count) {
  return CublasStatus(
      cublasSgemmStridedBatched(CublasHandle(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a,
                                &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(count)),
      "cublasSgemmStridedBatched");
}

}  // namespace tessera::dense_internal
