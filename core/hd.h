// TESSERA_HD marks functions that compile for both host and device, so one definition of an
// update rule or an RNG serves the CPU and CUDA twins.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#define TESSERA_HD_INLINE __host__ __device__ __forceinline__
#else
#define TESSERA_HD
#define TESSERA_HD_INLINE inline
#endif
