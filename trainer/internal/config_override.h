// One command-line override ("model.tables[0].rows=10", tessera-train --set) applied to a
// config's YAML tree before ParseConfig (trainer/config.h) reads it.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {

// Applies one "a.b.c=value" override to the tree (a list entry as "a.b[0].c" or "a.b.0.c"; an
// absent section is created). `key_out` gets the key in message form ("model.tables[0].rows")
// so later errors about it can name the override. Errors name `source` and the override.
absl::Status ApplyConfigOverride(const std::string& source, const std::string& text,
                                 YAML::Node* root, std::string* key_out);

}  // namespace tessera::internal
