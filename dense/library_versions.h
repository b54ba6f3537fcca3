// The versions of the math libraries the dense layers run on, for a machine profile's
// fingerprint (trainer/machine_fingerprint.h): a profile measured with another BLAS or oneDNN
// prices other GEMMs.
#pragma once

#include <string>

namespace tessera {

// OpenBLAS's configuration string at run time (openblas_get_config: version, target core,
// threading), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64".
std::string BlasLibraryVersion();
// oneDNN's version at run time ("3.0.0"), "" when the build has no oneDNN.
std::string OneDnnLibraryVersion();

}  // namespace tessera
