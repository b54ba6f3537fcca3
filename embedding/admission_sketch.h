// AdmissionSketch: how often each key not yet in a dynamic table was looked up, in fixed memory.
// A count-min sketch with 2 hashes over one power-of-two array of saturating 16-bit counters,
// with conservative update (an Add raises only the counters below the new estimate), so the
// estimate of a key is never below its true count and is exact unless both its counters are
// shared with heavier keys. The hashes are keyed by (seed, table), so the counts are the same on
// any rank and run. Adds since the last Commit can be undone exactly (an evaluation forward, a
// skipped step), from a log of the counters' old values.
// Thread-safety: none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace tessera {

class AdmissionSketch {
 public:
  AdmissionSketch() = default;
  // `slots` counters (rounded up to a power of two, at least 64), hashes keyed by `salt`.
  AdmissionSketch(int64_t slots, uint64_t salt) : salt_(salt) {
    uint64_t n = 64;
    while (n < static_cast<uint64_t>(slots)) n <<= 1;
    counters_.assign(n, 0);
    mask_ = n - 1;
  }

  // Counts `n` more lookups of `key` and returns its estimated count (saturating at 65535).
  uint32_t Add(uint64_t key, uint32_t n) {
    const uint64_t h = HashCombine(salt_, key);
    const uint64_t a = h & mask_, b = (h >> 32 | h << 32) & mask_;
    const uint32_t est = std::min<uint32_t>(counters_[a], counters_[b]);
    const uint32_t want = std::min<uint32_t>(est + n, 65535u);
    Raise(a, want);
    if (b != a) Raise(b, want);
    return want;
  }
  // Forgets the undo log (the adds stand).
  void Commit() { undo_.clear(); }
  // Reverts every Add since the last Commit.
  void Undo() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) counters_[it->first] = it->second;
    undo_.clear();
  }

  int64_t slots() const { return static_cast<int64_t>(counters_.size()); }
  int64_t bytes() const { return slots() * 2; }
  // The counters, for checkpoints (Restore takes the same number back).
  const std::vector<uint16_t>& counters() const { return counters_; }
  std::vector<uint16_t>& mutable_counters() { return counters_; }

 private:
  void Raise(uint64_t i, uint32_t want) {
    if (counters_[i] < want) {
      undo_.emplace_back(i, counters_[i]);
      counters_[i] = static_cast<uint16_t>(want);
    }
  }

  uint64_t salt_ = 0;
  uint64_t mask_ = 0;
  std::vector<uint16_t> counters_;
  std::vector<std::pair<uint64_t, uint16_t>> undo_;
};

}  // namespace tessera
