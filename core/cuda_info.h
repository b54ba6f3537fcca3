// What CUDA device and versions this process sees, for a machine fingerprint
// (trainer/machine_fingerprint.h). Implemented beside core/cuda_runtime.h's functions: "" in a
// build without the CUDA path or without a driver or device.
#pragma once

#include <string>

namespace tessera {

// Device 0's name ("NVIDIA H200"), the driver's CUDA version and the runtime's ("12.4").
std::string CudaDeviceName();
std::string CudaDriverVersion();
std::string CudaRuntimeVersion();

}  // namespace tessera
