// What a MachineProfile says about itself beyond its rates: the machine it was measured on (its
// fingerprint, so that planning on another machine can say which fields differ) and how the
// calibration went (runs, spread, the load while it ran, the keys it could not pin down).
// Both are optional blocks of the profile file (planner/profile.h; docs/PLANNER.md).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

// The machine facts a profile's numbers depend on. Filled by trainer/machine_fingerprint.h
// (this machine) or read from a profile file; `present` false when the file has none (the
// shipped profiles of other clusters, profiles from before 2026-12-05).
struct MachineFingerprint {
  bool present = false;
  std::string cpu_model;          // /proc/cpuinfo "model name"
  std::vector<std::string> isa;   // of avx2, avx512f, avx512_bf16, amx_tile, amx_bf16 (sorted)
  int cores = 0;                  // online logical CPUs
  int64_t l2_bytes = 0;           // cpu0's L2 (sysfs; a VM may report the host's)
  int64_t l3_bytes = 0;           // cpu0's L3
  int64_t memory_bytes = 0;       // MemTotal
  std::string gpu;                // "" when none: "NVIDIA H200 x8"
  std::string gpu_driver;         // CUDA driver API version, e.g. "12.4"
  std::string cuda_runtime;       // the build's CUDA runtime version
  std::string blas;               // OpenBLAS's config string, "" when not linked
  std::string onednn;             // oneDNN's version, "" when not linked
};

// The fields of `profile` (what the profile was measured on) that differ from `here`, one line
// each ("cpu_model: 'X' here, 'Y' in the profile"); memory and caches differ when they are more
// than 10% apart. Empty when they match or when either is not present.
std::vector<std::string> FingerprintDifferences(const MachineFingerprint& here,
                                                const MachineFingerprint& profile);
// A short stable key of the fields that change what calibrate measures (every field, memory
// rounded to GiB): the per-user profile cache's file name (trainer/auto_plan.h).
std::string FingerprintKey(const MachineFingerprint& f);

// A key whose spread over calibrate's runs stayed above the threshold, or that failed a
// plausibility check (planner/profile_quality.h).
struct KeyQuality {
  std::string key;
  int runs = 0;
  double spread = 0;  // median |run - median| / max(median, floor) over the runs
  bool wide = false;
  std::string implausible;  // why a check refused it ("" = plausible)
};

// What calibrate records about itself (the profile's optional `calibration` block).
struct CalibrationRecord {
  bool present = false;  // the block was in the file / filled by calibrate
  int runs = 0;          // runs of every part (more for the parts re-measured)
  double max_spread = 0; // the threshold a key's spread was held to
  double seconds = 0;    // wall time of the calibration
  double load_average = 0;  // /proc/loadavg's 1-minute figure at the end
  // CPU time the machine's other processes took while calibrate ran (/proc/stat's busy time less
  // this process tree's), in cores: 0.5 = half a core busy with other work on average.
  double other_cpu_cores = 0;
  std::vector<KeyQuality> flagged;  // keys still wide or implausible after re-measuring
};

}  // namespace tessera::planner
