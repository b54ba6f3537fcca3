// Plan validation, the YAML reader/writer and the default planner.
#include "sharding/plan.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/escape.h"
#include "core/status.h"
#include "yaml-cpp/yaml.h"

namespace tessera {

namespace {

struct TypeName {
  ShardingType type;
  const char* name;
};
constexpr TypeName kTypeNames[] = {
    {ShardingType::kDataParallel, "data_parallel"}, {ShardingType::kTableWise, "table_wise"},
    {ShardingType::kRowWise, "row_wise"},           {ShardingType::kColumnWise, "column_wise"},
    {ShardingType::kTableRowWise, "table_row_wise"}, {ShardingType::kGrid, "grid"}};

std::string ShardName(const TablePlan& t, size_t i) {
  const Shard& s = t.shards[i];
  return absl::StrCat("table '", t.table, "' shard ", i,
                      s.line > 0 ? absl::StrCat(" (line ", s.line, ")") : std::string());
}

std::string Range(int64_t b, int64_t e) { return absl::StrCat("[", b, ", ", e, ")"); }

// A cell no shard covers, if any. An uncovered region's lowest (row, col) corner lies at row 0
// or some shard's row_end, and at column 0 or some shard's col_end, so checking those candidate
// points is enough.
bool FindUncovered(const std::vector<Shard>& shards, int64_t rows, int64_t cols, int64_t* r,
                   int64_t* c) {
  std::vector<int64_t> rs{0}, cs{0};
  for (const Shard& s : shards) {
    if (s.row_end < rows) rs.push_back(s.row_end);
    if (s.col_end < cols) cs.push_back(s.col_end);
  }
  for (int64_t rr : rs) {
    for (int64_t cc : cs) {
      bool covered = false;
      for (const Shard& s : shards) {
        if (rr >= s.row_begin && rr < s.row_end && cc >= s.col_begin && cc < s.col_end) {
          covered = true;
          break;
        }
      }
      if (!covered) {
        *r = rr;
        *c = cc;
        return true;
      }
    }
  }
  return false;
}

absl::Status ValidateTable(const TablePlan& t, const TableConfig& cfg, int n,
                           const std::string& where) {
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(where, msg));
  };
  const char* type = ShardingTypeName(t.type);
  if (t.storage.set && t.storage.tier == StorageTier::kRocksDb) {
    if (t.type == ShardingType::kDataParallel) {
      return err(absl::StrCat("table '", t.table,
                              "': storage rocksdb cannot be data_parallel (every rank would need "
                              "its own database of the whole table)"));
    }
    if (t.storage.cache_rows <= 0) {
      return err(absl::StrCat("table '", t.table, "': storage rocksdb needs cache_rows > 0 (got ",
                              t.storage.cache_rows, ")"));
    }
  }
  if (t.type == ShardingType::kDataParallel) {
    if (!t.shards.empty()) {
      return err(absl::StrCat("table '", t.table, "' is data_parallel and takes no shards (got ",
                              t.shards.size(), ")"));
    }
    return absl::OkStatus();
  }
  if (t.shards.empty()) {
    return err(absl::StrCat("table '", t.table, "' (", type, ") has no shards"));
  }
  if (t.type == ShardingType::kTableWise && t.shards.size() != 1) {
    return err(absl::StrCat("table '", t.table, "' is table_wise and needs exactly one shard, got ",
                            t.shards.size()));
  }
  for (size_t i = 0; i < t.shards.size(); ++i) {
    const Shard& s = t.shards[i];
    if (s.rank < 0 || s.rank >= n) {
      return err(absl::StrCat(ShardName(t, i), ": rank ", s.rank,
                              " is outside the sharding group [0, ", n, ")"));
    }
    if (s.row_begin < 0 || s.row_end > cfg.num_rows || s.row_begin >= s.row_end) {
      return err(absl::StrCat(ShardName(t, i), ": rows ", Range(s.row_begin, s.row_end),
                              " is empty or outside the table's rows ", Range(0, cfg.num_rows)));
    }
    if (s.col_begin < 0 || s.col_end > cfg.dim || s.col_begin >= s.col_end) {
      return err(absl::StrCat(ShardName(t, i), ": cols ", Range(s.col_begin, s.col_end),
                              " is empty or outside the table's columns ", Range(0, cfg.dim)));
    }
    bool full_rows = s.row_begin == 0 && s.row_end == cfg.num_rows;
    bool full_cols = s.col_begin == 0 && s.col_end == cfg.dim;
    bool rowish = t.type == ShardingType::kRowWise || t.type == ShardingType::kTableRowWise ||
                  t.type == ShardingType::kTableWise;
    if (rowish && !full_cols) {
      return err(absl::StrCat(ShardName(t, i), ": a ", type, " shard spans all columns ",
                              Range(0, cfg.dim), ", got cols ", Range(s.col_begin, s.col_end)));
    }
    if ((t.type == ShardingType::kColumnWise || t.type == ShardingType::kTableWise) &&
        !full_rows) {
      return err(absl::StrCat(ShardName(t, i), ": a ", type, " shard spans all rows ",
                              Range(0, cfg.num_rows), ", got rows ",
                              Range(s.row_begin, s.row_end)));
    }
  }
  for (size_t i = 0; i < t.shards.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const Shard& a = t.shards[i];
      const Shard& b = t.shards[j];
      if (a.row_begin < b.row_end && b.row_begin < a.row_end && a.col_begin < b.col_end &&
          b.col_begin < a.col_end) {
        return err(absl::StrCat(ShardName(t, i), " (rows ", Range(a.row_begin, a.row_end),
                                ", cols ", Range(a.col_begin, a.col_end), ") overlaps shard ", j,
                                " (rows ", Range(b.row_begin, b.row_end), ", cols ",
                                Range(b.col_begin, b.col_end), ")"));
      }
    }
  }
  int64_t r = 0, c = 0;
  if (FindUncovered(t.shards, cfg.num_rows, cfg.dim, &r, &c)) {
    return err(absl::StrCat("table '", t.table, "' (", type, "): row ", r, ", column ", c,
                            " is not covered by any shard (shards must tile rows ",
                            Range(0, cfg.num_rows), " x columns ", Range(0, cfg.dim), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ShardingTypeName(ShardingType type) {
  for (const auto& tn : kTypeNames) {
    if (tn.type == type) return tn.name;
  }
  return "?";
}

absl::StatusOr<ShardingType> ParseShardingType(const std::string& name) {
  for (const auto& tn : kTypeNames) {
    if (name == tn.name) return tn.type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sharding type '", name,
      "' (expected data_parallel, table_wise, row_wise, column_wise, table_row_wise or grid)"));
}

absl::StatusOr<ShardingPlan> ValidateShardingPlan(ShardingPlan plan,
                                                  const std::vector<TableConfig>& tables,
                                                  int group_size, const std::string& source) {
  const std::string where = source.empty() ? std::string() : absl::StrCat(source, ": ");
  if (group_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "group size must be positive, got ",
                                                   group_size));
  }
  if (plan.group_size != 0 && plan.group_size != group_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "the plan is for group_size ", plan.group_size, " but the sharding group has ",
        group_size, " ranks"));
  }
  std::map<std::string, int> index;
  for (size_t t = 0; t < tables.size(); ++t) index[tables[t].name] = static_cast<int>(t);
  std::vector<int> seen(tables.size(), -1);
  for (size_t i = 0; i < plan.tables.size(); ++i) {
    const TablePlan& tp = plan.tables[i];
    auto it = index.find(tp.table);
    std::string line = tp.line > 0 ? absl::StrCat(" (line ", tp.line, ")") : std::string();
    if (it == index.end()) {
      std::string known;
      for (const auto& cfg : tables) absl::StrAppend(&known, known.empty() ? "" : ", ", cfg.name);
      return absl::InvalidArgumentError(absl::StrCat(where, "table '", EscapeBytes(tp.table), "'", line,
                                                     " does not exist in the model (tables: ",
                                                     known, ")"));
    }
    if (seen[it->second] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "table '", tp.table, "'", line, " is listed twice"));
    }
    seen[it->second] = static_cast<int>(i);
    if (tables[it->second].dynamic.enabled && tp.type == ShardingType::kDataParallel) {
      // Every replica would admit the keys of its own batch (sharding/key_routing.h).
      return absl::InvalidArgumentError(absl::StrCat(
          where, "table '", tp.table, "'", line, " is dynamic (model.tables[].dynamic): "
          "sharding type data_parallel cannot hold it; use table_wise, row_wise, "
          "table_row_wise, column_wise or grid"));
    }
    TESSERA_RETURN_IF_ERROR(ValidateTable(tp, tables[it->second], group_size, where));
  }
  ShardingPlan out;
  out.group_size = group_size;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (seen[t] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "model table '", tables[t].name, "' has no entry in the plan"));
    }
    TablePlan tp = std::move(plan.tables[seen[t]]);
    std::stable_sort(tp.shards.begin(), tp.shards.end(), [](const Shard& a, const Shard& b) {
      return a.col_begin != b.col_begin ? a.col_begin < b.col_begin : a.row_begin < b.row_begin;
    });
    out.tables.push_back(std::move(tp));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// YAML

namespace {

absl::Status YamlError(const std::string& source, const YAML::Node& node, const std::string& msg) {
  // The message quotes the file's bytes: escaped, so no control byte reaches the terminal.
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", node.Mark().line + 1, ": ", EscapeBytes(msg, 400)));
}

template <typename T>
absl::StatusOr<T> As(const std::string& source, const YAML::Node& node, const std::string& key) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    return YamlError(source, node, absl::StrCat("'", key, "': bad value '",
                                                node.IsScalar() ? node.Scalar() : "<non-scalar>",
                                                "'"));
  }
}

absl::Status ReadRange(const std::string& source, const YAML::Node& node, const std::string& key,
                       int64_t* begin, int64_t* end) {
  if (!node.IsSequence() || node.size() != 2) {
    return YamlError(source, node, absl::StrCat("'", key, "' must be [begin, end)"));
  }
  TESSERA_ASSIGN_OR_RETURN(*begin, As<int64_t>(source, node[0], key));
  TESSERA_ASSIGN_OR_RETURN(*end, As<int64_t>(source, node[1], key));
  return absl::OkStatus();
}

absl::StatusOr<ShardingPlan> ParsePlanNode(const YAML::Node& root, const std::string& source,
                                           const std::vector<TableConfig>& tables) {
  ShardingPlan plan;
  if (!root.IsMap()) return YamlError(source, root, "a sharding plan is a map with 'tables'");
  for (const auto& kv : root) {
    TESSERA_ASSIGN_OR_RETURN(std::string key, As<std::string>(source, kv.first, "key"));
    if (key == "group_size") {
      TESSERA_ASSIGN_OR_RETURN(plan.group_size, As<int>(source, kv.second, key));
    } else if (key != "tables") {
      return YamlError(source, kv.first, absl::StrCat("unknown key '", key,
                                                      "' (expected group_size, tables)"));
    }
  }
  YAML::Node list = root["tables"];
  if (!list || !list.IsSequence()) return YamlError(source, root, "'tables' must be a list");
  for (const YAML::Node& tn : list) {
    if (!tn.IsMap()) return YamlError(source, tn, "each table is a map");
    TablePlan tp;
    tp.line = tn.Mark().line + 1;
    bool has_type = false;
    for (const auto& kv : tn) {
      TESSERA_ASSIGN_OR_RETURN(std::string key, As<std::string>(source, kv.first, "key"));
      if (key == "name") {
        TESSERA_ASSIGN_OR_RETURN(tp.table, As<std::string>(source, kv.second, key));
      } else if (key == "type") {
        TESSERA_ASSIGN_OR_RETURN(std::string type, As<std::string>(source, kv.second, key));
        auto parsed = ParseShardingType(type);
        if (!parsed.ok()) return YamlError(source, kv.second, std::string(parsed.status().message()));
        tp.type = *parsed;
        has_type = true;
      } else if (key == "storage") {
        TESSERA_ASSIGN_OR_RETURN(std::string tier, As<std::string>(source, kv.second, key));
        if (tier == "memory") {
          tp.storage.tier = StorageTier::kMemory;
        } else if (tier == "rocksdb") {
          tp.storage.tier = StorageTier::kRocksDb;
        } else {
          return YamlError(source, kv.second, absl::StrCat("'storage': bad value '", tier,
                                                           "' (expected memory, rocksdb)"));
        }
        tp.storage.set = true;
      } else if (key == "cache_rows") {
        TESSERA_ASSIGN_OR_RETURN(tp.storage.cache_rows, As<int64_t>(source, kv.second, key));
      } else if (key != "shards") {
        return YamlError(source, kv.first,
                         absl::StrCat("unknown table key '", key,
                                      "' (expected name, type, storage, cache_rows, shards)"));
      }
    }
    if (tp.table.empty()) return YamlError(source, tn, "table without 'name'");
    if (!has_type) return YamlError(source, tn, absl::StrCat("table '", tp.table, "' has no 'type'"));
    const TableConfig* cfg = nullptr;
    for (const auto& c : tables) {
      if (c.name == tp.table) cfg = &c;
    }
    if (YAML::Node shards = tn["shards"]) {
      if (!shards.IsSequence()) return YamlError(source, shards, "'shards' must be a list");
      for (const YAML::Node& sn : shards) {
        if (!sn.IsMap()) return YamlError(source, sn, "each shard is a map");
        Shard s;
        s.line = sn.Mark().line + 1;
        // Omitted ranges mean the whole extent; an unknown table keeps 0 and fails validation
        // by name.
        s.row_end = cfg ? cfg->num_rows : 0;
        s.col_end = cfg ? cfg->dim : 0;
        bool has_rank = false;
        for (const auto& kv : sn) {
          TESSERA_ASSIGN_OR_RETURN(std::string key, As<std::string>(source, kv.first, "key"));
          if (key == "rank") {
            TESSERA_ASSIGN_OR_RETURN(s.rank, As<int>(source, kv.second, key));
            has_rank = true;
          } else if (key == "rows") {
            TESSERA_RETURN_IF_ERROR(ReadRange(source, kv.second, key, &s.row_begin, &s.row_end));
          } else if (key == "cols") {
            TESSERA_RETURN_IF_ERROR(ReadRange(source, kv.second, key, &s.col_begin, &s.col_end));
          } else {
            return YamlError(source, kv.first, absl::StrCat("unknown shard key '", key,
                                                            "' (expected rank, rows, cols)"));
          }
        }
        if (!has_rank) {
          return YamlError(source, sn, absl::StrCat("a shard of table '", tp.table,
                                                    "' has no 'rank'"));
        }
        tp.shards.push_back(s);
      }
    }
    plan.tables.push_back(std::move(tp));
  }
  return plan;
}

}  // namespace

absl::StatusOr<ShardingPlan> ParseShardingPlan(const std::string& yaml_text,
                                               const std::string& source,
                                               const std::vector<TableConfig>& tables,
                                               int group_size) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": YAML syntax error: ",
                     EscapeBytes(e.msg, 200)));
  }
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, ParsePlanNode(root, source, tables));
  return ValidateShardingPlan(std::move(plan), tables, group_size, source);
}

absl::StatusOr<ShardingPlan> LoadShardingPlan(const std::string& path,
                                              const std::vector<TableConfig>& tables,
                                              int group_size) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read sharding plan '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseShardingPlan(text.str(), path, tables, group_size);
}

std::string ShardingPlanToYaml(const ShardingPlan& plan) {
  std::ostringstream o;
  if (plan.group_size > 0) o << "group_size: " << plan.group_size << "\n";
  o << "tables:\n";
  for (const TablePlan& t : plan.tables) {
    o << "  - name: " << t.table << "\n    type: " << ShardingTypeName(t.type) << "\n";
    if (t.storage.set) {
      o << "    storage: " << (t.storage.tier == StorageTier::kRocksDb ? "rocksdb" : "memory")
        << "\n";
      if (t.storage.tier == StorageTier::kRocksDb) {
        o << "    cache_rows: " << t.storage.cache_rows << "\n";
      }
    }
    if (t.shards.empty()) continue;
    o << "    shards:\n";
    for (const Shard& s : t.shards) {
      o << "      - {rank: " << s.rank << ", rows: [" << s.row_begin << ", " << s.row_end
        << "], cols: [" << s.col_begin << ", " << s.col_end << "]}\n";
    }
  }
  return o.str();
}

absl::StatusOr<int> ReadPlanGroupSize(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read plan file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(ss.str());
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ": YAML syntax error: ",
                     EscapeBytes(e.msg, 200)));
  }
  if (!root.IsMap() || !root["group_size"]) return 0;
  TESSERA_ASSIGN_OR_RETURN(int n, As<int>(path, root["group_size"], "group_size"));
  if (n < 0) return YamlError(path, root["group_size"], "'group_size' must be >= 0");
  return n;
}

// ---------------------------------------------------------------------------------------------
// Default plan

ShardingPlan DefaultShardingPlan(const std::vector<TableConfig>& tables, int group_size) {
  const int n = std::max(group_size, 1);
  int64_t total = 0;
  for (const auto& t : tables) total += t.num_rows * t.dim;
  const int64_t fair = std::max<int64_t>(1, (total + n - 1) / n);

  struct Piece {
    int table;
    int64_t row_begin, row_end, size;
  };
  std::vector<Piece> pieces;
  std::vector<int> split(tables.size(), 1);
  for (size_t t = 0; t < tables.size(); ++t) {
    const int64_t size = tables[t].num_rows * tables[t].dim;
    int64_t k = std::min<int64_t>({n, tables[t].num_rows, (size + fair - 1) / fair});
    k = std::max<int64_t>(k, 1);
    split[t] = static_cast<int>(k);
    for (int64_t i = 0; i < k; ++i) {
      int64_t b = tables[t].num_rows * i / k, e = tables[t].num_rows * (i + 1) / k;
      pieces.push_back({static_cast<int>(t), b, e, (e - b) * tables[t].dim});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.size > b.size; });
  std::vector<int64_t> load(n, 0);
  std::vector<std::set<int>> holds(tables.size());
  ShardingPlan plan;
  plan.group_size = n;
  plan.tables.resize(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    plan.tables[t].table = tables[t].name;
    plan.tables[t].type = split[t] > 1 ? ShardingType::kRowWise : ShardingType::kTableWise;
  }
  for (const Piece& p : pieces) {
    int best = -1;
    for (int r = 0; r < n; ++r) {
      if (holds[p.table].count(r)) continue;
      if (best < 0 || load[r] < load[best]) best = r;
    }
    load[best] += p.size;
    holds[p.table].insert(best);
    Shard s;
    s.row_begin = p.row_begin;
    s.row_end = p.row_end;
    s.col_begin = 0;
    s.col_end = tables[p.table].dim;
    s.rank = best;
    plan.tables[p.table].shards.push_back(s);
  }
  for (auto& tp : plan.tables) {
    std::sort(tp.shards.begin(), tp.shards.end(),
              [](const Shard& a, const Shard& b) { return a.row_begin < b.row_begin; });
  }
  return plan;
}

std::vector<int64_t> PlanLoadPerRank(const ShardingPlan& plan,
                                     const std::vector<TableConfig>& tables, int group_size) {
  std::vector<int64_t> load(std::max(group_size, 1), 0);
  for (size_t t = 0; t < plan.tables.size() && t < tables.size(); ++t) {
    if (plan.tables[t].type == ShardingType::kDataParallel) {
      for (auto& l : load) l += tables[t].num_rows * tables[t].dim;
      continue;
    }
    for (const Shard& s : plan.tables[t].shards) {
      if (s.rank >= 0 && s.rank < static_cast<int>(load.size())) {
        load[s.rank] += s.num_rows() * s.num_cols();
      }
    }
  }
  return load;
}

}  // namespace tessera
