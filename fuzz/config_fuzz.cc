// The YAML config with --set overrides. The input is split at NUL bytes: the first piece is the
// config file's text, each later piece one "dotted.key=value" override. A config that parses is
// also written back (ConfigToYaml), parsed again (it must give the same config: a difference
// aborts), and checked against the memory estimate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "trainer/config.h"
#include "trainer/internal/memory_check.h"
#include "trainer/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    size_t nul = in.find('\0', start);
    pieces.emplace_back(in.substr(start, nul == std::string_view::npos ? nul : nul - start));
    if (nul == std::string_view::npos || pieces.size() > 16) break;
    start = nul + 1;
  }
  const std::string yaml = pieces[0];
  pieces.erase(pieces.begin());
  // A folder that does not exist: relative data paths resolve there and are never found.
  const std::string source = "/nonexistent-tessera-fuzz/config.yaml";
  absl::StatusOr<Config> c = ParseConfig(yaml, source, pieces);
  if (!c.ok()) {
    fuzz::CheckMessage(c.status());
    return 0;
  }
  // ConfigToYaml's contract: what it writes parses back to the same config.
  const std::string yaml_out = ConfigToYaml(*c);
  absl::StatusOr<Config> again = ParseConfig(yaml_out, source);
  if (!again.ok() || ConfigToYaml(*again) != yaml_out) {
    std::fprintf(stderr, "ConfigToYaml does not round-trip: %s\n%s\n",
                 again.ok() ? "different config" : again.status().ToString().c_str(),
                 yaml_out.c_str());
    std::abort();
  }
  internal::HostMemory limit;
  limit.bytes = int64_t{1} << 30;
  limit.source = "fuzz";
  absl::Status fits = internal::CheckDenseMemory(*c, DenseOptionsFromConfig(*c), limit);
  if (!fits.ok()) fuzz::CheckMessage(fits);
  absl::Status input_fits = internal::CheckInputMemory(*c, limit);
  if (!input_fits.ok()) fuzz::CheckMessage(input_fits);
  return 0;
}
