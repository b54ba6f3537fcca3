// ConfigReader: the strict, typed reading of YAML nodes behind ParseConfig (trainer/config.h).
// Every read names the full dotted key ("model.tables[2].rows") and, on error, returns
// InvalidArgument "<file>:<line>: <key>: <problem> (got '<value>')". Values that came from a
// command-line override are located as "<file>: override '<text>'" instead of a line.
// Absent (or null) keys leave the output untouched, so the caller's defaults stand.
// Not thread-safe; one per parse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/enum_names.h"
#include "yaml-cpp/yaml.h"

namespace tessera::internal {

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string JoinKey(const std::string& path, absl::string_view key);

// A child of a map, or a null node when absent (so reads below it see "absent", never a
// yaml-cpp zombie node, which throws when touched).
YAML::Node Child(const YAML::Node& map, const char* key);

// Levenshtein distance, for "did you mean" suggestions.
int EditDistance(absl::string_view a, absl::string_view b);

// The schema: for each map path pattern ("" for the root, "model", "model.tables[]", ...), its
// known keys. Used to check maps and to suggest a key from another section.
struct SchemaSection {
  std::string path;  // list entries are written "<list>[]"
  std::vector<std::string> keys;
};

// ParseConfig's schema (defined in trainer/config.cc): every section and key the config knows.
// tests/trainer/config_enums_test.cc checks that ConfigToYaml writes every one of them.
const std::vector<SchemaSection>& ConfigSchema();

class ConfigReader {
 public:
  // `source` names the file in messages. `overrides` holds (normalized dotted key, original
  // text) for every override applied to the tree; `schema` lists every section.
  ConfigReader(std::string source, std::vector<std::pair<std::string, std::string>> overrides,
               std::vector<SchemaSection> schema);

  const std::string& source() const { return source_; }

  // "<file>:<line>: <key>: <problem> (got '<value>')", located at `node` (or at `fallback` when
  // `node` has no position); the "(got ...)" part only when `node` holds a value.
  absl::Status Error(const YAML::Node& node, const YAML::Node& fallback, const std::string& key,
                     absl::string_view problem) const;
  // The location prefix "<file>:<line>" (or "<file>: override '<text>'") for `key` at `node`.
  std::string Where(const YAML::Node& node, const YAML::Node& fallback,
                    const std::string& key) const;

  // Checks that `map` (dotted `path`, schema section `section`) is a map or absent, holds no
  // duplicate keys and only keys of its section; an unknown key's error suggests the closest
  // known one.
  absl::Status CheckMap(const YAML::Node& map, const YAML::Node& parent, const std::string& path,
                        const std::string& section) const;

  // Typed reads of map[key]. `expected` describes valid values ("a positive integer") and
  // `valid` tests them; a value failing either the parse or `valid` is an error.
  absl::Status ReadInt(const YAML::Node& map, const std::string& path, const char* key,
                       const char* expected, const std::function<bool(int64_t)>& valid,
                       int64_t* out) const;
  absl::Status ReadUint(const YAML::Node& map, const std::string& path, const char* key,
                        uint64_t* out) const;
  absl::Status ReadDouble(const YAML::Node& map, const std::string& path, const char* key,
                          const char* expected, const std::function<bool(double)>& valid,
                          double* out) const;
  absl::Status ReadBool(const YAML::Node& map, const std::string& path, const char* key,
                        bool* out) const;
  absl::Status ReadString(const YAML::Node& map, const std::string& path, const char* key,
                          std::string* out) const;
  // A list of integers; with `allow_scalar` a single integer reads as a one-element list.
  // Element errors name "<key>[i]". An empty list is an error.
  absl::Status ReadIntList(const YAML::Node& map, const std::string& path, const char* key,
                           const char* expected, const std::function<bool(int64_t)>& valid,
                           bool allow_scalar, std::vector<int64_t>* out) const;
  // One of the spellings in `names`, the EnumName table declared beside the enum
  // (core/enum_names.h), which ConfigToYaml writes with too; *out gets that entry's value. The
  // error lists the spellings in table order: "expected one of a, b, c".
  template <typename E, size_t N>
  absl::Status ReadEnum(const YAML::Node& map, const std::string& path, const char* key,
                        const EnumName<E> (&names)[N], E* out) const {
    std::vector<absl::string_view> spellings;
    for (const EnumName<E>& n : names) spellings.emplace_back(n.name);
    int index = -1;
    if (absl::Status st = ReadChoice(map, path, key, spellings, &index); !st.ok()) return st;
    if (index >= 0) *out = names[index].value;
    return absl::OkStatus();
  }

  // Parses one scalar element (used for list elements read by the caller).
  absl::Status ParseInt(const YAML::Node& node, const YAML::Node& fallback,
                        const std::string& key, const char* expected,
                        const std::function<bool(int64_t)>& valid, int64_t* out) const;

 private:
  // ReadEnum's untyped half: *index = the position of map[key] in `spellings`, -1 when absent.
  absl::Status ReadChoice(const YAML::Node& map, const std::string& path, const char* key,
                          const std::vector<absl::string_view>& spellings, int* index) const;
  // The override that set `key` or one of its parents or children, or nullptr.
  const std::pair<std::string, std::string>* OverrideFor(const std::string& key) const;
  std::string Suggest(const std::string& path, const std::string& section,
                      const std::string& key) const;

  std::string source_;
  std::vector<std::pair<std::string, std::string>> overrides_;
  std::vector<SchemaSection> schema_;
};

}  // namespace tessera::internal
