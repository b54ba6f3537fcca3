// `sharding.profile: auto`: this machine's own profile, from a per-user cache keyed by the
// machine's fingerprint, or calibrated once (`tessera-plan calibrate --quick`, run beside this
// binary) and cached; and the fingerprint check of any profile against this machine.
//
// Cache: $XDG_CACHE_HOME/tessera (else $HOME/.cache/tessera), one file per machine,
// profile-<FingerprintKey>.yaml. A cached file is used when it loads and its fingerprint
// matches this machine's; otherwise it is calibrated again (written to a temp file, then renamed:
// two processes calibrating at once leave one complete file). TESSERA_AUTO_CALIBRATE_FLAGS (words
// separated by spaces) are appended to the calibrate command (tests make it tiny with them).
//
// Thread-safety: none needed (called once at start-up by one thread).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/profile.h"

namespace tessera {

inline constexpr char kAutoProfile[] = "auto";

// The cache directory and this machine's cached profile's path in it.
std::string ProfileCacheDir();
std::string ThisMachineProfileCachePath();

struct ResolvedProfile {
  planner::MachineProfile profile;
  // Where it came from: "shipped NAME", "file PATH", "cached PATH" or "calibrated into PATH".
  std::string origin;
  // Fields of this machine's fingerprint that differ from the profile's (FingerprintDifferences);
  // empty when they match or the profile has no fingerprint (`fingerprinted` false).
  std::vector<std::string> differences;
  bool fingerprinted = false;
};

// `auto`: the cached profile of this machine, or a quick calibration (a progress line on stderr,
// under a minute on an idle 2-core machine) whose GEMM points are `config_path`'s layer shapes
// (none: calibrate's defaults) cached for the next run. Errors name sharding.profile's value:
// no tessera-plan beside this binary, a failed calibration.
absl::StatusOr<ResolvedProfile> AutoProfile(const std::string& config_path);

// The fingerprint check of `p` against this machine.
void CheckFingerprint(ResolvedProfile* p);

// One line for a user: "profile <origin> (measured on this machine)" or "... measured on another
// machine: <field>: ... here, ... in the profile; ..." or "... (no fingerprint: ...)".
std::string ProfileProvenance(const ResolvedProfile& p);

}  // namespace tessera
