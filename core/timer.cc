#include "core/timer.h"

#include <time.h>

#include "core/trace.h"

namespace tessera {

double PhaseTimes::Now(Clock clock) {
  timespec ts;
  clock_gettime(clock == Clock::kProcessCpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void PhaseTimes::Add(const std::string& phase, double seconds, double end_wall) {
  if (trace::Recording()) trace::RecordPhase(this, phase, seconds, end_wall);
  for (auto& [name, total] : phases_) {
    if (name == phase) {
      total += seconds;
      return;
    }
  }
  phases_.emplace_back(phase, seconds);
}

double PhaseTimes::Get(const std::string& phase) const {
  for (const auto& [name, total] : phases_) {
    if (name == phase) return total;
  }
  return 0.0;
}

double PhaseTimes::Total() const {
  double t = 0;
  for (const auto& p : phases_) t += p.second;
  return t;
}

void PhaseTimes::Clear() { phases_.clear(); }

}  // namespace tessera
