// Checkpoints and resume (trainer/checkpoint.h): a run stopped after its last checkpoint and
// resumed ends with the same model bits as a run never interrupted, for in-memory and RocksDB
// tables, row-wise AdaGrad / lazy Adam rows and Adam / AdaGrad dense optimizers, across epoch
// boundaries with shuffled batches and a decaying LR; LATEST and the kept checkpoints; and the
// refusals (another seed, a table moved between tiers, a broken LATEST).
#include "trainer/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/status.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

struct RunSetup {
  std::string name;
  std::vector<std::string> storage;
  std::string embedding_optimizer;
  std::string dense_optimizer;
};

class CheckpointTest : public tiertest::TempDirTest {
 protected:
  absl::StatusOr<Config> MakeConfig(const RunSetup& s, const fs::path& out, int64_t steps,
                                    int64_t checkpoint_every, bool resume = true,
                                    uint64_t seed = 11) {
    std::string yaml =
        tiertest::SmallTierYaml(s.storage, s.embedding_optimizer, s.dense_optimizer) +
        absl::StrCat("train: {steps: ", steps, ", eval_every: 7, eval_batches: 1, log_every: 4, ",
                     "checkpoint_every: ", checkpoint_every, ", resume: ", resume ? "true" : "false",
                     "}\noutput: {dir: ", out.string(), ", progress: false}\n");
    return ParseConfig(yaml, (dir_ / "c.yaml").string(), {absl::StrCat("seed=", seed)});
  }
  absl::StatusOr<TrainSummary> Run(const Config& config) {
    TESSERA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config));
    return trainer->Run();
  }
};

TEST_F(CheckpointTest, ResumedRunEqualsUninterruptedRun) {
  const std::vector<RunSetup> setups = {
      {"memory_adagrad_adam", {}, "rowwise_adagrad", "adam"},
      {"rocksdb_adagrad_adam",
       {"{tier: rocksdb, cache_rows: 300, policy: lfu}", "", "{tier: rocksdb, cache_rows: 301}"},
       "rowwise_adagrad", "adam"},
      {"rocksdb_lazy_adam_adagrad", {"{tier: rocksdb, cache_rows: 270, policy: lru}"}, "adam",
       "adagrad"},
      // 16-bit tables: checkpoints hold the stored bytes (F16 / BF16 tensors, RocksDB values).
      {"memory_16bit", {"", "{dtype: bf16}", "{dtype: fp16, rounding: nearest}"},
       "rowwise_adagrad", "adam"},
      {"rocksdb_16bit", {"{tier: rocksdb, cache_rows: 300, dtype: bf16}", "{dtype: fp16}"},
       "rowwise_adagrad", "adam"},
  };
  for (const RunSetup& s : setups) {
    SCOPED_TRACE(s.name);
    // 27 steps = 2.7 epochs: the resume crosses an epoch boundary of shuffled batches.
    auto straight = MakeConfig(s, dir_ / (s.name + "_straight"), 27, 0);
    ASSERT_TRUE(straight.ok()) << straight.status();
    auto a = Run(*straight);
    ASSERT_TRUE(a.ok()) << a.status();

    // Stop at step 17 (checkpoints at 5, 10, 15), then rerun the full config: it resumes from
    // ckpt-15, so steps 16 and 17 are done twice, as after a crash.
    const fs::path out = dir_ / (s.name + "_resumed");
    auto first = MakeConfig(s, out, 17, 5);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(Run(*first).ok());
    EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-15\n");
    EXPECT_FALSE(fs::exists(out / "checkpoints" / "ckpt-5"));
    EXPECT_TRUE(fs::exists(out / "checkpoints" / "ckpt-10" / "state.safetensors"));
    EXPECT_TRUE(fs::exists(out / "checkpoints" / "ckpt-15" / "state.safetensors"));
    if (!s.storage.empty() && absl::StrContains(s.storage[0], "rocksdb")) {
      EXPECT_TRUE(fs::exists(out / "checkpoints" / "ckpt-15" / "tables" / "t0" / "CURRENT"));
    }
    auto second = MakeConfig(s, out, 27, 5);
    ASSERT_TRUE(second.ok());
    auto b = Run(*second);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->steps, 27);
    EXPECT_EQ(b->samples, 12 * 128);  // only the steps after ckpt-15 ran
    EXPECT_THAT(ReadFile(out / "metrics.jsonl"), HasSubstr("\"resumed_from\""));
    EXPECT_TRUE(ReadFile(a->export_path) == ReadFile(b->export_path))
        << s.name << ": the resumed run's model differs from the uninterrupted one";
    EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-25\n");
    EXPECT_TRUE(fs::exists(out / "checkpoints" / "ckpt-20"));
    EXPECT_FALSE(fs::exists(out / "checkpoints" / "ckpt-15"));
  }
}

// A checkpoint of fp32 tables (as every checkpoint written before 16-bit storage) resumes into
// 16-bit tables: its F32 weights are rounded to nearest on load.
TEST_F(CheckpointTest, Fp32CheckpointLoadsInto16BitTables) {
  const fs::path out = dir_ / "fp32_then_bf16";
  auto fp32 = MakeConfig({"fp32", {}, "rowwise_adagrad", "adam"}, out, 10, 5);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE(Run(*fp32).ok());
  auto bf16 = MakeConfig({"bf16", {"{dtype: bf16}", "{dtype: fp16}", "{dtype: bf16}"},
                          "rowwise_adagrad", "adam"},
                         out, 12, 5);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  auto b = Run(*bf16);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->samples, 2 * 128);  // resumed from ckpt-10
}

TEST_F(CheckpointTest, ResumeFalseStartsOverAndReplacesTheCheckpoints) {
  const RunSetup s{"x", {"{tier: rocksdb, cache_rows: 300}"}, "rowwise_adagrad", "adam"};
  auto straight = MakeConfig(s, dir_ / "straight", 12, 0);
  ASSERT_TRUE(straight.ok());
  auto a = Run(*straight);
  ASSERT_TRUE(a.ok()) << a.status();
  const fs::path out = dir_ / "out";
  auto first = MakeConfig(s, out, 10, 5);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Run(*first).ok());
  auto again = MakeConfig(s, out, 12, 5, /*resume=*/false);
  ASSERT_TRUE(again.ok());
  auto b = Run(*again);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->samples, 12 * 128);
  EXPECT_TRUE(ReadFile(a->export_path) == ReadFile(b->export_path));
  EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-10\n");
}

TEST_F(CheckpointTest, RefusesACheckpointOfAnotherRun) {
  const RunSetup memory{"m", {}, "rowwise_adagrad", "sgd"};
  const RunSetup tiered{"t", {"{tier: rocksdb, cache_rows: 300}"}, "rowwise_adagrad", "sgd"};
  const fs::path out = dir_ / "out";
  auto first = MakeConfig(memory, out, 5, 5);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Run(*first).ok());

  auto other_seed = MakeConfig(memory, out, 10, 5, true, /*seed=*/12);
  ASSERT_TRUE(other_seed.ok());
  auto r = Run(*other_seed);
  ASSERT_FALSE(r.ok());
  // Refused before anything is restored, naming the key (trainer/internal/run_fingerprint.h).
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("seed: '11' there, '12' here"));

  auto moved = MakeConfig(tiered, out, 10, 5);
  ASSERT_TRUE(moved.ok());
  r = Run(*moved);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 't0'"));

  std::ofstream(out / "checkpoints" / "LATEST") << "ckpt-99\n";
  auto broken = MakeConfig(memory, out, 10, 5);
  ASSERT_TRUE(broken.ok());
  r = Run(*broken);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("ckpt-99"));
}

TEST_F(CheckpointTest, StaleTmpDirectoriesAreIgnoredAndRemoved) {
  const RunSetup s{"m", {}, "rowwise_adagrad", "sgd"};
  const fs::path out = dir_ / "out";
  fs::create_directories(out / "checkpoints" / "ckpt-3.tmp" / "junk");
  auto c = MakeConfig(s, out, 5, 5);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(Run(*c).ok());
  EXPECT_FALSE(fs::exists(out / "checkpoints" / "ckpt-3.tmp"));
  EXPECT_EQ(ReadFile(out / "checkpoints" / "LATEST"), "ckpt-5\n");
}

}  // namespace
}  // namespace tessera
