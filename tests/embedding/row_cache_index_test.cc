// RowCacheIndex: slots, pins, LRU / LFU victims with their tie rules, the write-back plan of dirty
// victims, and a step too large for the cache (ResourceExhausted, nothing changed).
#include "embedding/row_cache_index.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> Step(RowCacheIndex& c, std::vector<int64_t> ids, RowCachePlan* plan,
                          bool updated = true) {
  std::vector<int64_t> slots(ids.size());
  plan->Clear();
  absl::Status st = c.Assign(ids, absl::MakeSpan(slots), plan);
  EXPECT_TRUE(st.ok()) << st;
  c.EndStep(updated);
  return slots;
}

TEST(RowCacheIndexTest, MissesTakeFreeSlotsLowestFirstAndDuplicatesShareOne) {
  RowCacheIndex c(4, CachePolicy::kLru);
  RowCachePlan plan;
  EXPECT_THAT(Step(c, {7, 3, 7, 9}, &plan), ElementsAre(0, 1, 0, 2));
  EXPECT_THAT(plan.fetch_rows, ElementsAre(7, 3, 9));
  EXPECT_THAT(plan.fetch_slots, ElementsAre(0, 1, 2));
  EXPECT_TRUE(plan.writeback_rows.empty());
  EXPECT_THAT(Step(c, {3, 9}, &plan), ElementsAre(1, 2));  // hits: no copies
  EXPECT_TRUE(plan.fetch_rows.empty());
  EXPECT_EQ(c.counters().hits, 2);
  EXPECT_EQ(c.counters().misses, 3);
  EXPECT_EQ(c.dirty(), 3);
}

TEST(RowCacheIndexTest, LruEvictsTheLeastRecentAndWritesBackOnlyDirtyVictims) {
  RowCacheIndex c(3, CachePolicy::kLru);
  RowCachePlan plan;
  Step(c, {1, 2}, &plan);                   // step 1: 1, 2 dirty
  Step(c, {3}, &plan, /*updated=*/false);   // step 2: 3 clean
  Step(c, {1}, &plan);                      // step 3: 1 recent
  // Victim order: 2 (step 1), then 3 (step 2); 1 is the most recent.
  std::vector<int64_t> slots = Step(c, {10, 11}, &plan);
  EXPECT_THAT(slots, ElementsAre(1, 2));    // 2 was in slot 1, 3 in slot 2
  EXPECT_THAT(plan.writeback_rows, ElementsAre(2));  // 3 was never updated
  EXPECT_THAT(plan.writeback_slots, ElementsAre(1));
  EXPECT_THAT(plan.fetch_rows, ElementsAre(10, 11));
  EXPECT_EQ(c.SlotOf(2), -1);
  EXPECT_EQ(c.SlotOf(1), 0);
  EXPECT_EQ(c.counters().evictions, 2);
  EXPECT_EQ(c.counters().writebacks, 1);
}

TEST(RowCacheIndexTest, LfuEvictsTheLeastUsedTiesByRecencyThenSlot) {
  RowCacheIndex c(3, CachePolicy::kLfu);
  RowCachePlan plan;
  Step(c, {1, 2, 3}, &plan);  // each used once
  Step(c, {1}, &plan);        // 1 used twice
  Step(c, {3}, &plan);        // 3 used twice, most recent
  // 2 has the fewest uses: evicted first. Then 1 (2 uses, less recent than 3).
  EXPECT_THAT(Step(c, {20}, &plan), ElementsAre(1));
  EXPECT_THAT(plan.writeback_rows, ElementsAre(2));
  // 20 now has 1 use: it goes next, before 1 and 3.
  EXPECT_THAT(Step(c, {21}, &plan), ElementsAre(1));
  EXPECT_THAT(plan.writeback_rows, ElementsAre(20));
  // Equal uses and equal last step: the lower slot goes first.
  RowCacheIndex d(2, CachePolicy::kLfu);
  Step(d, {5, 6}, &plan);
  EXPECT_THAT(Step(d, {7}, &plan), ElementsAre(0));
  EXPECT_THAT(plan.writeback_rows, ElementsAre(5));
}

TEST(RowCacheIndexTest, RowsOfTheCurrentStepAreNeverVictims) {
  RowCacheIndex c(3, CachePolicy::kLru);
  RowCachePlan plan;
  Step(c, {1, 2, 3}, &plan);
  // 1 is the LRU victim candidate but is also in this step: 2 and 3 go instead, even though the
  // misses come before 1 in the step's ids.
  std::vector<int64_t> slots(3);
  plan.Clear();
  ASSERT_TRUE(c.Assign(std::vector<int64_t>{8, 9, 1}, absl::MakeSpan(slots), &plan).ok());
  EXPECT_THAT(slots, ElementsAre(1, 2, 0));
  EXPECT_THAT(plan.writeback_rows, ElementsAre(2, 3));
  // A second Assign of the same step keeps all three pinned: nothing left to evict.
  std::vector<int64_t> more(1);
  absl::Status st = c.Assign(std::vector<int64_t>{4}, absl::MakeSpan(more), &plan);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  c.EndStep(true);
}

TEST(RowCacheIndexTest, TooManyDistinctRowsChangeNothing) {
  RowCacheIndex c(2, CachePolicy::kLru);
  RowCachePlan plan;
  Step(c, {1}, &plan);
  std::vector<int64_t> slots(3);
  plan.Clear();
  absl::Status st = c.Assign(std::vector<int64_t>{4, 5, 6}, absl::MakeSpan(slots), &plan);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("3 distinct rows"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("holds 2 rows"));
  EXPECT_TRUE(plan.fetch_rows.empty());
  EXPECT_EQ(c.SlotOf(1), 0);
  EXPECT_EQ(c.pinned(), 0);
}

TEST(RowCacheIndexTest, DirtyRowsInRowOrderAndMarkClean) {
  RowCacheIndex c(4, CachePolicy::kLru);
  RowCachePlan plan;
  Step(c, {9, 4, 6}, &plan);
  Step(c, {2}, &plan, /*updated=*/false);
  std::vector<int64_t> rows, slots;
  c.DirtyRows(&rows, &slots);
  EXPECT_THAT(rows, ElementsAre(4, 6, 9));
  EXPECT_THAT(slots, ElementsAre(1, 2, 0));
  c.MarkClean(slots);
  EXPECT_EQ(c.dirty(), 0);
  c.ResidentIn(3, 7, &rows, &slots);
  EXPECT_THAT(rows, ElementsAre(4, 6));
  std::vector<int64_t> misses;
  c.AppendMisses(std::vector<int64_t>{2, 5, 5, 9, 1}, &misses);
  EXPECT_THAT(misses, ElementsAre(5, 1));
}

}  // namespace
}  // namespace tessera
