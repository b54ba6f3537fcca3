// The CUDA runtime functions for builds without the CUDA path (see cuda_runtime.h).
#include "core/cuda_runtime.h"
#include "core/cuda_info.h"

#if !TESSERA_HAVE_CUDA
namespace tessera {

bool CudaCompiled() { return false; }
int CudaDeviceCount() { return 0; }
std::string CudaDeviceReport() { return "this build has no CUDA path (TESSERA_CUDA=OFF)"; }
std::string CudaDeviceName() { return ""; }
std::string CudaDriverVersion() { return ""; }
std::string CudaRuntimeVersion() { return ""; }
absl::StatusOr<void*> CudaMallocZeroed(size_t) {
  return absl::UnimplementedError("this build of Tessera has no CUDA path (TESSERA_CUDA=OFF)");
}
void CudaFree(void*) {}
absl::Status CudaMemcpy(void*, const void*, size_t) {
  return absl::UnimplementedError("this build of Tessera has no CUDA path (TESSERA_CUDA=OFF)");
}

}  // namespace tessera
#endif
