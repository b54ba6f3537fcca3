// The profile file's optional `fingerprint` and `calibration` blocks (profile_meta.h), read and
// written for profile.cc. Private to planner/.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "planner/profile_meta.h"
#include "yaml-cpp/yaml.h"

namespace tessera::planner::profile_internal {

// Strict as the rest of the file: every key of the block known, values of their types;
// InvalidArgument "<source>:<line>: fingerprint.<key>: ..." otherwise.
absl::Status ReadFingerprint(const YAML::Node& n, const std::string& source, MachineFingerprint* f);
absl::Status ReadCalibration(const YAML::Node& n, const std::string& source, CalibrationRecord* c);
void EmitFingerprint(YAML::Emitter& e, const MachineFingerprint& f);
void EmitCalibration(YAML::Emitter& e, const CalibrationRecord& c);

}  // namespace tessera::planner::profile_internal
