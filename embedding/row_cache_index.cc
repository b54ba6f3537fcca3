#include "embedding/row_cache_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera {

RowCacheIndex::RowCacheIndex(int64_t capacity, CachePolicy policy)
    : capacity_(capacity), policy_(policy), slots_(static_cast<size_t>(capacity)) {
  free_.reserve(static_cast<size_t>(capacity));
  for (int64_t s = capacity - 1; s >= 0; --s) free_.push_back(s);
}

RowCacheIndex::Key RowCacheIndex::KeyOf(int64_t slot) const {
  const Slot& s = slots_[slot];
  if (policy_ == CachePolicy::kLfu) return {s.uses, s.last_step, slot};
  return {s.last_step, 0, slot};
}

void RowCacheIndex::Pin(int64_t slot) {
  Slot& s = slots_[slot];
  if (s.pinned) return;
  evictable_.erase(KeyOf(slot));
  s.pinned = true;
  pinned_.push_back(slot);
}

int64_t RowCacheIndex::TakeSlot(RowCachePlan* plan) {
  if (!free_.empty()) {
    const int64_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  // Assign checked that enough slots are free or evictable.
  const int64_t slot = std::get<2>(*evictable_.begin());
  evictable_.erase(evictable_.begin());
  Slot& s = slots_[slot];
  ++counters_.evictions;
  if (s.dirty) {
    plan->writeback_slots.push_back(slot);
    plan->writeback_rows.push_back(s.row);
    ++counters_.writebacks;
    --dirty_count_;
  }
  slot_of_.erase(s.row);
  s = Slot();
  return slot;
}

absl::Status RowCacheIndex::Assign(absl::Span<const int64_t> ids, absl::Span<int64_t> slots,
                                   RowCachePlan* plan) {
  // Count first, so a step too large for the cache changes nothing.
  scratch_.clear();
  int64_t newly_pinned = 0, missing = 0;
  for (int64_t id : ids) {
    if (!scratch_.insert(id).second) continue;
    auto it = slot_of_.find(id);
    if (it == slot_of_.end()) {
      ++missing;
    } else if (!slots_[it->second].pinned) {
      ++newly_pinned;
    }
  }
  const int64_t need = pinned() + newly_pinned + missing;
  if (need > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the step needs ", need, " distinct rows resident at once but the cache holds ",
        capacity_, " rows"));
  }
  // Pin the hits before choosing any victim, so no row of this step is evicted by its misses.
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = slot_of_.find(ids[i]);
    if (it == slot_of_.end()) {
      slots[i] = -1;
      continue;
    }
    slots[i] = it->second;
    if (!slots_[it->second].pinned) {
      Pin(it->second);
      ++counters_.hits;
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (slots[i] >= 0) continue;
    auto it = slot_of_.find(ids[i]);
    if (it != slot_of_.end()) {  // a duplicate of a miss installed above
      slots[i] = it->second;
      continue;
    }
    const int64_t slot = TakeSlot(plan);
    slots_[slot].row = ids[i];
    slot_of_.emplace(ids[i], slot);
    Pin(slot);
    plan->fetch_rows.push_back(ids[i]);
    plan->fetch_slots.push_back(slot);
    ++counters_.misses;
    slots[i] = slot;
  }
  return absl::OkStatus();
}

void RowCacheIndex::EndStep(bool updated) {
  ++step_;
  for (int64_t slot : pinned_) {
    Slot& s = slots_[slot];
    s.pinned = false;
    s.last_step = step_;
    ++s.uses;
    if (updated && !s.dirty) {
      s.dirty = true;
      ++dirty_count_;
    }
    evictable_.insert(KeyOf(slot));
  }
  pinned_.clear();
  ++counters_.steps;
}

int64_t RowCacheIndex::SlotOf(int64_t row) const {
  auto it = slot_of_.find(row);
  return it == slot_of_.end() ? -1 : it->second;
}

void RowCacheIndex::AppendMisses(absl::Span<const int64_t> ids, std::vector<int64_t>* out) const {
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : ids) {
    if (slot_of_.contains(id) || !seen.insert(id).second) continue;
    out->push_back(id);
  }
}

void RowCacheIndex::DirtyRows(std::vector<int64_t>* rows, std::vector<int64_t>* slots) const {
  std::vector<std::pair<int64_t, int64_t>> d;
  d.reserve(static_cast<size_t>(dirty_count_));
  for (int64_t s = 0; s < capacity_; ++s) {
    if (slots_[s].row >= 0 && slots_[s].dirty) d.push_back({slots_[s].row, s});
  }
  std::sort(d.begin(), d.end());
  rows->clear();
  slots->clear();
  for (const auto& [r, s] : d) {
    rows->push_back(r);
    slots->push_back(s);
  }
}

void RowCacheIndex::ResidentIn(int64_t begin, int64_t end, std::vector<int64_t>* rows,
                               std::vector<int64_t>* slots) const {
  rows->clear();
  slots->clear();
  for (int64_t s = 0; s < capacity_; ++s) {
    const int64_t r = slots_[s].row;
    if (r >= begin && r < end) rows->push_back(r), slots->push_back(s);
  }
}

void RowCacheIndex::MarkClean(absl::Span<const int64_t> slots) {
  for (int64_t slot : slots) {
    Slot& s = slots_[slot];
    if (s.dirty) {
      s.dirty = false;
      --dirty_count_;
    }
  }
}

}  // namespace tessera
