#include "embedding/internal/tiered_cache.h"

#include <algorithm>
#include <limits>

#include "core/status.h"

namespace tessera::internal {

SlotCache::SlotCache(int64_t capacity, CachePolicy policy)
    : capacity_(capacity),
      policy_(policy),
      row_(capacity, -1),
      prev_(capacity, -1),
      next_(capacity, -1),
      uses_(capacity, 0),
      dirty_(capacity, 0),
      pinned_flag_(capacity, 0) {
  TESSERA_CHECK(capacity > 0 && capacity < std::numeric_limits<int32_t>::max())
      << "cache capacity " << capacity;
  map_.reserve(capacity);
  free_.reserve(capacity);
  // Hand out low slots first (a stack popped from the back).
  for (int64_t s = capacity - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

void SlotCache::Clear() {
  map_.clear();
  std::fill(row_.begin(), row_.end(), -1);
  std::fill(prev_.begin(), prev_.end(), -1);
  std::fill(next_.begin(), next_.end(), -1);
  std::fill(uses_.begin(), uses_.end(), 0);
  std::fill(dirty_.begin(), dirty_.end(), 0);
  std::fill(pinned_flag_.begin(), pinned_flag_.end(), 0);
  pinned_.clear();
  free_.clear();
  for (int64_t s = capacity_ - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
  lru_ = List();
  lfu_.clear();
}

SlotCache::List& SlotCache::ListOf(int32_t slot) {
  return policy_ == CachePolicy::kLru ? lru_ : lfu_[uses_[slot]];
}

void SlotCache::Append(List& list, int32_t slot) {
  prev_[slot] = list.tail;
  next_[slot] = -1;
  if (list.tail >= 0) {
    next_[list.tail] = slot;
  } else {
    list.head = slot;
  }
  list.tail = slot;
}

void SlotCache::Unlink(List& list, int32_t slot) {
  if (prev_[slot] >= 0) {
    next_[prev_[slot]] = next_[slot];
  } else {
    list.head = next_[slot];
  }
  if (next_[slot] >= 0) {
    prev_[next_[slot]] = prev_[slot];
  } else {
    list.tail = prev_[slot];
  }
  prev_[slot] = next_[slot] = -1;
}

void SlotCache::OrderInsert(int32_t slot) { Append(ListOf(slot), slot); }

void SlotCache::OrderRemove(int32_t slot) {
  if (policy_ == CachePolicy::kLru) {
    Unlink(lru_, slot);
    return;
  }
  auto it = lfu_.find(uses_[slot]);
  TESSERA_CHECK(it != lfu_.end()) << "slot " << slot << " not in the LFU order";
  Unlink(it->second, slot);
  // Drop empty buckets so that lfu_.begin() is always the lowest count in use.
  if (it->second.head < 0) lfu_.erase(it);
}

int32_t SlotCache::Victim() {
  if (policy_ == CachePolicy::kLru) return lru_.head;
  return lfu_.empty() ? -1 : lfu_.begin()->second.head;
}

void SlotCache::Pin(int32_t slot) {
  if (pinned_flag_[slot]) return;
  OrderRemove(slot);
  pinned_flag_[slot] = 1;
  pinned_.push_back(slot);
}

int32_t SlotCache::Install(int64_t row, int64_t* evicted_row, bool* evicted_dirty) {
  *evicted_row = -1;
  *evicted_dirty = false;
  int32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = Victim();
    if (slot < 0) return -1;
    OrderRemove(slot);
    *evicted_row = row_[slot];
    *evicted_dirty = dirty_[slot] != 0;
    map_.erase(row_[slot]);
  }
  row_[slot] = row;
  uses_[slot] = 0;
  dirty_[slot] = 0;
  pinned_flag_[slot] = 1;
  pinned_.push_back(slot);
  map_.emplace(row, slot);
  return slot;
}

bool SlotCache::Remove(int64_t row) {
  auto it = map_.find(row);
  if (it == map_.end() || pinned_flag_[it->second]) return false;
  const int32_t slot = it->second;
  OrderRemove(slot);
  map_.erase(it);
  row_[slot] = -1;
  uses_[slot] = 0;
  dirty_[slot] = 0;
  free_.push_back(slot);
  return true;
}

void SlotCache::UnpinAll(bool mark_dirty) {
  for (int32_t slot : pinned_) {
    pinned_flag_[slot] = 0;
    if (mark_dirty) dirty_[slot] = 1;
    if (uses_[slot] < std::numeric_limits<uint32_t>::max()) ++uses_[slot];
    OrderInsert(slot);
  }
  pinned_.clear();
}

std::vector<int32_t> SlotCache::ResidentSlots() const {
  std::vector<int32_t> out;
  out.reserve(map_.size());
  for (const auto& [row, slot] : map_) out.push_back(slot);
  return out;
}

}  // namespace tessera::internal
