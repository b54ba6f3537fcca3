// The HBM cache (storage.device_cache_rows, embedding/device_row_cache.h) end to end through the
// Trainer on the CPU, where the cache's slots are host memory (the CPU twins): the same config
// trained with tables in memory and with device caches far smaller than the rows a run touches,
// over host memory and over the RocksDB tier, LRU and LFU, must give the same last train loss,
// the same eval metrics (so the same predictions) and a bit-identical export. Also the config
// rules of the new keys.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/model.h"
#include "trainer/stores.h"
#include "trainer/trainer.h"
#include "core/status.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

struct RunResult {
  std::string export_bytes;
  double last_loss = 0;
  EvalMetrics eval;
};

class DeviceCacheTrainingTest : public tiertest::TempDirTest {
 protected:
  std::string Yaml(const std::string& name, const std::vector<std::string>& storage) {
    return tiertest::SmallTierYaml(storage, "rowwise_adagrad", "adam") +
           absl::StrCat("train: {epochs: 2, eval_every: 10, log_every: 5}\n",
                        "output: {dir: ", (dir_ / name).string(), ", progress: false}\n");
  }
  // Trains 2 epochs (20 steps).
  RunResult Train(const std::string& name, const std::vector<std::string>& storage) {
    RunResult r;
    auto config = ParseConfig(Yaml(name, storage), (dir_ / (name + ".yaml")).string());
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return r;
    auto trainer = Trainer::Create(*config);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return r;
    auto summary = (*trainer)->Run();
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (!summary.ok()) return r;
    EXPECT_EQ(summary->steps, 20);
    r.export_bytes = ReadFile(summary->export_path);
    r.last_loss = summary->last_train_loss;
    r.eval = summary->eval;
    return r;
  }
};

TEST_F(DeviceCacheTrainingTest, CachedTablesTrainBitIdenticallyToTablesInMemory) {
  const RunResult memory = Train("memory", {});
  ASSERT_GT(memory.export_bytes.size(), 1000u);
  ASSERT_GT(memory.eval.count, 0);
  struct Case {
    std::string name;
    std::vector<std::string> storage;
  };
  // t0 sees at most 256 distinct rows per step (128 samples x 2 ids) of its 2000, t1 512 of
  // 1000: caches of 260 / 520 rows evict every step.
  const std::vector<Case> cases = {
      {"memory_lru", {"{device_cache_rows: 260, policy: lru}"}},
      {"memory_lfu",
       {"{tier: memory, device_cache_rows: 260}", "{device_cache_bytes: 30000}"}},
      {"rocksdb_lru", {"{tier: rocksdb, cache_rows: 300, policy: lru, device_cache_rows: 260}"}},
      {"rocksdb_lfu",
       {"{tier: rocksdb, cache_rows: 300, policy: lfu, device_cache_rows: 257}",
        "{tier: rocksdb, cache_rows: 600, policy: lfu, device_cache_rows: 520}"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunResult cached = Train(c.name, c.storage);
    EXPECT_EQ(cached.last_loss, memory.last_loss);
    EXPECT_EQ(cached.eval.logloss, memory.eval.logloss);
    EXPECT_EQ(cached.eval.auc, memory.eval.auc);
    EXPECT_TRUE(cached.export_bytes == memory.export_bytes)
        << c.name << ": export differs from the in-memory run";
  }
}

TEST_F(DeviceCacheTrainingTest, TheModelKeepsTheCacheOverTheTablesStore) {
  auto config = ParseConfig(
      Yaml("model", {"{tier: rocksdb, cache_rows: 300, device_cache_rows: 260, policy: lfu}"}),
      (dir_ / "model.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto stores = CreateTableStores(*config);
  ASSERT_TRUE(stores.ok()) << stores.status();
  auto* cache = dynamic_cast<DeviceRowCache*>((*stores)[0].get());
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->cache_rows(), 260);
  EXPECT_EQ(cache->options().policy, CachePolicy::kLfu);
  EXPECT_NE(dynamic_cast<TieredRowStore*>(&cache->backing()), nullptr);
  EXPECT_EQ(dynamic_cast<DeviceRowCache*>((*stores)[1].get()), nullptr);
  // The effective config keeps the key.
  EXPECT_THAT(ConfigToYaml(*config), HasSubstr("device_cache_rows: 260"));
}

// Checkpoints flush the cache (their rows go through ReadRowBytes: the state file) and a resume
// writes the rows back through the cache: a run stopped after a checkpoint and resumed exports
// the same bytes as one never interrupted.
TEST_F(DeviceCacheTrainingTest, ResumedRunEqualsUninterruptedRun) {
  const std::vector<std::vector<std::string>> setups = {
      {"{device_cache_rows: 260, policy: lfu}"},
      {"{tier: rocksdb, cache_rows: 300, device_cache_rows: 260}"}};
  int i = 0;
  for (const auto& storage : setups) {
    SCOPED_TRACE(storage[0]);
    auto config = [&](const std::string& name, int64_t steps, int64_t every) {
      const std::string yaml =
          tiertest::SmallTierYaml(storage, "rowwise_adagrad", "adam") +
          absl::StrCat("train: {steps: ", steps, ", eval_every: 7, eval_batches: 1, ",
                       "log_every: 4, checkpoint_every: ", every, ", resume: true}\n",
                       "output: {dir: ", (dir_ / name).string(), ", progress: false}\n");
      return ParseConfig(yaml, (dir_ / (name + ".yaml")).string());
    };
    auto run = [](const absl::StatusOr<Config>& c) -> absl::StatusOr<TrainSummary> {
      if (!c.ok()) return c.status();
      TESSERA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(*c));
      return trainer->Run();
    };
    const std::string n = std::to_string(i++);
    auto straight = run(config("straight" + n, 17, 0));
    ASSERT_TRUE(straight.ok()) << straight.status();
    ASSERT_TRUE(run(config("resumed" + n, 12, 5)).ok());  // checkpoints at 5, 10
    auto resumed = run(config("resumed" + n, 17, 5));     // resumes from ckpt-10
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->samples, 7 * 128);
    EXPECT_TRUE(ReadFile(straight->export_path) == ReadFile(resumed->export_path))
        << "the resumed run's model differs from the uninterrupted one";
  }
}

TEST_F(DeviceCacheTrainingTest, ConfigErrorsNameTheKey) {
  struct Bad {
    std::string storage, key, why;
  };
  const std::vector<Bad> bad = {
      {"{device_cache_rows: -1}", "model.tables[0].storage.device_cache_rows", ">= 0"},
      {"{device_cache_rows: 10, device_cache_bytes: 100}",
       "model.tables[0].storage.device_cache_bytes", "not both"},
      {"{tier: rocksdb, cache_rows: 300, device_cache_bytes: -4}",
       "model.tables[0].storage.device_cache_bytes", ">= 0"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.storage);
    auto config = ParseConfig(Yaml("bad", {b.storage}), (dir_ / "bad.yaml").string());
    ASSERT_FALSE(config.ok());
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(b.key));
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(b.why));
  }
}

TEST_F(DeviceCacheTrainingTest, ACacheSmallerThanAStepNamesTheTable) {
  auto config = ParseConfig(Yaml("small", {"{device_cache_rows: 50}"}),
                            (dir_ / "small.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  auto trainer = Trainer::Create(*config);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("table 't0'"));
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("device_cache_rows"));
}

}  // namespace
}  // namespace tessera
