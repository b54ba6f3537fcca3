// One spelling per enum (core/enum_names.h): every table the config reads by round-trips through
// its Parse/Name pair, every spelling the config accepts for a key is written back by
// ConfigToYaml with the same spelling, and ConfigToYaml writes every key of the schema.
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/enum_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/config.h"
#include "trainer/internal/config_reader.h"
#include "yaml-cpp/yaml.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Each entry's name parses back to its value, and names and values are distinct.
template <typename E, size_t N, typename Parse>
void ExpectTableRoundTrips(const EnumName<E> (&names)[N], Parse parse, const char* what) {
  SCOPED_TRACE(what);
  std::set<std::string> seen_names;
  std::set<int> seen_values;
  for (const EnumName<E>& n : names) {
    EXPECT_TRUE(seen_names.insert(n.name).second) << "duplicate name " << n.name;
    EXPECT_TRUE(seen_values.insert(static_cast<int>(n.value)).second) << n.name;
    EXPECT_STRNE(n.name, "");
    EXPECT_STREQ(NameIn(names, n.value), n.name);
    auto parsed = parse(std::string(n.name));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, n.value);
  }
  auto bad = parse("no_such_value\x01");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'no_such_value\\x01'"));  // escaped
  EXPECT_THAT(bad.status().message(), HasSubstr(names[N - 1].name));       // lists the names
}

TEST(EnumNamesTest, EveryTableRoundTrips) {
  ExpectTableRoundTrips(kDeviceNames, ParseDevice, "Device");
  ExpectTableRoundTrips(kInteractionTypeNames, ParseInteractionType, "InteractionType");
  ExpectTableRoundTrips(kDenseDtypeNames, ParseDenseDtype, "DenseDtype");
  ExpectTableRoundTrips(kDenseOptimizerTypeNames, ParseDenseOptimizerType, "DenseOptimizerType");
  ExpectTableRoundTrips(kRowOptimizerTypeNames, ParseRowOptimizerType, "RowOptimizerType");
  ExpectTableRoundTrips(kRowInitTypeNames, ParseRowInitType, "RowInitType");
  ExpectTableRoundTrips(kPoolingModeNames, ParsePoolingMode, "PoolingMode");
  ExpectTableRoundTrips(kCachePolicyNames, ParseCachePolicy, "CachePolicy");
  ExpectTableRoundTrips(kStorageTierNames, ParseStorageTier, "StorageTier");
  ExpectTableRoundTrips(kBadRecordPolicyNames, ParseBadRecordPolicy, "BadRecordPolicy");
  ExpectTableRoundTrips(
      kMlperfSplitNames, [](const std::string& s) { return ParseMlperfSplit(s); }, "MlperfSplit");
  ExpectTableRoundTrips(kGridLayoutNames, ParseGridLayout, "GridLayout");
  ExpectTableRoundTrips(kReplicaSyncNames, ParseReplicaSync, "ReplicaSync");
  ExpectTableRoundTrips(kSyncRowsNames, ParseSyncRows, "SyncRows");
  ExpectTableRoundTrips(kPayloadDTypeNames, ParsePayloadDType, "PayloadDType");
  ExpectTableRoundTrips(kDataFormatNames, ParseDataFormat, "DataFormat");
  ExpectTableRoundTrips(kNonFinitePolicyNames, ParseNonFinitePolicy, "NonFinitePolicy");
}

TEST(EnumNamesTest, ParseMessageNamesWhatAndChoices) {
  auto bad = ParseSyncRows("every");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "sharding.sync_rows: unknown value 'every' (expected touched or all)");
  EXPECT_EQ(NameList(kPayloadDTypeNames), "fp32, fp16, bf16");
  EXPECT_EQ(NameList(kPayloadDTypeNames, ", ", " or "), "fp32, fp16 or bf16");
}

class ConfigEnumsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_config_enums_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A synthetic config with one RocksDB table, so the storage keys are read and written too.
  std::string Base() const {
    return "output: {dir: " + (dir_ / "out").string() + "}\n" + R"(model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  tables:
    - {name: a, rows: 10, features: [0]}
    - {name: b, rows: 20, features: [1], storage: {tier: rocksdb, cache_rows: 8}}
)";
  }

  std::string source() const { return (dir_ / "c.yaml").string(); }
  fs::path dir_;
};

// For every enum key: each spelling of its table is accepted, stored as that value (checked by
// writing it: ConfigToYaml uses the same table) and written back verbatim; the written config
// parses to the same config. Any other spelling is refused with the list of allowed ones.
TEST_F(ConfigEnumsTest, EveryEnumKeyReadsAndWritesEverySpelling) {
  struct EnumKey {
    std::string key;                 // as an override path
    std::string section;             // where the emitted value sits
    std::string leaf;
    std::vector<std::string> names;  // the table's spellings
  };
  auto names_of = [](const auto& table) {
    std::vector<std::string> out;
    for (const auto& n : table) out.push_back(n.name);
    return out;
  };
  const std::vector<EnumKey> keys = {
      {"device", "", "device", names_of(kDeviceNames)},
      {"model.type", "model", "type", names_of(kInteractionTypeNames)},
      {"model.dense_dtype", "model", "dense_dtype", names_of(kDenseDtypeNames)},
      {"model.tables[0].pooling", "model.tables[0]", "pooling", names_of(kPoolingModeNames)},
      {"model.tables[0].init.type", "model.tables[0].init", "type", names_of(kRowInitTypeNames)},
      {"model.tables[1].storage.policy", "model.tables[1].storage", "policy",
       names_of(kCachePolicyNames)},
      {"data.on_bad_record", "data", "on_bad_record", names_of(kBadRecordPolicyNames)},
      {"optimizer.embedding.type", "optimizer.embedding", "type",
       names_of(kRowOptimizerTypeNames)},
      {"optimizer.dense.type", "optimizer.dense", "type", names_of(kDenseOptimizerTypeNames)},
      {"train.nonfinite", "train", "nonfinite", names_of(kNonFinitePolicyNames)},
      {"sharding.layout", "sharding", "layout", names_of(kGridLayoutNames)},
      {"sharding.replica_sync", "sharding", "replica_sync", names_of(kReplicaSyncNames)},
      {"sharding.sync_rows", "sharding", "sync_rows", names_of(kSyncRowsNames)},
      {"sharding.comm_dtype", "sharding", "comm_dtype", names_of(kPayloadDTypeNames)},
      {"sharding.transport", "sharding", "transport", names_of(kPayloadTransportNames)},
  };
  auto lookup = [](YAML::Node n, const std::string& section) {
    const std::vector<std::string> parts = absl::StrSplit(section, '.', absl::SkipEmpty());
    for (const std::string& part : parts) {
      const size_t bracket = part.find('[');
      if (bracket == std::string::npos) {
        n.reset(n[part]);
      } else {
        YAML::Node list = n[part.substr(0, bracket)];
        n.reset(list[std::stoi(part.substr(bracket + 1))]);
      }
    }
    return n;
  };
  for (const EnumKey& k : keys) {
    for (const std::string& name : k.names) {
      SCOPED_TRACE(k.key + "=" + name);
      auto c = ParseConfig(Base(), source(), {k.key + "=" + name});
      ASSERT_TRUE(c.ok()) << c.status();
      const std::string yaml = ConfigToYaml(*c);
      YAML::Node section = lookup(YAML::Load(yaml), k.section);
      ASSERT_TRUE(section.IsMap()) << yaml;
      EXPECT_EQ(section[k.leaf].as<std::string>(), name) << yaml;
      auto again = ParseConfig(yaml, source());
      ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
      EXPECT_EQ(ConfigToYaml(*again), yaml);
    }
    auto bad = ParseConfig(Base(), source(), {k.key + "=nonesuch"});
    ASSERT_FALSE(bad.ok()) << k.key;
    EXPECT_THAT(bad.status().message(),
                HasSubstr(k.key + ": expected one of " + absl::StrJoin(k.names, ", ") +
                          " (got 'nonesuch')"));
    EXPECT_THAT(bad.status().message(), HasSubstr("override '" + k.key + "=nonesuch'"));
  }
}

// ConfigToYaml writes every key the schema knows, so the run directory's effective config is
// complete. The exceptions are keys that only exist in another shape of config: the
// table_rows shorthand (written expanded as tables), the data files and MLPerf day keys (a
// synthetic config has none; data_formats_test covers them), init.scale (written only when
// set: absent means the default sqrt(1 / rows)), cache_bytes (the alternative to cache_rows) and
// device_cache_bytes (the alternative to device_cache_rows), a table's output_dtype (written when
// it or model.embedding_output_dtype is not fp32: config_storage_test round-trips it), and a
// dynamic table's `dynamic` block (only a dynamic table has it: dynamic_training_test
// round-trips it).
TEST_F(ConfigEnumsTest, ConfigToYamlWritesEverySchemaKey) {
  auto c = ParseConfig(Base(), source());
  ASSERT_TRUE(c.ok()) << c.status();
  const YAML::Node root = YAML::Load(ConfigToYaml(*c));
  const std::set<std::string> not_written = {
      "model.table_rows", "data.train", "data.eval", "data.train_days", "data.eval_days",
      "data.eval_split", "model.tables[].init.scale", "model.tables[].storage.cache_bytes",
      "model.tables[].storage.device_cache_bytes", "model.tables[].output_dtype",
      "model.tables[].dynamic"};
  int checked = 0;
  for (const internal::SchemaSection& s : internal::ConfigSchema()) {
    if (absl::StartsWith(s.path, "model.tables[].dynamic")) continue;
    // The section's node: list sections are checked on their entry that has the keys (the
    // RocksDB table, entry 1).
    YAML::Node node;
    node.reset(root);
    const std::vector<std::string> parts = absl::StrSplit(s.path, '.', absl::SkipEmpty());
    for (const std::string& part : parts) {
      if (absl::EndsWith(part, "[]")) {
        YAML::Node list = node[part.substr(0, part.size() - 2)];
        ASSERT_TRUE(list.IsSequence()) << s.path;
        node.reset(list[list.size() - 1]);
      } else {
        YAML::Node next = node[part];
        node.reset(next);
      }
    }
    ASSERT_TRUE(node.IsMap()) << "section " << s.path << " not written";
    for (const std::string& key : s.keys) {
      const std::string full = s.path.empty() ? key : s.path + "." + key;
      if (not_written.count(full)) continue;
      EXPECT_TRUE(node[key].IsDefined()) << "ConfigToYaml does not write " << full;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

}  // namespace
}  // namespace tessera
