// RowCacheIndex: the host-side bookkeeping of a cache of table rows in `capacity` slots (the HBM
// cache of embedding/device_row_cache.h; device-independent, so the CPU tests cover all of it).
// It maps rows to slots, pins the rows of the current step, picks victims by policy, tracks
// which slots are dirty (updated since fetched or last written back) and, for every step,
// produces the plan of copies the caller must carry out:
//   1. writeback: each victim slot that was dirty, with the row it held: copy the slot's row to
//      the backing store BEFORE the slot is refilled;
//   2. fetch: each miss, with the slot it was given: copy the row from the backing store into
//      the slot.
// Hits need no copy. Slots and plans are deterministic: the same sequence of calls gives the
// same slots, victims and plan order whatever the machine.
//
// Policies (embedding/table_config.h CachePolicy): kLru evicts the unpinned row whose last step
// is oldest; kLfu the unpinned row used in the fewest steps since it was cached, ties the least
// recent. Remaining ties: the lowest slot. Free slots are used lowest first, before any victim.
//
// Step protocol: Assign (one or more per step; all their rows stay pinned), then EndStep
// (updated: the step's rows become dirty) or EndStep(false) for a read-only step.
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/table_config.h"  // CachePolicy

namespace tessera {

struct RowCachePlan {
  std::vector<int64_t> writeback_slots, writeback_rows;  // dirty victims, in eviction order
  std::vector<int64_t> fetch_rows, fetch_slots;          // misses, in first-seen order
  void Clear() {
    writeback_slots.clear();
    writeback_rows.clear();
    fetch_rows.clear();
    fetch_slots.clear();
  }
};

struct RowCacheCounters {
  int64_t steps = 0;       // EndStep calls
  int64_t hits = 0;        // distinct rows per Assign found resident
  int64_t misses = 0;      // distinct rows per Assign installed
  int64_t evictions = 0;   // resident rows replaced
  int64_t writebacks = 0;  // evicted rows that were dirty (plan.writeback entries)
};

class RowCacheIndex {
 public:
  // capacity >= 1 (not checked here; the cache validates its options).
  RowCacheIndex(int64_t capacity, CachePolicy policy);

  int64_t capacity() const { return capacity_; }
  int64_t resident() const { return static_cast<int64_t>(slot_of_.size()); }
  int64_t pinned() const { return static_cast<int64_t>(pinned_.size()); }
  int64_t dirty() const { return dirty_count_; }
  const RowCacheCounters& counters() const { return counters_; }

  // Gives every id a slot (slots[i] for ids[i]; duplicates share one), pins them, and writes
  // the copies to make (appended to `plan`, which the caller clears). Ids are rows >= 0 (range
  // checks are the caller's). ResourceExhausted, with nothing changed, when the step's distinct
  // rows (those pinned by earlier Assign calls of the step included) exceed capacity(); the
  // message gives both counts. REQUIRES slots.size() == ids.size().
  absl::Status Assign(absl::Span<const int64_t> ids, absl::Span<int64_t> slots,
                      RowCachePlan* plan);
  // Ends the step: pinned rows are unpinned (dirty when `updated`) and count one use.
  void EndStep(bool updated);

  // The slot of `row`, or -1 when it is not resident.
  int64_t SlotOf(int64_t row) const;
  // Appends the distinct ids not resident now, in first-seen order (a prefetch hint).
  void AppendMisses(absl::Span<const int64_t> ids, std::vector<int64_t>* out) const;
  // The dirty rows and their slots, in increasing row order.
  void DirtyRows(std::vector<int64_t>* rows, std::vector<int64_t>* slots) const;
  // The resident rows in [begin, end) and their slots, in slot order (one pass over the slots).
  void ResidentIn(int64_t begin, int64_t end, std::vector<int64_t>* rows,
                  std::vector<int64_t>* slots) const;
  // Marks `slots` clean (their rows were written back).
  void MarkClean(absl::Span<const int64_t> slots);

 private:
  struct Slot {
    int64_t row = -1;  // -1: free
    int64_t last_step = 0;
    int64_t uses = 0;
    bool dirty = false;
    bool pinned = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // policy order, then slot
  Key KeyOf(int64_t slot) const;
  void Pin(int64_t slot);
  int64_t TakeSlot(RowCachePlan* plan);

  int64_t capacity_;
  CachePolicy policy_;
  int64_t step_ = 0;
  int64_t dirty_count_ = 0;
  std::vector<Slot> slots_;
  std::vector<int64_t> free_;  // free slots, highest first (pop_back gives the lowest)
  absl::flat_hash_map<int64_t, int64_t> slot_of_;
  std::set<Key> evictable_;    // resident, unpinned slots in eviction order
  std::vector<int64_t> pinned_;
  absl::flat_hash_set<int64_t> scratch_;
  RowCacheCounters counters_;
};

}  // namespace tessera
