// SlotCache: the bookkeeping of the tiered store's row cache (not the row data itself): which
// row each slot holds, a row -> slot hash map, dirty and pinned flags, and the eviction order.
//
// Pinned slots are taken out of the eviction order while pinned and put back when unpinned, so
// Victim() only ever sees evictable slots and a pinned row cannot be evicted by construction.
//   LRU: one intrusive doubly linked list; unpinning appends at the most-recent end.
//   LFU: one such list per use count (steps the row was used in since it was cached), in an
//        ordered map; the victim is the least recent row of the lowest count.
// Not thread-safe (the training thread owns it).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "embedding/tiered_row_store.h"

namespace tessera::internal {

class SlotCache {
 public:
  SlotCache(int64_t capacity, CachePolicy policy);
  SlotCache(const SlotCache&) = delete;
  SlotCache& operator=(const SlotCache&) = delete;

  int64_t capacity() const { return capacity_; }
  int64_t resident() const { return static_cast<int64_t>(map_.size()); }
  int64_t pinned_count() const { return static_cast<int64_t>(pinned_.size()); }

  // The slot holding `row`, or -1.
  int32_t Find(int64_t row) const {
    auto it = map_.find(row);
    return it == map_.end() ? -1 : it->second;
  }
  int64_t row(int32_t slot) const { return row_[slot]; }
  bool pinned(int32_t slot) const { return pinned_flag_[slot] != 0; }
  bool dirty(int32_t slot) const { return dirty_[slot] != 0; }
  void set_dirty(int32_t slot, bool dirty) { dirty_[slot] = dirty ? 1 : 0; }

  // Pins a resident slot until UnpinAll (no-op if already pinned).
  void Pin(int32_t slot);
  // Gives `row` (not resident) a pinned, clean slot: a free one, or the eviction victim. Sets
  // *evicted_row to the victim's row (or -1) and *evicted_dirty to its dirty flag; the caller
  // must save a dirty victim's data before overwriting the slot. Returns -1 (and changes nothing)
  // when every slot is pinned.
  int32_t Install(int64_t row, int64_t* evicted_row, bool* evicted_dirty);
  // Forgets `row` (resident, not pinned): its slot becomes free, clean. Returns false (and
  // changes nothing) when the row is not resident or is pinned.
  bool Remove(int64_t row);
  // Unpins every pinned slot, marking it dirty when `mark_dirty`, and counts one use for LFU.
  void UnpinAll(bool mark_dirty);
  // Forgets every row (all slots free, clean and unpinned), as after construction.
  void Clear();
  // Slots of resident rows (any order).
  std::vector<int32_t> ResidentSlots() const;

 private:
  struct List {
    int32_t head = -1;  // least recent
    int32_t tail = -1;  // most recent
  };
  List& ListOf(int32_t slot);
  void Append(List& list, int32_t slot);
  void Unlink(List& list, int32_t slot);
  void OrderInsert(int32_t slot);
  void OrderRemove(int32_t slot);
  int32_t Victim();

  int64_t capacity_;
  CachePolicy policy_;
  absl::flat_hash_map<int64_t, int32_t> map_;
  std::vector<int64_t> row_;
  std::vector<int32_t> prev_, next_;
  std::vector<uint32_t> uses_;
  std::vector<uint8_t> dirty_, pinned_flag_;
  std::vector<int32_t> free_;    // free slots (stack)
  std::vector<int32_t> pinned_;  // slots pinned this step
  List lru_;
  absl::btree_map<uint32_t, List> lfu_;
};

}  // namespace tessera::internal
