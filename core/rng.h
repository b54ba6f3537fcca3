// Counter-based random numbers: every value is a pure function of (seed, stream, counter), so
// any row of any table can be initialised from (seed, table, row) alone, on any rank, tier or
// device, in any order. Header-only and usable from CUDA kernels.
//
// The generator is SplitMix64 applied to a counter keyed by a hash of (seed, stream). It is not
// cryptographic; it passes the usual statistical batteries for this use and is cheap.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace tessera {

// The SplitMix64 finaliser: a bijective mix of 64 bits.
TESSERA_HD_INLINE uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hashes two 64-bit words into one key; order matters.
TESSERA_HD_INLINE uint64_t HashCombine(uint64_t a, uint64_t b) {
  return Mix64(a ^ (Mix64(b) + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2)));
}

// A stream of random values keyed by (seed, stream). Value i of the stream is Bits(i); the
// stateful Next*() calls walk i = 0, 1, 2, ...
class CounterRng {
 public:
  TESSERA_HD CounterRng(uint64_t seed, uint64_t stream) : key_(HashCombine(seed, stream)) {}

  TESSERA_HD uint64_t Bits(uint64_t i) const { return Mix64(key_ ^ Mix64(i)); }
  TESSERA_HD uint64_t NextBits() { return Bits(counter_++); }
  // Uniform in [0, 1), 24 random bits.
  TESSERA_HD float NextUniform() {
    return static_cast<float>(NextBits() >> 40) * (1.0f / 16777216.0f);
  }
  // Uniform in [0, 1), 53 random bits.
  TESSERA_HD double NextUniformDouble() {
    return static_cast<double>(NextBits() >> 11) * (1.0 / 9007199254740992.0);
  }
  // Standard normal by Box-Muller (one value per call, two draws).
  TESSERA_HD float NextNormal() {
    double u1 = (static_cast<double>(NextBits() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = NextUniformDouble();
    return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
  // Uniform integer in [0, n), n > 0 (multiply-shift; bias below 2^-32 for n < 2^32).
  TESSERA_HD uint64_t NextBelow(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(NextBits()) * n) >> 64);
  }
  TESSERA_HD void Seek(uint64_t i) { counter_ = i; }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace tessera
