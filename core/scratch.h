// Scratch vectors kept across calls (communication and sync buffers of tens to hundreds of MB).
#pragma once
#include <cstddef>
#include <vector>

namespace tessera {

// Room for `n` elements in `v`, a scratch vector whose contents the caller overwrites or zeroes
// after: where `n` is beyond its capacity, it is released and reserved a quarter beyond `n`, so
// a size that grows a little from call to call does not reallocate every time, and never grown
// through resize or assign alone, which copy the old contents into the new pages. (mlperf-mini
// on 2 emulated hosts x 2 ranks, N = 2, M = 2, average sync every 8 steps: one replica pair's
// 136 MB all-reduce scratch and sync buffer, each grown that way by a slightly larger union,
// took 0.9 s of page faults and copies per sync where the planner priced the sync at 0.24 s.)
template <typename T>
void ReserveScratch(std::vector<T>* v, size_t n) {
  if (n <= v->capacity()) return;
  std::vector<T>().swap(*v);
  v->reserve(n + n / 4);
}

}  // namespace tessera
