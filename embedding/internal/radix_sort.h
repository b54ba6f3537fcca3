// Parallel stable LSD radix sort of non-negative 64-bit keys on a range of their bits. The
// backward pass sorts keys that pack (slot << position_bits | position); sorting on the slot bits
// only is enough because the keys start in position order and the sort is stable.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::embedding_internal {

// Sorts keys[0, n) stably by bits [lo_bit, hi_bit) (0 <= lo_bit <= hi_bit <= 63), using `tmp`
// (room for n keys) as the other half of a ping-pong buffer and `histogram` as scratch (grown
// as needed). Returns the array that holds the result: `keys` or `tmp`. The result is the same
// for any thread count.
int64_t* RadixSortBits(int64_t* keys, int64_t* tmp, int64_t n, int lo_bit, int hi_bit,
                       std::vector<int64_t>* histogram);

// Bits needed to write x >= 0 (0 for x == 0).
inline int BitWidth(int64_t x) {
  int bits = 0;
  while (x > 0) {
    ++bits;
    x >>= 1;
  }
  return bits;
}

}  // namespace tessera::embedding_internal
