// Command-line helpers shared by the binaries: repeated `--set key=value` overrides are taken
// out of argv before Abseil parses the rest (Abseil's vector flags split on commas, which YAML
// lists like [64,16] contain).
#pragma once

#include <string>
#include <vector>

namespace tessera {

// Removes every `--set X` / `--set=X` from argv (updating argc) and returns the X values.
inline std::vector<std::string> ExtractOverrides(int* argc, char** argv) {
  std::vector<std::string> out;
  int w = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string a = argv[i];
    if (a == "--set" && i + 1 < *argc) {
      out.push_back(argv[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      out.push_back(a.substr(6));
    } else {
      argv[w++] = argv[i];
    }
  }
  *argc = w;
  argv[w] = nullptr;
  return out;
}

}  // namespace tessera
