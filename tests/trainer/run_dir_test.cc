// The run directory (trainer/trainer.h): the effective config is written there and loads back to
// the same config; the metrics log of a resumed run continues the interrupted run's lines
// instead of replacing them, and a fresh run (train.resume false) starts it over.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using tiertest::ReadFile;

class RunDirTest : public tiertest::TempDirTest {
 protected:
  absl::StatusOr<Config> MakeConfig(int64_t steps, bool resume) {
    std::string yaml = tiertest::SmallTierYaml({}, "rowwise_adagrad", "sgd") +
                       absl::StrCat("train: {steps: ", steps, ", log_every: 5, checkpoint_every: 10",
                                    ", resume: ", resume ? "true" : "false", "}\noutput: {dir: ",
                                    (dir_ / "run").string(), ", progress: false}\n");
    return ParseConfig(yaml, (dir_ / "c.yaml").string());
  }
  absl::StatusOr<TrainSummary> Run(const Config& config) {
    auto trainer = Trainer::Create(config);
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run();
  }
  int CountLines(const std::string& text, const std::string& needle) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) n += line.find(needle) != line.npos;
    return n;
  }
};

TEST_F(RunDirTest, EffectiveConfigIsWrittenAndLoadsBack) {
  auto config = MakeConfig(10, true);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(Run(*config).ok());
  const fs::path written = dir_ / "run" / kEffectiveConfigFile;
  ASSERT_TRUE(fs::exists(written));
  const std::string text = ReadFile(written);
  EXPECT_EQ(text, ConfigToYaml(*config));
  auto again = LoadConfig(written.string());
  ASSERT_TRUE(again.ok()) << again.status();
  // The same config, up to the first line (a comment naming the file it was read from).
  auto body = [](const std::string& yaml) { return yaml.substr(yaml.find('\n')); };
  EXPECT_EQ(body(ConfigToYaml(*again)), body(text));
  EXPECT_FALSE(fs::exists(written.string() + ".tmp"));
}

TEST_F(RunDirTest, ResumedRunAppendsToTheMetricsLog) {
  auto first = MakeConfig(10, true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Run(*first).ok());
  const fs::path metrics = dir_ / "run" / "metrics.jsonl";
  const std::string before = ReadFile(metrics);
  ASSERT_EQ(CountLines(before, "\"status\": \"done\""), 1);

  auto second = MakeConfig(20, true);  // resumes from ckpt-10
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(Run(*second).ok());
  const std::string after = ReadFile(metrics);
  ASSERT_EQ(after.substr(0, before.size()), before) << "the first run's lines were replaced";
  const std::string added = after.substr(before.size());
  EXPECT_THAT(added, HasSubstr("\"resumed_from\""));
  EXPECT_EQ(CountLines(after, "\"status\": \"done\""), 2);
  // The effective config is that of the run that ran last.
  auto last = LoadConfig((dir_ / "run" / kEffectiveConfigFile).string());
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->train.steps, 20);

  auto fresh = MakeConfig(10, false);  // starts over: a new log
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(Run(*fresh).ok());
  const std::string restarted = ReadFile(metrics);
  EXPECT_EQ(CountLines(restarted, "\"status\": \"done\""), 1);
  EXPECT_EQ(CountLines(restarted, "\"resumed_from\""), 0);
}

}  // namespace
}  // namespace tessera
