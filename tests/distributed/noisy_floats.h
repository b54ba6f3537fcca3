// Test values whose float sum depends on the order they are added in (magnitudes 2^-15 .. 2^15,
// both signs): what the all-reduce tests sum to check that a sum's order, and so its bits, is the
// reference's.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace tessera::testing {

inline std::vector<float> NoisyFloats(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 3);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = (rng.NextUniform() - 0.5f) * std::exp2(std::floor(rng.NextUniform() * 30) - 15);
  }
  return v;
}

}  // namespace tessera::testing
