// The machine profiles shipped in planner/profiles/ (compiled in by planner/CMakeLists.txt):
// (name, YAML text) pairs, name = the file name without .yaml ("cpu_default", "h200_cluster").
// A file may be a symbolic link to another (cpu_2core_measured -> cpu_2core_zen4.yaml): an alias
// with the same text.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera::planner {

const std::vector<std::pair<std::string, std::string>>& ShippedProfiles();

}  // namespace tessera::planner
