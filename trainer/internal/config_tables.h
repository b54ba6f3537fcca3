// The tables of a config (model.tables, or model.table_rows with per-table overrides), read by
// ParseConfig (trainer/config.h) once the model's defaults (embedding_dim, embedding_dtype,
// embedding_rounding, embedding_output_dtype) are read.
#pragma once

#include "absl/status/status.h"
#include "trainer/config.h"
#include "trainer/internal/config_reader.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {

// Reads model["tables"] (a list) or model["table_rows"] (a list of row counts or a preset, with
// model.tables as a map of overrides: storage, init, output_dtype by index or name) into
// m->tables. Errors name the key: a duplicate or badly formed name, a feature out of range, a
// bf16 output for a 32-bit table, both forms at once, neither.
absl::Status ParseTables(const ConfigReader& r, const YAML::Node& model, ModelConfig* m);

}  // namespace tessera::internal
