// Wall-clock timing: Stopwatch for one interval, PhaseTimes to accumulate named phases of a
// training step (data, lookup, forward, backward, ...). Not thread-safe; one per loop.
#pragma once

#include <chrono>
#include <utility>
#include <vector>
#include <string>

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
  void Add(const std::string& phase, double seconds);
  double Get(const std::string& phase) const;
  double Total() const;
  void Clear();
  // Phases in first-added order with their seconds.
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }

 private:
  std::vector<std::pair<std::string, double>> phases_;
};

// Adds the time from construction to destruction to `times` under `phase`.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimes* times, std::string phase) : times_(times), phase_(std::move(phase)) {}
  ~ScopedPhase() {
    if (times_ != nullptr) times_->Add(phase_, watch_.ElapsedSeconds());
  }

 private:
  PhaseTimes* times_;
  std::string phase_;
  Stopwatch watch_;
};

}  // namespace tessera
