// The RocksDB tier end to end through the Trainer: the same config trained with tables in memory
// and in RocksDB (any cache size from just above one step's distinct rows to more than the
// table, LRU or LFU, prefetch on or off, a multi-feature table) exports bit-identical models,
// and the tier's counters reach the metrics log.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/stores.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

class TierTrainingTest : public tiertest::TempDirTest {
 protected:
  // Trains 3 epochs (30 steps, evaluating every 10) and returns the exported model's bytes.
  std::string Train(const std::string& name, const std::vector<std::string>& storage,
                    const std::string& emb_opt = "rowwise_adagrad") {
    const fs::path out = dir_ / name;
    std::string yaml = tiertest::SmallTierYaml(storage, emb_opt, "adam") +
                       absl::StrCat("train: {epochs: 3, eval_every: 10, log_every: 5}\n",
                                    "output: {dir: ", out.string(), ", progress: false}\n");
    auto config = ParseConfig(yaml, (dir_ / (name + ".yaml")).string());
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return "";
    auto trainer = Trainer::Create(*config);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return "";
    auto summary = (*trainer)->Run();
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (!summary.ok()) return "";
    EXPECT_EQ(summary->steps, 30);
    return ReadFile(summary->export_path);
  }
};

TEST_F(TierTrainingTest, RocksDbTablesExportTheSameBitsAsInMemoryTables) {
  const std::string memory = Train("memory", {});
  ASSERT_GT(memory.size(), 1000u);
  struct Case {
    std::string name;
    std::vector<std::string> storage;
  };
  // t0 sees at most 256 distinct rows per step (128 samples x 2 ids), t1 512 (x 3 + x 1).
  const std::vector<Case> cases = {
      {"t0_lru_257", {"{tier: rocksdb, cache_rows: 257, policy: lru}"}},
      {"t0_lfu_257", {"{tier: rocksdb, cache_rows: 257, policy: lfu}"}},
      {"t0_lru_700", {"{tier: rocksdb, cache_rows: 700, policy: lru}"}},
      {"t0_lfu_700_noprefetch", {"{tier: rocksdb, cache_rows: 700, policy: lfu, prefetch: false}"}},
      {"t0_lru_all", {"{tier: rocksdb, cache_bytes: 10000000, policy: lru}"}},
      {"all_tiered",
       {"{tier: rocksdb, cache_rows: 300, policy: lfu, reader_threads: 2}",
        "{tier: rocksdb, cache_rows: 520, policy: lru, path: db_t1}",
        "{tier: rocksdb, cache_rows: 300, policy: lfu}"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string tiered = Train(c.name, c.storage);
    EXPECT_TRUE(tiered == memory) << c.name << ": export differs from the in-memory run";
  }
  // storage.path is relative to output.dir; the default is <output.dir>/tables/<name>.
  EXPECT_TRUE(fs::exists(dir_ / "all_tiered" / "db_t1" / "CURRENT"));
  EXPECT_TRUE(fs::exists(dir_ / "all_tiered" / "tables" / "t0" / "CURRENT"));
}

TEST_F(TierTrainingTest, LazyAdamRowsMatchToo) {
  const std::string memory = Train("memory", {}, "adam");
  const std::string tiered =
      Train("tiered", {"{tier: rocksdb, cache_rows: 260, policy: lru}"}, "adam");
  ASSERT_GT(memory.size(), 1000u);
  EXPECT_TRUE(tiered == memory);
}

TEST_F(TierTrainingTest, AFreshRunIgnoresRowsLeftInTheWorkingDatabase) {
  // Two runs into one output.dir: the second must not start from the first one's trained rows.
  const std::vector<std::string> storage = {"{tier: rocksdb, cache_rows: 400}"};
  const std::string first = Train("same", storage);
  const std::string second = Train("same", storage);
  ASSERT_GT(first.size(), 1000u);
  EXPECT_TRUE(first == second);
}

TEST_F(TierTrainingTest, MetricsLogCarriesTierCounters) {
  Train("metrics", {"{tier: rocksdb, cache_rows: 300, policy: lfu}"});
  std::string log = ReadFile(dir_ / "metrics" / "metrics.jsonl");
  EXPECT_THAT(log, HasSubstr("\"tier_table\": \"t0\""));
  for (const char* key : {"tier_hit_rate", "tier_rows_read_per_step", "tier_rows_written_per_step",
                          "tier_prefetch_stall_ms_per_step", "tier_disk_bytes"}) {
    EXPECT_THAT(log, HasSubstr(absl::StrCat("\"", key, "\""))) << key;
  }
  // Six lines: every 5 steps of 30.
  size_t lines = 0;
  for (size_t at = log.find("\"tier_table\""); at != std::string::npos;
       at = log.find("\"tier_table\"", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 6u);
}

TEST_F(TierTrainingTest, TooSmallCacheNamesTheTable) {
  const fs::path out = dir_ / "small";
  std::string yaml = tiertest::SmallTierYaml({"{tier: rocksdb, cache_rows: 50}"}, "rowwise_adagrad",
                                            "sgd") +
                     absl::StrCat("train: {steps: 3}\noutput: {dir: ", out.string(),
                                  ", progress: false}\n");
  auto config = ParseConfig(yaml, (dir_ / "small.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("table 't0'"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
}

}  // namespace
}  // namespace tessera
