// The sharding plan file (YAML) against a fixed model of three tables. The first byte picks the
// sharding group's size (1..8); the rest is the plan's text.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sharding/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 1) return 0;
  static const std::vector<TableConfig> tables = [] {
    std::vector<TableConfig> t(3);
    t[0].name = "t0", t[0].num_rows = 100, t[0].dim = 16, t[0].features = {0};
    t[1].name = "t1", t[1].num_rows = 7, t[1].dim = 8, t[1].features = {1, 2};
    t[2].name = "big", t[2].num_rows = int64_t{1} << 40, t[2].dim = 128, t[2].features = {3};
    return t;
  }();
  const int group = 1 + data[0] % 8;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<ShardingPlan> plan = ParseShardingPlan(text, "plan.yaml", tables, group);
  if (!plan.ok()) fuzz::CheckMessage(plan.status());
  return 0;
}
