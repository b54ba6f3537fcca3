// Learning-rate schedule, as the MLPerf DLRM-DCNv2 reference: linear warm-up from 0 over
// `warmup_steps`, constant, then polynomial decay from `decay_start` over `decay_steps` to
// `end_lr` with exponent `decay_power`, constant after.
#pragma once

#include <cstdint>

namespace tessera {

struct LrScheduleOptions {
  float base_lr = 0.1f;
  int64_t warmup_steps = 0;     // Default: 0 (no warm-up)
  int64_t decay_start = -1;     // Default: -1 (no decay)
  int64_t decay_steps = 0;
  float decay_power = 2.0f;     // Default: 2 (MLPerf)
  float end_lr = 0.0f;          // Default: 0
};

// The learning rate of 0-based `step`.
float LearningRate(const LrScheduleOptions& options, int64_t step);

}  // namespace tessera
