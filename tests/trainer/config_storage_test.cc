// The storage and checkpoint keys of the config (trainer/internal/config_storage.h): parsing,
// defaults, path resolution against output.dir, the effective-config round trip, and every
// error naming file:line, key and value.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/config.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ConfigStorageTest : public tiertest::TempDirTest {
 protected:
  absl::StatusOr<Config> Parse(const std::string& t0_storage, const std::string& extra = "",
                               const std::string& t1_storage = "") {
    std::string yaml = tiertest::SmallTierYaml({t0_storage, t1_storage}, "rowwise_adagrad", "sgd") +
                       absl::StrCat("output: {dir: ", (dir_ / "out").string(), "}\n", extra);
    return ParseConfig(yaml, (dir_ / "s.yaml").string());
  }
  std::string Error(const std::string& t0_storage, const std::string& extra = "",
                    const std::string& t1_storage = "") {
    auto c = Parse(t0_storage, extra, t1_storage);
    EXPECT_FALSE(c.ok());
    return c.ok() ? "" : std::string(c.status().message());
  }
};

TEST_F(ConfigStorageTest, ReadsStorageAndResolvesPaths) {
  auto c = Parse("{tier: rocksdb, cache_rows: 500, policy: lfu, reader_threads: 4, prefetch: false}",
                 "", "{tier: rocksdb, cache_bytes: 1000000, path: /tmp/x_t1}");
  ASSERT_TRUE(c.ok()) << c.status();
  const TableStorage& s0 = c->model.tables[0].storage;
  EXPECT_EQ(s0.tier, StorageTier::kRocksDb);
  EXPECT_EQ(s0.cache_rows, 500);
  EXPECT_EQ(s0.policy, CachePolicy::kLfu);
  EXPECT_EQ(s0.reader_threads, 4);
  EXPECT_FALSE(s0.prefetch);
  EXPECT_EQ(c->model.tables[1].storage.cache_bytes, 1000000);
  EXPECT_EQ(c->model.tables[2].storage.tier, StorageTier::kMemory);
  EXPECT_EQ(TableStoragePath(*c, 0), (dir_ / "out" / "tables" / "t0").string());
  EXPECT_EQ(TableStoragePath(*c, 1), "/tmp/x_t1");
  EXPECT_EQ(CheckpointDir(*c), (dir_ / "out" / "checkpoints").string());
  EXPECT_TRUE(c->train.resume);
  EXPECT_EQ(c->train.checkpoint_every, 0);

  auto again = ParseConfig(ConfigToYaml(*c), (dir_ / "s.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigToYaml(*c);
  EXPECT_EQ(ConfigToYaml(*again), ConfigToYaml(*c));
}

// storage.dtype / rounding per table (any tier), model.embedding_dtype / embedding_rounding as
// the defaults, the effective-config round trip, and the errors.
TEST_F(ConfigStorageTest, SixteenBitStorageKeys) {
  std::string yaml = tiertest::SmallTierYaml(
                         {"{dtype: fp16, rounding: nearest}", "{tier: rocksdb, cache_rows: 500}"},
                         "rowwise_adagrad", "sgd") +
                     absl::StrCat("output: {dir: ", (dir_ / "out").string(), "}\n");
  auto c = ParseConfig(yaml, (dir_ / "s.yaml").string(), {"model.embedding_dtype=bf16"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.tables[0].storage.dtype, RowDtype::kF16);
  EXPECT_EQ(c->model.tables[0].storage.rounding, RowRounding::kNearest);
  EXPECT_EQ(c->model.tables[1].storage.dtype, RowDtype::kBf16);  // the model default
  EXPECT_EQ(c->model.tables[1].storage.rounding, RowRounding::kStochastic);
  EXPECT_EQ(c->model.tables[2].storage.dtype, RowDtype::kBf16);
  auto again = ParseConfig(ConfigToYaml(*c), (dir_ / "s.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigToYaml(*c);
  EXPECT_EQ(ConfigToYaml(*again), ConfigToYaml(*c));
  EXPECT_EQ(again->model.tables[0].storage.dtype, RowDtype::kF16);

  EXPECT_THAT(Error("{dtype: fp8}"), HasSubstr("model.tables[0].storage.dtype"));
  EXPECT_THAT(Error("{dtype: bf16, rounding: up}"), HasSubstr("storage.rounding"));
  EXPECT_THAT(Error("{dtype: bf16}", "device: cuda\n"), HasSubstr("CPU only"));
}

// output_dtype per table, model.embedding_output_dtype as the default, the round trip, and the
// errors naming the table and the key that asked for bf16 outputs of an fp32 table.
TEST_F(ConfigStorageTest, OutputDtypeKeys) {
  const std::string out = absl::StrCat("output: {dir: ", (dir_ / "out").string(), "}\n");
  std::string yaml = tiertest::SmallTierYaml({"{dtype: fp16}", "", "{dtype: fp32}"},
                                             "rowwise_adagrad", "sgd") + out;
  // t0 fp16 with its own output_dtype; t1 bf16 by the model default, bf16 outputs by default.
  auto c = ParseConfig(yaml, (dir_ / "s.yaml").string(),
                       {"model.embedding_dtype=bf16", "model.embedding_output_dtype=bf16",
                        "model.tables[2].output_dtype=fp32"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.tables[0].output_dtype, RowDtype::kBf16);
  EXPECT_EQ(c->model.tables[1].output_dtype, RowDtype::kBf16);
  EXPECT_EQ(c->model.tables[2].output_dtype, RowDtype::kF32);
  auto again = ParseConfig(ConfigToYaml(*c), (dir_ / "s.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigToYaml(*c);
  EXPECT_EQ(ConfigToYaml(*again), ConfigToYaml(*c));
  EXPECT_EQ(again->model.tables[2].output_dtype, RowDtype::kF32);
  // The default is fp32 everywhere.
  auto plain = ParseConfig(yaml, (dir_ / "s.yaml").string());
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const TableConfig& t : plain->model.tables) EXPECT_EQ(t.output_dtype, RowDtype::kF32);

  // The model default reaching fp32 table t2: the error names the table and the model key.
  auto bad = ParseConfig(yaml, (dir_ / "s.yaml").string(),
                         {"model.embedding_dtype=bf16", "model.embedding_output_dtype=bf16"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("model.embedding_output_dtype"));
  EXPECT_THAT(bad.status().message(), HasSubstr("table 't2' has storage.dtype fp32"));
  // A table's own key.
  auto own = ParseConfig(yaml, (dir_ / "s.yaml").string(), {"model.tables[2].output_dtype=bf16"});
  ASSERT_FALSE(own.ok());
  EXPECT_THAT(own.status().message(), HasSubstr("model.tables[2].output_dtype"));
  EXPECT_THAT(own.status().message(), HasSubstr("table 't2'"));
  auto f16 = ParseConfig(yaml, (dir_ / "s.yaml").string(), {"model.tables[0].output_dtype=fp16"});
  ASSERT_FALSE(f16.ok());
  EXPECT_THAT(f16.status().message(), HasSubstr("fp16 pooled outputs are not supported"));
}

TEST_F(ConfigStorageTest, CheckpointKeys) {
  std::string yaml = tiertest::SmallTierYaml({}, "rowwise_adagrad", "sgd") +
                     "train: {checkpoint_every: 50, resume: false}\noutput: {dir: " +
                     (dir_ / "o").string() + ", checkpoint_dir: ck}\n";
  auto ok = ParseConfig(yaml, (dir_ / "s.yaml").string());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train.checkpoint_every, 50);
  EXPECT_FALSE(ok->train.resume);
  EXPECT_EQ(CheckpointDir(*ok), (dir_ / "o" / "ck").string());
  auto again = ParseConfig(ConfigToYaml(*ok), (dir_ / "s.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ConfigToYaml(*again), ConfigToYaml(*ok));
}

TEST_F(ConfigStorageTest, ErrorsNameTheKeyAndLine) {
  // Line 9 is t0's entry in SmallTierYaml.
  EXPECT_THAT(Error("{tier: memory, cache_rows: 10}"),
              HasSubstr("s.yaml:9: model.tables[0].storage.cache_rows: only used with "
                        "storage.tier rocksdb (got '10')"));
  EXPECT_THAT(Error("{tier: disk}"),
              HasSubstr("model.tables[0].storage.tier: expected one of memory, rocksdb (got 'disk')"));
  EXPECT_THAT(Error("{tier: rocksdb}"),
              HasSubstr("model.tables[0].storage.cache_rows: required with storage.tier rocksdb"));
  EXPECT_THAT(Error("{tier: rocksdb, cache_rows: 10, cache_bytes: 100}"),
              HasSubstr("model.tables[0].storage.cache_bytes: give either cache_rows or "
                        "cache_bytes, not both"));
  EXPECT_THAT(Error("{tier: rocksdb, cache_rows: -3}"),
              HasSubstr("model.tables[0].storage.cache_rows: expected a positive integer (got '-3')"));
  EXPECT_THAT(Error("{tier: rocksdb, cache_rows: 10, policy: fifo}"),
              HasSubstr("storage.policy: expected one of lru, lfu (got 'fifo')"));
  EXPECT_THAT(Error("{tier: rocksdb, cache_rows: 10, reader_threads: 0}"),
              HasSubstr("storage.reader_threads: expected an integer in [1, 256] (got '0')"));
  EXPECT_THAT(Error("{tier: rocksdb, cache_row: 10}"),
              HasSubstr("model.tables[0].storage.cache_row: unknown key (did you mean "
                        "'model.tables[0].storage.cache_rows'?)"));
  EXPECT_THAT(Error("", "train: {resume: maybe}\n"),
              HasSubstr("train.resume: expected true or false (got 'maybe')"));
}

TEST_F(ConfigStorageTest, UnwritableOrSharedPathsAreErrorsNamingThePath) {
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";
  std::string msg = Error(absl::StrCat("{tier: rocksdb, cache_rows: 10, path: ", file.string(), "/db}"));
  EXPECT_THAT(msg, HasSubstr("s.yaml:9: model.tables[0].storage.path: cannot use " +
                             file.string() + "/db: " + file.string() + " is not a directory"));
  msg = Error(absl::StrCat("{tier: rocksdb, cache_rows: 10, path: ", file.string(), "}"));
  EXPECT_THAT(msg, HasSubstr("it exists and is not a directory"));
  msg = Error("{tier: rocksdb, cache_rows: 10, path: shared}", "",
              "{tier: rocksdb, cache_rows: 10, path: shared}");
  EXPECT_THAT(msg, HasSubstr("model.tables[1].storage.path: table 't1' and table 't0' would share "
                             "the RocksDB directory " + (dir_ / "out" / "shared").string()));
  std::string yaml = tiertest::SmallTierYaml({}, "rowwise_adagrad", "sgd") +
                     "train: {checkpoint_every: 5}\noutput: {dir: " + (dir_ / "o").string() +
                     ", checkpoint_dir: " + file.string() + "/ck}\n";
  auto c = ParseConfig(yaml, (dir_ / "s.yaml").string());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("output.checkpoint_dir: cannot write checkpoints to " + file.string() +
                        "/ck"));
}

// A config that gives its tables as model.table_rows takes per-table storage by index or name,
// with --set or in YAML, and the effective config (tables expanded) reads back the same.
TEST_F(ConfigStorageTest, TableRowsTablesTakeStorageOverrides) {
  const std::string yaml = absl::StrCat(
      "model: {type: dlrm, num_dense: 4, embedding_dim: 8, bottom_mlp: [8], top_mlp: [4, 1], "
      "table_rows: [100, 200, 300]}\n"
      "data: {format: synthetic, batch_size: 8}\n"
      "output: {dir: ",
      (dir_ / "out").string(), "}\n");
  auto c = ParseConfig(yaml, (dir_ / "r.yaml").string(),
                       {"model.tables.1.storage.tier=rocksdb",
                        "model.tables.1.storage.cache_rows=50", "model.tables[2].storage.dtype=fp16"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->model.tables.size(), 3u);
  EXPECT_EQ(c->model.tables[1].storage.tier, StorageTier::kRocksDb);
  EXPECT_EQ(c->model.tables[1].storage.cache_rows, 50);
  EXPECT_EQ(c->model.tables[1].num_rows, 200);
  EXPECT_EQ(c->model.tables[0].storage.tier, StorageTier::kMemory);
  EXPECT_EQ(c->model.tables[2].storage.dtype, RowDtype::kF16);
  auto again = ParseConfig(ConfigToYaml(*c), (dir_ / "again.yaml").string());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model.tables[1].storage.tier, StorageTier::kRocksDb);
  // By name, in YAML.
  auto named = ParseConfig(yaml + "", (dir_ / "r.yaml").string(),
                           {"model.tables.t0.storage={tier: rocksdb, cache_rows: 10}"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->model.tables[0].storage.tier, StorageTier::kRocksDb);
  // Only storage and init; an index or name table_rows does not make.
  auto rows = ParseConfig(yaml, (dir_ / "r.yaml").string(), {"model.tables.1.rows=5"});
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(rows.status().message(), HasSubstr("takes only storage, init and output_dtype"));
  auto beyond = ParseConfig(yaml, (dir_ / "r.yaml").string(), {"model.tables.7.storage.tier=rocksdb"});
  ASSERT_FALSE(beyond.ok());
  EXPECT_THAT(beyond.status().message(), HasSubstr("makes 3 tables"));
}

}  // namespace
}  // namespace tessera
