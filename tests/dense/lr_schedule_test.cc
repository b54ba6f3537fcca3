// LR schedule: warm-up, constant, polynomial decay and the end value, against the formulas in
// dense/lr_schedule.h evaluated here in double; and option validation.
#include "dense/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(LrScheduleTest, ConstantWithoutWarmupOrDecay) {
  LrScheduleOptions o;
  o.base_lr = 0.25f;
  for (int64_t s : {0, 1, 100, 1000000}) EXPECT_EQ(LearningRate(o, s), 0.25f);
}

TEST(LrScheduleTest, WarmupThenConstantThenPolynomialDecayThenEnd) {
  LrScheduleOptions o;
  o.base_lr = 2.0f;
  o.warmup_steps = 4;
  o.decay_start = 10;
  o.decay_steps = 5;
  o.decay_power = 2.0f;
  o.end_lr = 0.5f;
  // Warm-up, hand-computed: base * (s + 1) / 4.
  EXPECT_FLOAT_EQ(LearningRate(o, 0), 0.5f);
  EXPECT_FLOAT_EQ(LearningRate(o, 1), 1.0f);
  EXPECT_FLOAT_EQ(LearningRate(o, 2), 1.5f);
  EXPECT_FLOAT_EQ(LearningRate(o, 3), 2.0f);
  for (int64_t s = 4; s < 10; ++s) EXPECT_EQ(LearningRate(o, s), 2.0f) << s;
  // Decay, hand-computed: 0.5 + 1.5 * (1 - (s - 10) / 5)^2.
  EXPECT_FLOAT_EQ(LearningRate(o, 10), 2.0f);
  EXPECT_FLOAT_EQ(LearningRate(o, 11), 0.5f + 1.5f * 0.64f);
  EXPECT_FLOAT_EQ(LearningRate(o, 12), 0.5f + 1.5f * 0.36f);
  EXPECT_FLOAT_EQ(LearningRate(o, 13), 0.5f + 1.5f * 0.16f);
  EXPECT_FLOAT_EQ(LearningRate(o, 14), 0.5f + 1.5f * 0.04f);
  for (int64_t s : {15, 16, 1000}) EXPECT_EQ(LearningRate(o, s), 0.5f) << s;
  // Monotone non-increasing from the end of warm-up on.
  for (int64_t s = 4; s < 20; ++s) EXPECT_LE(LearningRate(o, s + 1), LearningRate(o, s)) << s;
}

TEST(LrScheduleTest, MlperfShapedScheduleAgainstFormula) {
  // MLPerf DLRM-DCNv2-like numbers, checked against the header's formula in double.
  LrScheduleOptions o;
  o.base_lr = 0.004f;
  o.warmup_steps = 8000;
  o.decay_start = 48000;
  o.decay_steps = 24000;
  o.decay_power = 2.0f;
  o.end_lr = 0.0f;
  for (int64_t s : {0, 1, 3999, 7999, 8000, 30000, 47999, 48000, 50000, 60000, 71999, 72000}) {
    double want;
    if (s < 8000) {
      want = 0.004 * (s + 1) / 8000.0;
    } else if (s < 48000) {
      want = 0.004;
    } else if (s < 72000) {
      want = 0.004 * std::pow(1.0 - (s - 48000) / 24000.0, 2.0);
    } else {
      want = 0.0;
    }
    EXPECT_NEAR(LearningRate(o, s), want, 1e-7 * 0.004) << "step " << s;
  }
}

TEST(LrScheduleTest, DecayPowerOneIsLinearAndNegativeStepIsStepZero) {
  LrScheduleOptions o;
  o.base_lr = 1.0f;
  o.decay_start = 0;
  o.decay_steps = 4;
  o.decay_power = 1.0f;
  EXPECT_FLOAT_EQ(LearningRate(o, 1), 0.75f);
  EXPECT_FLOAT_EQ(LearningRate(o, 3), 0.25f);
  EXPECT_EQ(LearningRate(o, 4), 0.0f);
  EXPECT_EQ(LearningRate(o, -5), LearningRate(o, 0));
}

TEST(LrScheduleTest, ValidationNamesTheField) {
  LrScheduleOptions o;
  EXPECT_TRUE(ValidateLrSchedule(o).ok());
  o.warmup_steps = -1;
  EXPECT_NE(ValidateLrSchedule(o).message().find("warmup_steps = -1"), std::string::npos);
  o = LrScheduleOptions();
  o.decay_power = 0.0f;
  EXPECT_NE(ValidateLrSchedule(o).message().find("decay_power"), std::string::npos);
  o = LrScheduleOptions();
  o.base_lr = std::nanf("");
  EXPECT_EQ(ValidateLrSchedule(o).code(), absl::StatusCode::kInvalidArgument);
  o = LrScheduleOptions();
  o.decay_start = -2;
  EXPECT_NE(ValidateLrSchedule(o).message().find("decay_start = -2"), std::string::npos);
}

}  // namespace
}  // namespace tessera
