// The `dynamic` block of a table in ParseConfig (trainer/config.h):
//   model.tables[i].dynamic: {capacity_rows, admission: {min_count | probability, counter_slots},
//                             eviction: {policy: none | lfu | lru | ttl, ttl_steps}}
// (embedding/dynamic_table_config.h says what each does). A dynamic table has no `rows`: its
// capacity is dynamic.capacity_rows, which becomes the table's num_rows. Errors are
// ConfigReader's located InvalidArgument naming the key.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/table_config.h"
#include "trainer/config.h"
#include "trainer/internal/config_reader.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {

// Schema sections "model.tables[].dynamic", ".admission" and ".eviction".
const std::vector<SchemaSection>& DynamicSchema();

// Reads entry["dynamic"] of the table at `table_path` ("model.tables[2]") into t->dynamic and
// t->num_rows (the capacity). Absent: nothing changes. Rules: capacity_rows required (> 0) and
// `rows` absent; at most one of admission.min_count (in [1, 65535]) and admission.probability
// (in (0, 1]); counter_slots >= 0 and only with min_count > 1; eviction.policy ttl needs
// ttl_steps > 0, and ttl_steps needs policy ttl.
absl::Status ParseTableDynamic(const ConfigReader& r, const YAML::Node& entry,
                               const std::string& table_path, TableConfig* t);

// Whole-config rules of dynamic tables, once the config is read: no device cache, device cpu
// (the RocksDB tier and several ranks are allowed; sharding/ refuses a tiered one on several
// ranks). The error names the table's key and why.
absl::Status ValidateDynamicTables(const ConfigReader& r, const YAML::Node& root,
                                   const Config& c);

// Writes t.dynamic as a flow map under the key "dynamic" when the table is dynamic (the
// emitter's half of the round trip).
void EmitTableDynamic(YAML::Emitter& e, const TableConfig& t);

}  // namespace tessera::internal
