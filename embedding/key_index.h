// KeySlotIndex: a dynamic table's map from raw 64-bit keys to row slots. Open addressing with
// linear probing over a fixed power-of-two array of (key, slot + 1) entries, 16 bytes each,
// sized once for the table's capacity at a load of at most 1/2; deletion shifts the following
// entries back (no tombstones), so probe lengths stay those of a table that never deleted.
//
// Why our own and not absl::flat_hash_map (the one hash map the build links): (1) the layout,
// and so every probe length, depends on the keys held alone, not on a per-process hash seed
// (absl salts its hashes per process), so runs and ranks agree on the measured probe lengths;
// (2) memory is fixed at creation (no rehash doubling under a stream of new keys: RSS stays
// flat); (3) one lookup is one hash and a short linear scan that the next key's prefetch
// overlaps, and it reports its probe length for the table's stats.
// bench/embedding_dynamic_bench.cc measures the lookup rate beside the row gather.
// Thread-safety: Find and Prefetch may run concurrently; Insert and Erase need the only caller.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/rng.h"

namespace tessera {

class KeySlotIndex {
 public:
  // An empty index for up to `max_keys` (> 0) keys: 2 * max_keys buckets rounded up to a power
  // of two, zero-filled lazily (huge pages when large). ResourceExhausted when memory is short,
  // InvalidArgument for max_keys <= 0 or too large to address.
  static absl::StatusOr<KeySlotIndex> Create(int64_t max_keys);

  KeySlotIndex() = default;
  KeySlotIndex(KeySlotIndex&& o) noexcept { *this = std::move(o); }
  KeySlotIndex& operator=(KeySlotIndex&& o) noexcept;
  KeySlotIndex(const KeySlotIndex&) = delete;
  KeySlotIndex& operator=(const KeySlotIndex&) = delete;
  ~KeySlotIndex();

  // The slot of `key`, or -1. Adds the buckets examined (the hit or the empty bucket that ended
  // the search, and those before it: >= 1) to *probes.
  int64_t Find(uint64_t key, int64_t* probes) const {
    uint64_t i = Home(key);
    int64_t n = 1;
    while (true) {
      const Entry& e = entries_[i];
      if (e.slot1 == 0) {
        *probes += n;
        return -1;
      }
      if (e.key == key) {
        *probes += n;
        return static_cast<int64_t>(e.slot1 - 1);
      }
      i = (i + 1) & mask_;
      ++n;
    }
  }
  // Starts loading `key`'s home bucket into the cache.
  void Prefetch(uint64_t key) const { __builtin_prefetch(&entries_[Home(key)]); }

  // Adds key -> slot (slot >= 0). REQUIRES: key absent and size() < max_keys() (checked).
  void Insert(uint64_t key, int64_t slot);
  // Removes `key`; false when it was absent.
  bool Erase(uint64_t key);

  int64_t size() const { return size_; }
  int64_t max_keys() const { return max_keys_; }
  int64_t buckets() const { return static_cast<int64_t>(mask_ + 1); }
  int64_t bytes() const { return buckets() * static_cast<int64_t>(sizeof(Entry)); }

 private:
  struct Entry {
    uint64_t key;
    uint64_t slot1;  // slot + 1; 0: empty bucket
  };
  uint64_t Home(uint64_t key) const { return Mix64(key ^ 0x6b79d3e1a5c2f047ull) & mask_; }

  Entry* entries_ = nullptr;
  uint64_t mask_ = 0;
  int64_t size_ = 0;
  int64_t max_keys_ = 0;
};

}  // namespace tessera
