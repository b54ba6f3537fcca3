// Helpers for .cu files only (includes CUDA and cuBLAS headers): error conversion to
// absl::Status and the typed views of DeviceContext's opaque handles. Host code that must build
// without CUDA uses core/cuda_context.h instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/status.h"

// nvcc (13.0) warns "ignoring return value type with nodiscard attribute" for `st = f();` with
// absl::Status (a [[nodiscard]] class): a false positive on the assignment operator's return.
#pragma nv_diag_suppress 2810

namespace tessera {

// OK for cudaSuccess; otherwise Internal "<call>: <cudaGetErrorString>" (and the sticky error
// state of the runtime is left as the runtime leaves it).
[[nodiscard]] absl::Status CudaStatus(cudaError_t err, const char* call);
// OK for CUBLAS_STATUS_SUCCESS; otherwise Internal "<call>: <cublasGetStatusString>".
[[nodiscard]] absl::Status CublasStatus(cublasStatus_t st, const char* call);
// The launch error of the last kernel (cudaGetLastError), Internal naming `kernel`.
[[nodiscard]] absl::Status CudaLaunchStatus(const char* kernel);

inline cudaStream_t ComputeStream(const DeviceContext& ctx) {
  return static_cast<cudaStream_t>(ctx.compute_stream);
}
inline cudaStream_t CommStream(const DeviceContext& ctx) {
  return static_cast<cudaStream_t>(ctx.comm_stream);
}
inline cublasHandle_t CublasHandle(const DeviceContext& ctx) {
  return static_cast<cublasHandle_t>(ctx.cublas_handle);
}

// Blocks of `threads` covering n work items, capped to what one grid dimension takes (kernels
// written with grid-stride loops accept the cap).
inline unsigned int GridFor(long long n, int threads) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 1048576) blocks = 1048576;
  return static_cast<unsigned int>(blocks);
}

}  // namespace tessera

#define TESSERA_CUDA_RETURN_IF_ERROR(call) \
  TESSERA_RETURN_IF_ERROR(::tessera::CudaStatus((call), #call))
#define TESSERA_CUBLAS_RETURN_IF_ERROR(call) \
  TESSERA_RETURN_IF_ERROR(::tessera::CublasStatus((call), #call))
#define TESSERA_CUDA_LAUNCH_RETURN_IF_ERROR(kernel) \
  TESSERA_RETURN_IF_ERROR(::tessera::CudaLaunchStatus(kernel))
