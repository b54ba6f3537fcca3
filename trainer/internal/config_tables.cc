// model.tables / model.table_rows of ParseConfig (trainer/config.h): the tables' names, rows,
// dims, features, init, storage, dynamic block and output_dtype, with table_rows presets and
// per-table overrides. Errors are ConfigReader's located InvalidArgument naming the key.
#include "trainer/internal/config_tables.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "trainer/internal/config_dynamic.h"
#include "trainer/internal/config_storage.h"
#include "trainer/presets.h"

namespace tessera::internal {
namespace {

const auto kPositive = [](int64_t v) { return v > 0; };

// Table names become tensor names (embedding.<name>.weight), so keep them plain.
bool ValidTableName(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// A table's init: {type, scale}.
absl::Status ParseTableInit(const ConfigReader& r, const YAML::Node& entry, const std::string& path,
                            TableConfig* t) {
  YAML::Node init = Child(entry, "init");
  TESSERA_RETURN_IF_ERROR(r.CheckMap(init, entry, path + ".init", "model.tables[].init"));
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(init, path + ".init", "type", kRowInitTypeNames, &t->init.type));
  double scale = t->init.scale;
  TESSERA_RETURN_IF_ERROR(r.ReadDouble(
      init, path + ".init", "scale", "a positive number", [](double v) { return v > 0; }, &scale));
  t->init.scale = static_cast<float>(scale);
  return absl::OkStatus();
}

// model.tables as a map beside model.table_rows: {<index or name>: {storage: ..., init: ...}}
// changes those keys of the tables table_rows made.
// A table's output_dtype (FBGEMM's output_dtype): fp32, or bf16 for a 16-bit table. `key` is the
// key that set it (the table's own output_dtype, or model.embedding_output_dtype), named in the
// error with `node` (where it is) and `parent`.
absl::Status CheckOutputDtype(const ConfigReader& r, const YAML::Node& node,
                              const YAML::Node& parent, const std::string& key,
                              const TableConfig& t) {
  if (t.output_dtype == RowDtype::kF32) return absl::OkStatus();
  if (t.output_dtype == RowDtype::kF16)
    return r.Error(node, parent, key, "fp16 pooled outputs are not supported (fp32 or bf16)");
  if (t.storage.dtype != RowDtype::kF32) return absl::OkStatus();
  return r.Error(node, parent, key,
                 absl::StrCat("bf16 pooled outputs need a 16-bit table, but table '", t.name,
                              "' has storage.dtype fp32 (set its storage.dtype or "
                              "model.embedding_dtype to fp16 or bf16, or this key to fp32)"));
}

// Reads a table's own output_dtype (default: the model's) and checks it.
absl::Status ReadOutputDtype(const ConfigReader& r, const YAML::Node& model,
                             const YAML::Node& entry, const std::string& path, TableConfig* t) {
  TESSERA_RETURN_IF_ERROR(
      r.ReadEnum(entry, path, "output_dtype", kRowDtypeNames, &t->output_dtype));
  YAML::Node own = Child(entry, "output_dtype");
  if (own.IsDefined() && !own.IsNull())
    return CheckOutputDtype(r, own, entry, path + ".output_dtype", *t);
  return CheckOutputDtype(r, Child(model, "embedding_output_dtype"), model,
                          "model.embedding_output_dtype", *t);
}

absl::Status ParseTableOverrides(const ConfigReader& r, const YAML::Node& model,
                                 const YAML::Node& tables, ModelConfig* m) {
  for (const auto& kv : tables) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    size_t i = 0;
    if (!absl::SimpleAtoi(key, &i)) {
      for (i = 0; i < m->tables.size() && m->tables[i].name != key; ++i) {
      }
    }
    const std::string path = absl::StrCat("model.tables.", key);
    if (i >= m->tables.size())
      return r.Error(kv.first, tables, path,
                     absl::StrCat("model.table_rows makes ", m->tables.size(), " tables (t0..t",
                                  m->tables.size() - 1, "): expected one's index or name"));
    const YAML::Node entry = kv.second;
    TESSERA_RETURN_IF_ERROR(r.CheckMap(entry, tables, path, "model.tables[]"));
    for (const auto& field : entry) {
      const std::string f = field.first.Scalar();
      if (f != "storage" && f != "init" && f != "output_dtype")
        return r.Error(field.first, entry, path + "." + f,
                       "a table of model.table_rows takes only storage, init and output_dtype "
                       "here (its rows, dim and features come from table_rows)");
    }
    TableConfig& t = m->tables[i];
    TESSERA_RETURN_IF_ERROR(ParseTableInit(r, entry, path, &t));
    TESSERA_RETURN_IF_ERROR(ParseTableStorage(r, entry, path, &t.storage));
    TESSERA_RETURN_IF_ERROR(ReadOutputDtype(r, model, entry, path, &t));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseTables(const ConfigReader& r, const YAML::Node& model, ModelConfig* m) {
  YAML::Node tables = Child(model, "tables");
  YAML::Node rows = Child(model, "table_rows");
  const bool have_tables = tables.IsDefined() && !tables.IsNull();
  const bool have_rows = rows.IsDefined() && !rows.IsNull();
  // With table_rows, `tables` may be a map of per-table overrides keyed by index or name
  // ({3: {storage: ...}}, what --set model.tables.3.storage.tier=rocksdb makes): read below.
  if (have_tables && have_rows && !tables.IsMap())
    return r.Error(YAML::Node(), rows, "model.table_rows",
                   "give either model.tables (a list) or model.table_rows, not both; to change "
                   "one table of table_rows, give model.tables.<index>.storage (e.g. --set "
                   "model.tables.3.storage.tier=rocksdb)");
  if (!have_tables && !have_rows)
    return r.Error(YAML::Node(), model, "model.tables",
                   "required (a list of tables, or model.table_rows)");
  m->tables.clear();
  if (have_rows) {
    std::vector<int64_t> counts;
    if (rows.IsScalar() && !absl::ascii_isdigit(static_cast<unsigned char>(rows.Scalar()[0]))) {
      auto preset = TableRowsPreset(rows.Scalar());
      if (!preset)
        return r.Error(rows, model, "model.table_rows",
                       "expected a list of positive integers or a preset: criteo_kaggle, "
                       "criteo_1tb_mlperf");
      counts = *preset;
    } else {
      TESSERA_RETURN_IF_ERROR(r.ReadIntList(model, "model", "table_rows", "a positive integer",
                                            kPositive, false, &counts));
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      TableConfig t;
      t.name = absl::StrCat("t", i);
      t.num_rows = counts[i];
      t.dim = m->embedding_dim;
      t.features = {static_cast<int>(i)};
      t.storage.dtype = m->embedding_dtype;
      t.storage.rounding = m->embedding_rounding;
      t.output_dtype = m->embedding_output_dtype;
      m->tables.push_back(std::move(t));
    }
    if (have_tables) TESSERA_RETURN_IF_ERROR(ParseTableOverrides(r, model, tables, m));
    // The tables no override named take the model's output_dtype (checked here).
    for (const TableConfig& t : m->tables) {
      TESSERA_RETURN_IF_ERROR(CheckOutputDtype(r, Child(model, "embedding_output_dtype"), model,
                                               "model.embedding_output_dtype", t));
    }
    return absl::OkStatus();
  }
  if (!tables.IsSequence() || tables.size() == 0)
    return r.Error(tables, model, "model.tables", "expected a non-empty list of tables");
  for (size_t i = 0; i < tables.size(); ++i) {
    const YAML::Node entry = tables[i];
    const std::string path = absl::StrCat("model.tables[", i, "]");
    TESSERA_RETURN_IF_ERROR(r.CheckMap(entry, tables, path, "model.tables[]"));
    if (!entry.IsMap()) return r.Error(entry, tables, path, "expected a map {name, rows, ...}");
    TableConfig t;
    t.name = absl::StrCat("t", i);
    t.dim = m->embedding_dim;
    t.num_rows = -1;
    t.storage.dtype = m->embedding_dtype;  // storage.dtype / rounding override these
    t.storage.rounding = m->embedding_rounding;
    t.output_dtype = m->embedding_output_dtype;  // and output_dtype this
    TESSERA_RETURN_IF_ERROR(r.ReadString(entry, path, "name", &t.name));
    if (!ValidTableName(t.name))
      return r.Error(Child(entry, "name"), entry, path + ".name",
                     "expected letters, digits and '_' only (it becomes the tensor name "
                     "embedding.<name>.weight)");
    TESSERA_RETURN_IF_ERROR(
        r.ReadInt(entry, path, "rows", "a positive integer", kPositive, &t.num_rows));
    TESSERA_RETURN_IF_ERROR(ParseTableDynamic(r, entry, path, &t));
    if (t.num_rows < 0) return r.Error(YAML::Node(), entry, path + ".rows", "required");
    TESSERA_RETURN_IF_ERROR(r.ReadInt(entry, path, "dim", "a positive integer", kPositive, &t.dim));
    TESSERA_RETURN_IF_ERROR(r.ReadEnum(entry, path, "pooling", kPoolingModeNames, &t.pooling));
    std::vector<int64_t> features = {static_cast<int64_t>(i)};
    TESSERA_RETURN_IF_ERROR(r.ReadIntList(
        entry, path, "features", "a feature index in [0, 65536)",
        [](int64_t v) { return v >= 0 && v < 65536; }, false, &features));
    t.features.assign(features.begin(), features.end());
    TESSERA_RETURN_IF_ERROR(ParseTableInit(r, entry, path, &t));
    TESSERA_RETURN_IF_ERROR(ParseTableStorage(r, entry, path, &t.storage));
    TESSERA_RETURN_IF_ERROR(ReadOutputDtype(r, model, entry, path, &t));
    for (size_t j = 0; j < i; ++j) {
      if (m->tables[j].name == t.name)
        return r.Error(Child(entry, "name"), entry, path + ".name",
                       absl::StrCat("duplicate table name (also model.tables[", j, "])"));
    }
    m->tables.push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
