// Learning-rate schedule, as the MLPerf DLRM-DCNv2 reference (facebookresearch/dlrm's
// LRPolicyScheduler, with the polynomial decay generalised to `decay_power` and `end_lr`): linear
// warm-up, constant, then polynomial decay to `end_lr`, constant after. For 0-based step s,
// W = warmup_steps, D = decay_start, N = decay_steps, p = decay_power:
//   s < W                      base_lr * (s + 1) / W       (the reference's 1-based step count:
//                                                          step 0 gets base/W, step W-1 base_lr)
//   D >= 0 and D <= s < D + N  end_lr + (base_lr - end_lr) * (1 - (s - D) / N)^p
//   D >= 0 and s >= D + N      end_lr
//   otherwise                  base_lr
// Warm-up wins where it overlaps the decay. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace tessera {

struct LrScheduleOptions {
  float base_lr = 0.1f;
  int64_t warmup_steps = 0;     // Default: 0 (no warm-up)
  int64_t decay_start = -1;     // Default: -1 (no decay)
  int64_t decay_steps = 0;      // Default: 0 (with decay_start >= 0: drop straight to end_lr)
  float decay_power = 2.0f;     // Default: 2 (MLPerf)
  float end_lr = 0.0f;          // Default: 0
};

// The learning rate of 0-based `step` (negative steps count as 0).
float LearningRate(const LrScheduleOptions& options, int64_t step);

// InvalidArgument naming the field unless base_lr and end_lr are finite and >= 0, warmup_steps
// >= 0, decay_start >= -1, decay_steps >= 0 and decay_power is finite and > 0.
absl::Status ValidateLrSchedule(const LrScheduleOptions& options);

}  // namespace tessera
