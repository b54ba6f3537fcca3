// The resident set size of this process, for the benchmarks that watch memory over a run.
#pragma once

#include <cstdio>

namespace tessera::bench {

// Resident set size in MiB (/proc/self/statm's second field, 4 KiB pages); 0 where unreadable.
inline double RssMib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

}  // namespace tessera::bench
