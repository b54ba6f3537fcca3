// DynamicTableConfig: a table without a size (the config's `model.tables[i].dynamic`). Its ids
// are raw 64-bit keys, not rows: a key gets a row of its own when it is admitted (admission),
// up to the table's num_rows (its capacity) rows at once, and loses it when evicted
// (eviction). Plain data, header-only on core/, so the plan types and the planner can name it
// (embedding/table_config.h holds one per table). embedding/dynamic_row_store.h runs it.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/enum_names.h"

namespace tessera {

// Which rows leave a dynamic table, always at a step boundary (DynamicRowStore::EndStep).
enum class EvictionPolicy {
  kNone,  // rows never leave; a key admitted into a full table is refused (counted)
  kLfu,   // when keys wait for room: the rows looked up least often go first
  kLru,   // when keys wait for room: the rows looked up least recently go first
  kTtl,   // rows not looked up for ttl_steps steps go; a full table refuses like kNone
};
inline constexpr EnumName<EvictionPolicy> kEvictionPolicyNames[] = {
    {EvictionPolicy::kNone, "none"},
    {EvictionPolicy::kLfu, "lfu"},
    {EvictionPolicy::kLru, "lru"},
    {EvictionPolicy::kTtl, "ttl"}};
// "none" / "lfu" / "lru" / "ttl" (dynamic.eviction.policy); Parse: InvalidArgument otherwise.
inline const char* EvictionPolicyName(EvictionPolicy p) { return NameIn(kEvictionPolicyNames, p); }
inline absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(const std::string& name) {
  return ParseIn(kEvictionPolicyNames, name, "eviction policy");
}

struct DynamicTableConfig {
  // Set when the table is dynamic (the config has a `dynamic:` block). Default: static.
  bool enabled = false;
  // The most rows held at once is the table's num_rows (TableConfig), which the config's
  // `dynamic.capacity_rows` sets; the table's memory is priced by it.

  // Admission: a key not in the table gets a row when
  //   min_count > 1:    it has been looked up min_count times (training steps only), counted in
  //                     a bounded count-min sketch of counter_slots 16-bit counters (2 hashes,
  //                     conservative update), so a stream of any number of keys costs fixed
  //                     memory; a collision can only admit a key early, never late.
  //   probability > 0:  a coin with this probability, drawn per lookup from a counter-based hash
  //                     of (seed, table, key, step): the same decision on any rank and resume.
  //   neither:          at its first lookup.
  // At most one of min_count > 1 and probability may be set.
  int64_t min_count = 1;         // Default: 1 (admit at once); at most 65535
  double probability = 0.0;      // Default: 0 (unused); in (0, 1]
  int64_t counter_slots = 0;     // Default (0): 4 * capacity, rounded up to a power of 2

  // Eviction.
  EvictionPolicy policy = EvictionPolicy::kNone;  // Default: none
  int64_t ttl_steps = 0;  // kTtl only (> 0): rows unused for this many steps are evicted
};

}  // namespace tessera
