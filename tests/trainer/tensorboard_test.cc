// trainer/tensorboard.h: CRC-32C against its published check value, TFRecord framing that
// detects corruption, Event messages that decode back to what was written, and an event file
// written by a run's RunLog that holds the metrics lines' scalars. TensorBoard's own reader is
// run on a real run directory by tests/trainer/eval_only_check.sh (tensorboard_check.py) when
// PyPI's tensorboard is installed.
#include "trainer/tensorboard.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/trainer/tier_test_util.h"
#include "trainer/run_log.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(TensorBoardTest, Crc32cCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);  // the CRC-32C check value (RFC 3720 family)
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), Crc32c("123456789"));  // continues
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
}

TEST(TensorBoardTest, FramingRoundTripsAndDetectsCorruption) {
  const std::string a = "first", b(1000, 'x');
  std::string file = FrameTfRecord(a) + FrameTfRecord(b) + FrameTfRecord("");
  EXPECT_EQ(file.size(), 3 * 16 + a.size() + b.size());
  auto records = ParseTfRecords(file, "f");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(*records, (std::vector<std::string>{a, b, ""}));
  for (size_t pos : {size_t{0}, size_t{9}, size_t{14}, file.size() - 1}) {
    std::string bad = file;
    bad[pos] ^= 0x20;
    auto r = ParseTfRecords(bad, "f");
    ASSERT_FALSE(r.ok()) << "flip at " << pos;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(r.status().message(), HasSubstr("f: record at byte"));
  }
  EXPECT_FALSE(ParseTfRecords(file.substr(0, file.size() - 2), "f").ok());  // truncated
}

TEST(TensorBoardTest, EventsDecodeToWhatWasWritten) {
  auto version = DecodeEvent(EncodeFileVersionEvent(1.5e9));
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->wall_time, 1.5e9);
  EXPECT_EQ(version->file_version, "brain.Event:2");
  const Scalars scalars = {{"train/loss", 0.25f}, {"eval/auc", 0.8125f}};
  auto ev = DecodeEvent(EncodeScalarsEvent(1.7e9, 123456789012, scalars));
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->step, 123456789012);
  EXPECT_EQ(ev->wall_time, 1.7e9);
  EXPECT_EQ(ev->scalars, scalars);
  // The bytes protoc would write for Value{tag: "a", simple_value: 1}: 0a 01 61 15 00 00 80 3f.
  const std::string e = EncodeScalarsEvent(0, 0, {{"a", 1.0f}});
  EXPECT_THAT(e, HasSubstr(std::string("\x0a\x01\x61\x15\x00\x00\x80\x3f", 8)));
  EXPECT_FALSE(DecodeEvent(std::string("\x2a\x05\x0a", 3)).ok());  // length past the end
}

TEST(TensorBoardTest, MetricsLinesBecomeGroupedScalars) {
  int64_t step = -1;
  JsonLine line;
  line.Add("step", int64_t{40})
      .Add("train_loss", 0.5)
      .Add("samples_per_sec", 1e5)
      .Add("ms_interaction+mlp fwd", 2.0)
      .Add("eval_auc", 0.0 / 0.0);  // not finite: left out
  EXPECT_THAT(TensorBoardScalars(line, &step),
              ::testing::ElementsAre(Pair("train/loss", 0.5f), Pair("train/samples_per_sec", 1e5f),
                                     Pair("phase_ms/interaction_mlp_fwd", 2.0f)));
  EXPECT_EQ(step, 40);
  JsonLine tier;
  tier.Add("step", int64_t{8}).Add("tier_table", std::string("t0")).Add("tier_hit_rate", 0.75);
  EXPECT_THAT(TensorBoardScalars(tier, &step),
              ::testing::ElementsAre(Pair("tier/t0/hit_rate", 0.75f)));
  JsonLine done;
  done.Add("status", std::string("done")).Add("step", int64_t{9}).Add("train_loss", 0.1);
  EXPECT_TRUE(TensorBoardScalars(done, &step).empty());
}

class RunLogEventsTest : public tiertest::TempDirTest {};

TEST_F(RunLogEventsTest, RunLogWritesAReadableEventFile) {
  RunLogOptions o;
  o.tensorboard_dir = dir_.string();
  auto log = RunLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE((*log)->Write(JsonLine().Add("step", int64_t{5}).Add("train_loss", 0.75)).ok());
  ASSERT_TRUE((*log)->Write(JsonLine().Add("step", int64_t{10}).Add("eval_ne", 0.9)).ok());
  log->reset();
  std::string path;
  for (const auto& entry : fs::directory_iterator(dir_)) path = entry.path().string();
  ASSERT_THAT(path, HasSubstr("events.out.tfevents."));
  auto records = ParseTfRecords(tiertest::ReadFile(path), path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  auto first = DecodeEvent((*records)[0]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->file_version, "brain.Event:2");
  auto second = DecodeEvent((*records)[1]);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->step, 5);
  EXPECT_THAT(second->scalars, ::testing::ElementsAre(Pair("train/loss", 0.75f)));
  auto third = DecodeEvent((*records)[2]);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->step, 10);
  EXPECT_THAT(third->scalars, ::testing::ElementsAre(Pair("eval/ne", 0.9f)));
}

}  // namespace
}  // namespace tessera
