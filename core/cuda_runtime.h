// The CUDA runtime seen from host code that must compile without CUDA. In a build without the
// CUDA path every function returns Unimplemented (or does nothing, for frees), so callers need
// no #if. Errors from the CUDA runtime come back as absl::Status (Internal) naming the call.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace tessera {

// True when this binary has the CUDA path compiled in.
bool CudaCompiled();
// Number of visible CUDA devices; 0 without the CUDA path, a driver or a device.
int CudaDeviceCount();
// Allocates `bytes` of zeroed device memory on the current device.
absl::StatusOr<void*> CudaMallocZeroed(size_t bytes);
// Frees device memory from CudaMallocZeroed; nullptr is a no-op.
void CudaFree(void* ptr);
// Synchronous copies (default stream); kinds are inferred by the runtime (UVA).
absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes);

}  // namespace tessera
