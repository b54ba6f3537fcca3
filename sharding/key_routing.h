// Where a dynamic table's key lives when the table is sharded (embedding/dynamic_table_config.h):
// a key stands for the pseudo-row DynamicKeyRow(key, capacity) in [0, capacity), a hash of the
// key scaled to the table's rows, and the plan's row ranges route it as they route a static
// table's rows: a row-wise shard of rows [r0, r1) owns the keys whose pseudo-row falls there and
// holds at most r1 - r0 of them (its share of capacity_rows); column shards of a row range hold
// the same keys, each its columns. The hash is independent of the one the shard's KeySlotIndex
// uses, and depends on the key alone, so any world shape, resume or reshard routes a key alike.
// Header-only on core/. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace tessera {

inline int64_t DynamicKeyRow(int64_t key, int64_t capacity) {
  const uint64_t h = Mix64(static_cast<uint64_t>(key) ^ 0x5348415244000001ull);
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(capacity)) >> 64);
}

}  // namespace tessera
