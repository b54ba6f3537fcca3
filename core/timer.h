// Wall-clock timing: Stopwatch for one interval, PhaseTimes to accumulate named phases of a
// training step (data, lookup, forward, backward, ...). Not thread-safe; one per loop.
// A PhaseTimes may instead accumulate this process's CPU seconds (all threads) per phase
// (set_clock): on a machine shared with other jobs, the wall time of a phase includes whatever
// the scheduler gave them, its CPU time does not (tessera-bench --phase_clock cpu).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void Reset() { start_ = Clock::now(); }
  double ElapsedSeconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }
  double ElapsedMs() const { return ElapsedSeconds() * 1e3; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Accumulated seconds per phase name, in the order phases were first added.
class PhaseTimes {
 public:
  // The clock ScopedPhase reads for this accumulator. Default: kWall.
  enum class Clock { kWall, kProcessCpu };
  void set_clock(Clock clock) { clock_ = clock; }
  Clock clock() const { return clock_; }
  // Seconds of `clock` now (an arbitrary origin; differences are durations). kProcessCpu:
  // user + system seconds of all this process's threads.
  static double Now(Clock clock);

  // `end_wall` (CLOCK_MONOTONIC seconds, < 0: now) places the phase's trace span: ScopedPhase
  // on a wall clock passes its own end reading, so a span nests exactly around the spans it
  // timed (a reading taken later could shift it past a child's start after a preemption).
  void Add(const std::string& phase, double seconds, double end_wall = -1);
  double Get(const std::string& phase) const;
  double Total() const;
  void Clear();
  // Phases in first-added order with their seconds.
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }

 private:
  std::vector<std::pair<std::string, double>> phases_;
  Clock clock_ = Clock::kWall;
};

// Adds the time from construction to destruction (on the clock of `times`) to `times` under
// `phase`.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* times, std::string phase) : times_(times), phase_(std::move(phase)) {
    if (times_ != nullptr) start_ = PhaseTimes::Now(times_->clock());
  }
  ~ScopedPhase() {
    if (times_ == nullptr) return;
    const double end = PhaseTimes::Now(times_->clock());
    times_->Add(phase_, end - start_, times_->clock() == PhaseTimes::Clock::kWall ? end : -1);
  }

 private:
  PhaseTimes* times_;
  std::string phase_;
  double start_ = 0;
};

}  // namespace tessera
