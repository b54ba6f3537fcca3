// This machine's fingerprint (planner/profile_meta.h): CPU model and the ISA that changes the
// kernels (AVX2, AVX-512, AVX512_BF16, AMX), cores, caches, memory, GPU model, driver and CUDA
// runtime, and the BLAS and oneDNN the dense layers run on. tessera-plan calibrate records it
// in the profile; planning compares it with the profile's (FingerprintDifferences) and
// `sharding.profile: auto` keys its per-user cache by it (trainer/auto_plan.h).
// Reads /proc/cpuinfo, /proc/meminfo and /sys/devices/system/cpu/cpu0/cache; thread-safe.
#pragma once

#include "planner/profile_meta.h"

namespace tessera {

planner::MachineFingerprint ThisMachineFingerprint();

}  // namespace tessera
