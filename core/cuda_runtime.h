// The CUDA runtime seen from host code that must compile without CUDA. In a build without the
// CUDA path every function returns Unimplemented (or does nothing, for frees), so callers need
// no #if. Errors from the CUDA runtime come back as absl::Status (Internal) naming the call.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tessera {

// The one error for work asked of a CUDA device in a build without the CUDA path:
// Unimplemented("<op>: this build of Tessera has no CUDA path (configured with TESSERA_CUDA=OFF
// or without the CUDA toolkit); use a CPU DeviceContext").
inline absl::Status NoCudaPath(absl::string_view op) {
  return absl::UnimplementedError(
      absl::StrCat(op, ": this build of Tessera has no CUDA path (configured with TESSERA_CUDA=OFF "
                   "or without the CUDA toolkit); use a CPU DeviceContext"));
}

// True when this binary has the CUDA path compiled in.
bool CudaCompiled();
// Number of visible CUDA devices; 0 without the CUDA path, a driver or a device.
int CudaDeviceCount();
// Allocates `bytes` of zeroed device memory on the current device. ResourceExhausted when the
// device is out of memory, Internal for other CUDA errors.
[[nodiscard]] absl::StatusOr<void*> CudaMallocZeroed(size_t bytes);
// Frees device memory from CudaMallocZeroed; nullptr is a no-op.
void CudaFree(void* ptr);
// Synchronous copies (default stream); kinds are inferred by the runtime (UVA).
[[nodiscard]] absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes);

}  // namespace tessera
