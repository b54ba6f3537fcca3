// The CUDA runtime functions for builds with the CUDA path (see cuda_runtime.h).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/cuda_info.h"

namespace tessera {
namespace {
absl::Status FromCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}
}  // namespace

bool CudaCompiled() { return true; }

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string CudaDeviceReport() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string out = absl::StrCat("driver API ", driver / 1000, ".", driver % 1000 / 10,
                                 ", runtime ", runtime / 1000, ".", runtime % 1000 / 10, ": ");
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat(out, "cudaGetDeviceCount failed: ", cudaGetErrorName(err), " (",
                        cudaGetErrorString(err), ")");
  }
  absl::StrAppend(&out, n, " device(s)");
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    int pageable = 0;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, d) != cudaSuccess) {
      const cudaError_t e = cudaGetLastError();
      absl::StrAppend(&out, "; device ", d, ": ", cudaGetErrorString(e));
      continue;
    }
    absl::StrAppend(&out, "; device ", d, ": ", p.name, " (sm_", p.major, p.minor, ", ",
                    p.totalGlobalMem >> 20, " MiB, pageable memory access ",
                    pageable ? "yes" : "no", ")");
  }
  return out;
}

std::string CudaDeviceName() {
  cudaDeviceProp prop;
  if (CudaDeviceCount() == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

namespace {
std::string VersionText(int v) {
  return v <= 0 ? std::string() : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

std::string CudaDriverVersion() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return VersionText(v);
}

std::string CudaRuntimeVersion() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return VersionText(v);
}

absl::StatusOr<void*> CudaMallocZeroed(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes: out of device memory"));
  }
  absl::Status st = FromCuda(err, "cudaMalloc");
  if (!st.ok()) return st;
  st = FromCuda(cudaMemset(p, 0, bytes), "cudaMemset");
  if (!st.ok()) {
    cudaFree(p);
    return st;
  }
  return p;
}

void CudaFree(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes) {
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

}  // namespace tessera
