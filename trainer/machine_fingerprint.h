// This machine's fingerprint (planner/profile_meta.h): CPU model and the ISA that changes the
// kernels (AVX2, AVX-512, AVX512_BF16, AMX), cores, caches, memory, GPU model, driver and CUDA
// runtime, and the BLAS and oneDNN the dense layers run on. tessera-plan calibrate records it
// in the profile; planning compares it with the profile's (FingerprintDifferences) and
// `sharding.profile: auto` keys its per-user cache by it (trainer/auto_plan.h).
// Reads /proc/cpuinfo, /proc/meminfo and /sys/devices/system/cpu/cpu0/cache; thread-safe.
#pragma once

#include <string>

#include "planner/profile_meta.h"

namespace tessera {

planner::MachineFingerprint ThisMachineFingerprint();

// The value after "key<spaces/tabs>:" on the first line of `path` (a /proc file such as
// /proc/cpuinfo or /proc/self/status) that starts with `key`, leading blanks removed; "" when
// the file or the key is missing.
std::string ProcFileValue(const std::string& path, const std::string& key);

}  // namespace tessera
