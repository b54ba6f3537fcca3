// The run directory between runs (trainer/internal/run_dir.h): a resume into another model or
// optimizer is refused naming the keys; a resumed run's metrics and TensorBoard events continue
// from the checkpoint's step without repeating steps; a fresh run moves an earlier run's files
// aside; a stop signal ends a run with a checkpoint and the model, and the resume is
// bit-identical to a run never stopped.
#include <csignal>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/internal/run_dir.h"
#include "trainer/internal/run_fingerprint.h"
#include "trainer/stop_signal.h"
#include "trainer/tensorboard.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

class RunDirResumeTest : public tiertest::TempDirTest {
 protected:
  void TearDown() override {
    SetStopSignalForTesting(0);
    tiertest::TempDirTest::TearDown();
  }
  absl::StatusOr<Config> MakeConfig(int64_t steps, const std::string& extra = "",
                                    const std::string& run = "run") {
    std::string yaml = tiertest::SmallTierYaml({}, "rowwise_adagrad", "adam") +
                       absl::StrCat("train: {steps: ", steps,
                                    ", log_every: 5, checkpoint_every: 10}\noutput: {dir: ",
                                    (dir_ / run).string(), ", progress: false}\n");
    std::vector<std::string> overrides;
    if (!extra.empty()) overrides = absl::StrSplit(extra, ' ');
    return ParseConfig(yaml, (dir_ / "c.yaml").string(), overrides);
  }
  absl::StatusOr<TrainSummary> Run(const Config& config) {
    auto trainer = Trainer::Create(config);
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run();
  }
  // Steps of the metrics lines with `key`, in file order.
  std::vector<int64_t> Steps(const std::string& text, const std::string& key) {
    std::vector<int64_t> out;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (line.find("\"" + key + "\"") == line.npos || line.find("\"status\"") != line.npos)
        continue;
      const size_t at = line.find("\"step\": ");
      out.push_back(std::stoll(std::string(line.substr(at + 8))));
    }
    return out;
  }
  // (tag, step) -> count over every event file of `dir`.
  std::map<std::pair<std::string, int64_t>, int> EventPoints(const fs::path& dir) {
    std::map<std::pair<std::string, int64_t>, int> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
      auto records = ParseTfRecords(ReadFile(e.path()), e.path().string());
      EXPECT_TRUE(records.ok()) << records.status();
      if (!records.ok()) continue;
      for (const std::string& r : *records) {
        auto event = DecodeEvent(r);
        EXPECT_TRUE(event.ok());
        for (const auto& [tag, value] : event->scalars) ++out[{tag, event->step}];
      }
    }
    return out;
  }
};

TEST_F(RunDirResumeTest, TrainingConfigTextHoldsModelAndOptimizerOnly) {
  auto c = MakeConfig(10);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text = internal::TrainingConfigText(*c);
  EXPECT_THAT(text, HasSubstr("optimizer.dense.lr: "));
  EXPECT_THAT(text, HasSubstr("model.tables[0].rows: 2000"));
  EXPECT_THAT(text, HasSubstr("seed: "));
  EXPECT_EQ(text.find("train.steps"), std::string::npos);
  EXPECT_EQ(text.find("output."), std::string::npos);
  EXPECT_EQ(text.find("init_from"), std::string::npos);
  auto longer = MakeConfig(50, "output.metrics=m.jsonl");
  ASSERT_TRUE(longer.ok());
  EXPECT_TRUE(internal::CheckResumeConfig(*longer, text, "ck").ok());
}

TEST_F(RunDirResumeTest, ResumeIntoAnotherModelOrOptimizerIsRefusedNamingTheKeys) {
  auto first = MakeConfig(10);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Run(*first).ok());
  const std::string config_before = ReadFile(dir_ / "run" / kEffectiveConfigFile);
  auto lr = MakeConfig(20, "optimizer.dense.lr=0.5");
  ASSERT_TRUE(lr.ok()) << lr.status();
  absl::StatusOr<TrainSummary> r = Run(*lr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("ckpt-10"));
  EXPECT_THAT(r.status().message(), HasSubstr("optimizer.dense.lr: "));
  EXPECT_THAT(r.status().message(), HasSubstr("'0.5' here"));
  EXPECT_THAT(r.status().message(), HasSubstr("train.resume=false"));
  EXPECT_THAT(r.status().message(), HasSubstr("output.dir"));
  // Nothing in the directory changed.
  EXPECT_EQ(ReadFile(dir_ / "run" / kEffectiveConfigFile), config_before);
  auto model = MakeConfig(20, "model.top_mlp=[32,1] model.tables.2.rows=400");
  ASSERT_TRUE(model.ok()) << model.status();
  r = Run(*model);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("model.top_mlp"));
  EXPECT_THAT(r.status().message(), HasSubstr("model.tables[2].rows: '300' there, '400' here"));
  // The run's length may change: that resumes.
  auto longer = MakeConfig(20);
  ASSERT_TRUE(longer.ok());
  EXPECT_TRUE(Run(*longer).ok());
}

TEST_F(RunDirResumeTest, ResumedLogsContinueFromTheCheckpointWithoutDuplicates) {
  auto straight = MakeConfig(30, "", "straight");
  ASSERT_TRUE(straight.ok()) << straight.status();
  ASSERT_TRUE(Run(*straight).ok());
  // A run that got to step 27 and died: its last checkpoint is ckpt-20, its logs went to 25.
  auto died = MakeConfig(27);
  ASSERT_TRUE(died.ok());
  ASSERT_TRUE(Run(*died).ok());
  fs::remove(dir_ / "run" / "model.safetensors");
  auto again = MakeConfig(30);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(Run(*again).ok());
  const std::string metrics = ReadFile(dir_ / "run" / "metrics.jsonl");
  EXPECT_EQ(Steps(metrics, "train_loss"),
            Steps(ReadFile(dir_ / "straight" / "metrics.jsonl"), "train_loss"));
  EXPECT_EQ(Steps(metrics, "resumed_from"), std::vector<int64_t>{20});
  for (const auto& [point, count] : EventPoints(dir_ / "run")) {
    EXPECT_EQ(count, 1) << point.first << " at step " << point.second;
  }
  EXPECT_EQ(EventPoints(dir_ / "run").size(), EventPoints(dir_ / "straight").size());
  EXPECT_EQ(ReadFile(dir_ / "run" / "model.safetensors"),
            ReadFile(dir_ / "straight" / "model.safetensors"));
}

TEST_F(RunDirResumeTest, AFreshRunMovesThePreviousRunsFilesAside) {
  auto first = MakeConfig(10);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Run(*first).ok());
  auto fresh = MakeConfig(10, "train.resume=false");
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(Run(*fresh).ok());
  int events = 0, aside = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "run")) {
    const std::string name = e.path().filename().string();
    events += name.rfind("events.out.tfevents.", 0) == 0;
    if (name.rfind("previous-", 0) == 0) {
      ++aside;
      EXPECT_TRUE(fs::exists(e.path() / "metrics.jsonl"));
      EXPECT_TRUE(fs::exists(e.path() / "checkpoints" / "LATEST"));
      EXPECT_TRUE(fs::exists(e.path() / "model.safetensors"));
    }
  }
  EXPECT_EQ(events, 1);
  EXPECT_EQ(aside, 1);
  EXPECT_EQ(Steps(ReadFile(dir_ / "run" / "metrics.jsonl"), "resumed_from").size(), 0u);
}

TEST_F(RunDirResumeTest, AStopSignalWritesACheckpointAndTheModelAndTheResumeIsBitIdentical) {
  auto straight = MakeConfig(25, "train.checkpoint_every=0", "straight");
  ASSERT_TRUE(straight.ok());
  ASSERT_TRUE(Run(*straight).ok());
  auto config = MakeConfig(25, "train.checkpoint_every=0");
  ASSERT_TRUE(config.ok());
  SetStopSignalForTesting(SIGTERM);  // seen after the first step
  absl::StatusOr<TrainSummary> r = Run(*config);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(r.status().message(), HasSubstr("stopped by SIGTERM after step 1 of 25"));
  EXPECT_THAT(r.status().message(), HasSubstr("Rerun the same command to resume from step 1"));
  EXPECT_EQ(ReadFile(dir_ / "run" / "checkpoints" / "LATEST"), "ckpt-1\n");
  EXPECT_TRUE(fs::exists(dir_ / "run" / "model.safetensors"));
  EXPECT_THAT(ReadFile(dir_ / "run" / "metrics.jsonl"), HasSubstr("\"status\": \"interrupted\""));
  SetStopSignalForTesting(0);
  ASSERT_TRUE(Run(*config).ok());
  EXPECT_EQ(ReadFile(dir_ / "run" / "model.safetensors"),
            ReadFile(dir_ / "straight" / "model.safetensors"));
}

// train.checkpoint_minutes: a checkpoint at the first step after that much wall time since the
// last (here every step: 1e-7 minutes), with checkpoint_every 0; 0 for both means none.
TEST_F(RunDirResumeTest, CheckpointsByTimeWithoutCheckpointEvery) {
  auto timed = MakeConfig(6, "train.checkpoint_every=0 train.checkpoint_minutes=0.0000001");
  ASSERT_TRUE(timed.ok()) << timed.status();
  ASSERT_TRUE(Run(*timed).ok());
  EXPECT_EQ(ReadFile(dir_ / "run" / "checkpoints" / "LATEST"), "ckpt-6\n");
  EXPECT_EQ(Steps(ReadFile(dir_ / "run" / "metrics.jsonl"), "checkpoint").size(), 6u);
  auto none = MakeConfig(6, "train.checkpoint_every=0 train.checkpoint_minutes=0", "none");
  ASSERT_TRUE(none.ok());
  ASSERT_TRUE(Run(*none).ok());
  EXPECT_FALSE(fs::exists(dir_ / "none" / "checkpoints" / "LATEST"));
  auto defaults = MakeConfig(6);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->train.checkpoint_minutes, 10);
}

}  // namespace
}  // namespace tessera
