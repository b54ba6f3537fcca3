#include "dense/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tessera {

float LearningRate(const LrScheduleOptions& o, int64_t step) {
  step = std::max<int64_t>(step, 0);
  const double base = o.base_lr, end = o.end_lr;
  if (o.warmup_steps > 0 && step < o.warmup_steps) {
    return static_cast<float>(base * static_cast<double>(step + 1) /
                              static_cast<double>(o.warmup_steps));
  }
  if (o.decay_start >= 0 && step >= o.decay_start) {
    const int64_t into = step - o.decay_start;
    if (into >= o.decay_steps) return o.end_lr;
    const double frac = 1.0 - static_cast<double>(into) / static_cast<double>(o.decay_steps);
    return static_cast<float>(end + (base - end) * std::pow(frac, o.decay_power));
  }
  return o.base_lr;
}

absl::Status ValidateLrSchedule(const LrScheduleOptions& o) {
  auto bad = [](const char* field, auto value, const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("LrScheduleOptions.", field, " = ", value, " ", rule));
  };
  if (!(o.base_lr >= 0.0f && std::isfinite(o.base_lr))) {
    return bad("base_lr", o.base_lr, "must be finite and >= 0");
  }
  if (!(o.end_lr >= 0.0f && std::isfinite(o.end_lr))) {
    return bad("end_lr", o.end_lr, "must be finite and >= 0");
  }
  if (o.warmup_steps < 0) return bad("warmup_steps", o.warmup_steps, "must be >= 0");
  if (o.decay_start < -1) return bad("decay_start", o.decay_start, "must be >= -1 (-1: none)");
  if (o.decay_steps < 0) return bad("decay_steps", o.decay_steps, "must be >= 0");
  if (!(o.decay_power > 0.0f && std::isfinite(o.decay_power))) {
    return bad("decay_power", o.decay_power, "must be finite and > 0");
  }
  return absl::OkStatus();
}

}  // namespace tessera
