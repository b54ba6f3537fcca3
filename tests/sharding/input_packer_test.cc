// InputPacker (sharding/input_packer.h): the trainer's input-dist packing without communicators,
// as `tessera-plan calibrate` times it. The unique ids it reports are the distinct ids of each
// (table, destination shard) request, counted here independently; a bad batch and a bad plan
// are errors naming what is wrong.
#include "sharding/input_packer.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

EmbeddingCollectionOptions TwoTables() {
  EmbeddingCollectionOptions co;
  co.num_features = 3;
  TableConfig a;
  a.name = "a";
  a.num_rows = 100;
  a.dim = 4;
  a.features = {0, 2};
  TableConfig b = a;
  b.name = "b";
  b.num_rows = 50;
  b.features = {1};
  co.tables = {a, b};
  return co;
}

// a row-wise over 2 ranks (rows [0, 40) on 0, [40, 100) on 1), b table-wise on rank 1.
ShardingPlan Plan() {
  ShardingPlan plan;
  plan.group_size = 2;
  TablePlan a;
  a.table = "a";
  a.type = ShardingType::kRowWise;
  a.shards = {
      {.row_begin = 0, .row_end = 40, .col_begin = 0, .col_end = 4, .rank = 0, .line = 0},
      {.row_begin = 40, .row_end = 100, .col_begin = 0, .col_end = 4, .rank = 1, .line = 0}};
  TablePlan b;
  b.table = "b";
  b.type = ShardingType::kTableWise;
  b.shards = {{.row_begin = 0, .row_end = 50, .col_begin = 0, .col_end = 4, .rank = 1, .line = 0}};
  plan.tables = {a, b};
  return plan;
}

TEST(InputPackerTest, CountsEachRequestsDistinctIds) {
  absl::StatusOr<std::unique_ptr<InputPacker>> packer = InputPacker::Create(TwoTables(), Plan(), 2);
  ASSERT_TRUE(packer.ok()) << packer.status();
  EXPECT_EQ((*packer)->num_requests(), 3);
  // 2 samples; features 0 and 2 read table a, feature 1 table b.
  KeyedJagged kj;
  kj.num_features = 3;
  kj.batch_size = 2;
  kj.offsets = {0, 3, 4, 6, 7, 9, 10};
  kj.values = {1, 39, 40, 1, 7, 7, 49, 99, 40, 2};
  // a's ids (features 0, 2): {1, 39, 40, 1, 99, 40, 2}: below 40 {1, 39, 2}, from 40 {40, 99};
  // b's: {7, 49}.
  std::set<int64_t> a_low, a_high, b;
  for (int f : {0, 2}) {
    for (int64_t j = kj.feature_begin(f); j < kj.feature_end(f); ++j) {
      (kj.values[j] < 40 ? a_low : a_high).insert(kj.values[j]);
    }
  }
  for (int64_t j = kj.feature_begin(1); j < kj.feature_end(1); ++j) b.insert(kj.values[j]);
  absl::StatusOr<int64_t> unique = (*packer)->Pack(kj);
  ASSERT_TRUE(unique.ok()) << unique.status();
  EXPECT_EQ(*unique, static_cast<int64_t>(a_low.size() + a_high.size() + b.size()));
  EXPECT_EQ(*unique, 7);
  // The maps are reused: the same batch again counts the same.
  unique = (*packer)->Pack(kj);
  ASSERT_TRUE(unique.ok());
  EXPECT_EQ(*unique, 7);
}

TEST(InputPackerTest, BadBatchAndBadPlanAreErrors) {
  absl::StatusOr<std::unique_ptr<InputPacker>> packer = InputPacker::Create(TwoTables(), Plan(), 2);
  ASSERT_TRUE(packer.ok()) << packer.status();
  KeyedJagged kj;
  kj.num_features = 3;
  kj.batch_size = 1;
  kj.offsets = {0, 1, 2, 3};
  kj.values = {5, 50, 6};  // table b has 50 rows
  absl::StatusOr<int64_t> unique = (*packer)->Pack(kj);
  ASSERT_FALSE(unique.ok());
  EXPECT_EQ(unique.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unique.status().message()), HasSubstr("50"));
  ShardingPlan bad = Plan();
  bad.tables[1].shards[0].rank = 2;  // outside a group of 2
  absl::StatusOr<std::unique_ptr<InputPacker>> refused = InputPacker::Create(TwoTables(), bad, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("packing plan"));
  EXPECT_FALSE(InputPacker::Create(TwoTables(), Plan(), 0).ok());
}

}  // namespace
}  // namespace tessera
