// DeviceContext: where a component runs. On the CPU it carries the thread count; on the CUDA
// path it also carries the device ordinal, the compute and communication streams and the cuBLAS
// handle (opaque here so host code compiles without CUDA headers). The caller owns the context
// and must keep it alive while components use it. Not thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "core/buffer.h"

namespace tessera {

struct DeviceContext {
  Device device = Device::kCpu;
  int cuda_device = 0;                 // CUDA ordinal (kCuda only)
  void* compute_stream = nullptr;      // cudaStream_t (kCuda only)
  void* comm_stream = nullptr;         // cudaStream_t (kCuda only)
  void* cublas_handle = nullptr;       // cublasHandle_t (kCuda only)

  bool is_cuda() const { return device == Device::kCuda; }
  static DeviceContext Cpu() { return DeviceContext{}; }
};

}  // namespace tessera
