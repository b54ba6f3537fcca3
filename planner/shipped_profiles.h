// The machine profiles shipped in planner/profiles/ (compiled in by planner/CMakeLists.txt):
// (name, YAML text) pairs, name = the file name without .yaml ("cpu_default", "h200_cluster").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera::planner {

const std::vector<std::pair<std::string, std::string>>& ShippedProfiles();

}  // namespace tessera::planner
