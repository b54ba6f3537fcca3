#include "trainer/internal/config_reader.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/escape.h"

namespace tessera::internal {
namespace {

// 1-based line of `node`, or 0 when it has none (absent, or built from an override string).
int LineOf(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  YAML::Mark m = node.Mark();
  return m.is_null() ? 0 : m.line + 1;
}

// The value as the user wrote it, short enough for a message.
std::string Render(const YAML::Node& node) {
  std::string s;
  if (node.IsScalar()) {
    s = node.Scalar();
  } else {
    YAML::Emitter e;
    e.SetMapFormat(YAML::Flow);
    e.SetSeqFormat(YAML::Flow);
    e << node;
    s = e.c_str();
  }
  // Escaped: a config may carry control bytes, which must not reach the terminal.
  return EscapeBytes(s, s.size() > 80 ? 77 : 80);
}

}  // namespace

YAML::Node Child(const YAML::Node& map, const char* key) {
  if (!map.IsDefined() || !map.IsMap()) return YAML::Node();
  YAML::Node n = map[key];
  return n.IsDefined() ? n : YAML::Node();
}

std::string JoinKey(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

ConfigReader::ConfigReader(std::string source,
                           std::vector<std::pair<std::string, std::string>> overrides,
                           std::vector<SchemaSection> schema)
    : source_(std::move(source)), overrides_(std::move(overrides)), schema_(std::move(schema)) {}

const std::pair<std::string, std::string>* ConfigReader::OverrideFor(
    const std::string& key) const {
  auto within = [](const std::string& inner, const std::string& outer) {
    return inner == outer || absl::StartsWith(inner, outer + ".") ||
           absl::StartsWith(inner, outer + "[");
  };
  // The last override of a key wins, so it is the one to blame.
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it)
    if (within(key, it->first)) return &*it;
  return nullptr;
}

std::string ConfigReader::Where(const YAML::Node& node, const YAML::Node& fallback,
                                const std::string& key) const {
  if (const auto* o = OverrideFor(key))
    return absl::StrCat(source_, ": override '", EscapeBytes(o->second, 200), "'");
  int line = LineOf(node);
  if (line == 0) line = LineOf(fallback);
  return line > 0 ? absl::StrCat(source_, ":", line) : source_;
}

absl::Status ConfigReader::Error(const YAML::Node& node, const YAML::Node& fallback,
                                 const std::string& key, absl::string_view problem) const {
  std::string msg =
      absl::StrCat(Where(node, fallback, key), ": ", EscapeBytes(key, 200), ": ", problem);
  if (node.IsDefined() && !node.IsNull()) absl::StrAppend(&msg, " (got '", Render(node), "')");
  return absl::InvalidArgumentError(msg);
}

std::string ConfigReader::Suggest(const std::string& path, const std::string& section,
                                  const std::string& key) const {
  const SchemaSection* here = nullptr;
  for (const SchemaSection& s : schema_)
    if (s.path == section) here = &s;
  if (here != nullptr) {
    const std::string* best = nullptr;
    int best_d = 1 << 30;
    for (const std::string& k : here->keys) {
      int d = EditDistance(absl::AsciiStrToLower(key), k);
      if (d < best_d) best_d = d, best = &k;
    }
    if (best != nullptr && best_d <= std::max<int>(2, static_cast<int>(key.size()) / 3))
      return absl::StrCat(" (did you mean '", JoinKey(path, *best), "'?)");
  }
  // The key may belong to another section (e.g. batch_size under model).
  for (const SchemaSection& s : schema_) {
    for (const std::string& k : s.keys) {
      if (EditDistance(key, k) <= 1 && s.path != section)
        return absl::StrCat(" (did you mean '", JoinKey(s.path, k), "'?)");
    }
  }
  if (here == nullptr) return "";
  return absl::StrCat(" (known keys of ", path.empty() ? "the top level" : path, ": ",
                      absl::StrJoin(here->keys, ", "), ")");
}

absl::Status ConfigReader::CheckMap(const YAML::Node& map, const YAML::Node& parent,
                                    const std::string& path, const std::string& section) const {
  if (!map.IsDefined() || map.IsNull()) return absl::OkStatus();
  if (!map.IsMap()) return Error(map, parent, path.empty() ? "<top level>" : path, "expected a map");
  const SchemaSection* here = nullptr;
  for (const SchemaSection& s : schema_)
    if (s.path == section) here = &s;
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // A copy (a Node is a handle): `it->first` is a member of a proxy that yaml-cpp's
    // operator-> returns by value, so a reference to it dangles after this statement.
    const YAML::Node k = it->first;
    std::string name = k.IsScalar() ? k.Scalar() : Render(k);
    std::string full = JoinKey(path, name);
    if (!seen.insert(name).second) return Error(YAML::Node(), k, full, "duplicate key");
    bool known = here != nullptr &&
                 std::find(here->keys.begin(), here->keys.end(), name) != here->keys.end();
    if (known) continue;
    // An override that created this key (or a key below it) is the one to name.
    std::string where;
    for (auto o = overrides_.rbegin(); o != overrides_.rend() && where.empty(); ++o) {
      if (o->first == full || absl::StartsWith(o->first, full + ".") ||
          absl::StartsWith(o->first, full + "["))
        where = absl::StrCat(source_, ": override '", EscapeBytes(o->second, 200), "'");
    }
    if (where.empty()) where = Where(k, map, full);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", EscapeBytes(full, 200), ": unknown key", Suggest(path, section, name)));
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::ParseInt(const YAML::Node& node, const YAML::Node& fallback,
                                    const std::string& key, const char* expected,
                                    const std::function<bool(int64_t)>& valid,
                                    int64_t* out) const {
  int64_t v = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v) || !valid(v))
    return Error(node, fallback, key, absl::StrCat("expected ", expected));
  *out = v;
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadInt(const YAML::Node& map, const std::string& path,
                                   const char* key, const char* expected,
                                   const std::function<bool(int64_t)>& valid,
                                   int64_t* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  return ParseInt(n, map, JoinKey(path, key), expected, valid, out);
}

absl::Status ConfigReader::ReadUint(const YAML::Node& map, const std::string& path,
                                    const char* key, uint64_t* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  uint64_t v = 0;
  if (!n.IsScalar() || absl::StrContains(n.Scalar(), "-") || !absl::SimpleAtoi(n.Scalar(), &v))
    return Error(n, map, JoinKey(path, key), "expected a non-negative integer below 2^64");
  *out = v;
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadDouble(const YAML::Node& map, const std::string& path,
                                      const char* key, const char* expected,
                                      const std::function<bool(double)>& valid,
                                      double* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  double v = 0;
  if (!n.IsScalar() || !absl::SimpleAtod(n.Scalar(), &v) || !std::isfinite(v) || !valid(v))
    return Error(n, map, JoinKey(path, key), absl::StrCat("expected ", expected));
  *out = v;
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadBool(const YAML::Node& map, const std::string& path,
                                    const char* key, bool* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  std::string s = n.IsScalar() ? absl::AsciiStrToLower(n.Scalar()) : "";
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    return Error(n, map, JoinKey(path, key), "expected true or false");
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadString(const YAML::Node& map, const std::string& path,
                                      const char* key, std::string* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  if (!n.IsScalar()) return Error(n, map, JoinKey(path, key), "expected a string");
  *out = n.Scalar();
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadIntList(const YAML::Node& map, const std::string& path,
                                       const char* key, const char* expected,
                                       const std::function<bool(int64_t)>& valid,
                                       bool allow_scalar, std::vector<int64_t>* out) const {
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  const std::string full = JoinKey(path, key);
  if (allow_scalar && n.IsScalar()) {
    int64_t v;
    if (absl::Status st = ParseInt(n, map, full, expected, valid, &v); !st.ok()) return st;
    *out = {v};
    return absl::OkStatus();
  }
  if (!n.IsSequence())
    return Error(n, map, full,
                 absl::StrCat("expected a list of ", allow_scalar ? "(or one) " : "", "values, each ",
                              expected));
  if (n.size() == 0) return Error(n, map, full, "expected a non-empty list");
  std::vector<int64_t> values;
  for (size_t i = 0; i < n.size(); ++i) {
    int64_t v;
    if (absl::Status st = ParseInt(n[i], n, absl::StrCat(full, "[", i, "]"), expected, valid, &v);
        !st.ok())
      return st;
    values.push_back(v);
  }
  *out = std::move(values);
  return absl::OkStatus();
}

absl::Status ConfigReader::ReadChoice(const YAML::Node& map, const std::string& path,
                                      const char* key,
                                      const std::vector<absl::string_view>& spellings,
                                      int* index) const {
  *index = -1;
  YAML::Node n = map[key];
  if (!n.IsDefined() || n.IsNull()) return absl::OkStatus();
  if (n.IsScalar()) {
    for (size_t i = 0; i < spellings.size(); ++i) {
      if (n.Scalar() == spellings[i]) {
        *index = static_cast<int>(i);
        return absl::OkStatus();
      }
    }
  }
  return Error(n, map, JoinKey(path, key),
               absl::StrCat("expected one of ", absl::StrJoin(spellings, ", ")));
}

}  // namespace tessera::internal
